"""Scaled dot-product attention: softmax(Q K^T / sqrt(D)) V.

Lesson: 02_scaled_dot_product (the masked version is completed in 03_masking)
"""

import torch
import torch.nn.functional as F
from torch import Tensor

from .masks import apply_mask, causal_mask, combine_masks, padding_mask


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype to compute in for inputs of ``dtype``: float32 for float16 and bfloat16, else
    ``dtype`` itself (float32 and float64 are computed as they are).

    16-bit floats keep 11 (float16) or 8 (bfloat16) significant bits: too few to add up many
    exponentials and weighted values, or to count positions (bfloat16 holds whole numbers
    exactly only up to 256). PyTorch computes 16-bit attention in float32 and rounds the result
    to 16 bits once, at the end; the course's attention, tiled attention and rotary angles do
    the same.
    Lesson: 02_scaled_dot_product
    """
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Numerically stable softmax: exp(x - max) / sum(exp(x - max)) along ``dim``.

    Subtracting the maximum changes nothing mathematically and keeps exp() from overflowing
    on large logits. Like ``torch.softmax``, a slice that is all -inf gives NaN, and an empty
    ``dim`` an empty result.
    Args:
        x: tensor of any shape and floating dtype (16-bit floats are computed in float32).
        dim: the axis whose entries become probabilities.
    Returns:
        tensor of the shape and dtype of ``x``; entries along ``dim`` are positive and sum to 1.
    Lesson: 02_scaled_dot_product
    """
    if x.numel() == 0:  # nothing to normalise (e.g. no keys): no maximum to subtract either
        return x.clone()
    wide = x.to(compute_dtype(x.dtype))  # float16, bfloat16 -> float32; the others as they are
    shifted = wide - wide.amax(dim=dim, keepdim=True)
    exps = shifted.exp()
    return (exps / exps.sum(dim=dim, keepdim=True)).to(x.dtype)


def attention_scores(query: Tensor, key: Tensor, scale: float | None = None) -> Tensor:
    """Similarity of every query with every key: Q K^T * scale, scale = 1/sqrt(D) by default.

    Args:
        query: (B, H, T, D) queries (any leading dims).
        key: (B, H, S, D) keys.
        scale: factor applied to the dot products; None means 1/sqrt(D).
    Returns:
        (B, H, T, S) scores in the dtype of ``query`` (16-bit floats are computed in float32).
    Lesson: 02_scaled_dot_product
    """
    check_query_key(query, key)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    wide = compute_dtype(query.dtype)  # float32 for 16-bit floats
    scores = query.to(wide) @ key.to(wide).transpose(-2, -1) * scale  # (B,H,T,D) @ (B,H,D,S)
    return scores.to(query.dtype)  # (B, H, T, S)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None):
    """Attention as in ``F.scaled_dot_product_attention``, also returning the weights.

    Args:
        query: (B, H, T, D) queries (any leading dims that broadcast).
        key: (B, H, S, D) keys.
        value: (B, H, S, Dv) values.
        attn_mask: None, a bool mask (True = may attend) or a float mask added to the scores;
            broadcasts to (B, H, T, S).
        dropout_p: dropout probability on the weights (always applied when > 0, as in PyTorch).
        is_causal: also apply ``causal_mask(T, S)``, combined with ``attn_mask`` if both given.
        scale: factor for the scores; None means 1/sqrt(D).
    Returns:
        out: (B, H, T, Dv) weighted sums of the values.
        weights: (B, H, T, S) attention weights; each row sums to 1, or is all 0 where every
            key is masked (that query's output is then 0, as in PyTorch; with S = 0 keys
            ``weights`` is empty and ``out`` is 0).
        Both in the dtype of ``query``; 16-bit floats are computed in float32, as in PyTorch.
    Lesson: 02_scaled_dot_product (masks: 03_masking)
    """
    check_query_key(query, key)
    check_key_value(key, value)
    dtype, wide = query.dtype, compute_dtype(query.dtype)  # float32 for 16-bit floats
    query, key, value = query.to(wide), key.to(wide), value.to(wide)
    scores = attention_scores(query, key, scale)  # (B, H, T, S)
    may_hide_whole_rows = attn_mask is not None  # the causal mask alone leaves every query key 0
    if is_causal:
        T, S = scores.shape[-2:]
        attn_mask = combine_masks(causal_mask(T, S, device=scores.device), attn_mask)
    scores = apply_mask(scores, attn_mask)
    if may_hide_whole_rows:
        fully_masked = scores.isneginf().all(dim=-1, keepdim=True)  # (B, H, T, 1)
        weights = softmax(scores.masked_fill(fully_masked, 0.0)).masked_fill(fully_masked, 0.0)
    else:
        weights = softmax(scores)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    out = weights @ value  # (B,H,T,S) @ (B,H,S,Dv) -> (B,H,T,Dv)
    return out.to(dtype), weights.to(dtype)


def masked_attention(query: Tensor, key: Tensor, value: Tensor,
                     attn_mask: Tensor | None = None, is_causal: bool = False,
                     scale: float | None = None):
    """Lesson 03's masked attention: ``scaled_dot_product_attention`` without dropout, with the
    signature of the lesson's exercise (``is_causal`` third after the tensors and the mask).

    Args and Returns: as ``scaled_dot_product_attention``; bool mask True = may attend, a float
    mask is added to the scores.
    Lesson: 03_masking
    """
    return scaled_dot_product_attention(query, key, value, attn_mask, is_causal=is_causal,
                                        scale=scale)


def packed_attention(query: Tensor, key: Tensor, value: Tensor, lengths: Tensor,
                     is_causal: bool = False) -> Tensor:
    """Attention within each of B sequences of different lengths, stored end to end.

    The rows of ``query``, ``key`` and ``value`` are the tokens of sequence 0, then those of
    sequence 1, and so on (the "packed" layout of variable-length attention kernels). Each
    sequence attends to its own keys only, as if it were attended alone: the sequences are
    padded into one (B, L) batch, pad keys are hidden by a padding mask (combined with the
    causal mask by AND when ``is_causal``), and the pad rows are dropped again.
    Args:
        query: (N, D), key: (N, D), value: (N, Dv), N = lengths.sum().
        lengths: (B,) integer tensor, the length of each sequence (0 allowed).
        is_causal: token t of a sequence sees that sequence's tokens 0..t only.
    Returns:
        (N, Dv) output, in the packed layout of ``query``.
    Lesson: 03_masking
    """
    lengths = torch.as_tensor(lengths, device=query.device)
    if lengths.ndim != 1 or int(lengths.sum()) != query.shape[0]:
        raise ValueError(f"lengths must be (B,) and add up to N = {query.shape[0]} tokens, got "
                         f"{lengths.tolist()}")
    B, L = lengths.shape[0], int(lengths.max()) if lengths.numel() else 0
    real = torch.arange(L, device=query.device) < lengths[:, None]  # (B, L) True at tokens
    q, k, v = (x.new_zeros(B, L, x.shape[-1]).index_put((real,), x)  # (N, .) -> (B, L, .)
               for x in (query, key, value))
    keys = padding_mask(lengths, L)[:, 0]  # (B, 1, L): pad keys hidden from every query
    out, _ = masked_attention(q, k, v, attn_mask=keys, is_causal=is_causal)  # (B, L, Dv)
    return out[real]  # (B, L, Dv) -> (N, Dv): the pad rows dropped


def check_query_key(query: Tensor, key: Tensor) -> None:
    """Raise a clear error unless query and key fit together."""
    if query.ndim < 2 or key.ndim < 2:
        raise ValueError(f"query and key need at least 2 dims (..., T, D) and (..., S, D), got "
                         f"{tuple(query.shape)} and {tuple(key.shape)}")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"query and key must share the head dim D: query {tuple(query.shape)} "
                         f"has D={query.shape[-1]}, key {tuple(key.shape)} has D={key.shape[-1]}")
    _check_batch_dims("query", query, "key", key)
    _check_dtypes("query", query, "key", key)


def check_key_value(key: Tensor, value: Tensor) -> None:
    """Raise a clear error unless key and value fit together."""
    if value.ndim < 2 or value.shape[-2] != key.shape[-2]:
        raise ValueError(f"key and value must have the same length S: key {tuple(key.shape)}, "
                         f"value {tuple(value.shape)} (expected (..., S, Dv))")
    _check_batch_dims("key", key, "value", value)
    _check_dtypes("key", key, "value", value)


def _check_batch_dims(name_a: str, a: Tensor, name_b: str, b: Tensor) -> None:
    # torch's broadcasting rule, written here: masks.broadcast_shape is lesson 03's module,
    # which lessons that import this one may not see under the grader
    for n, m in zip(reversed(a.shape[:-2]), reversed(b.shape[:-2]), strict=False):
        if n != m and 1 not in (n, m):
            raise ValueError(f"the batch dims of {name_a} {tuple(a.shape[:-2])} and {name_b} "
                             f"{tuple(b.shape[:-2])} do not broadcast")


def _check_dtypes(name_a: str, a: Tensor, name_b: str, b: Tensor) -> None:
    # as in F.scaled_dot_product_attention; checked before a 16-bit input is cast to float32
    if a.dtype != b.dtype:
        raise ValueError(f"{name_a} and {name_b} must have the same dtype, got {a.dtype} and "
                         f"{b.dtype}")
