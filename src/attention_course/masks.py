"""Masks: which keys each query may attend to, and the conventions in the wild.

Lesson: 03_masking

Our convention is the one of ``torch.nn.functional.scaled_dot_product_attention``: a bool mask
is True where a query MAY attend; a float mask is added to the scores (0 keeps a position,
-inf removes it). Both broadcast to the scores' shape ``(B, H, T, S)``.
``torch.nn.MultiheadAttention`` uses the opposite bool convention (True = ignore);
``to_mha_mask`` converts.
"""

import itertools

import torch
from torch import Tensor


def causal_mask(T: int, S: int | None = None, device=None) -> Tensor:
    """Bool mask that lets query t attend to keys 0..t only (True = may attend).

    Args:
        T: number of queries.
        S: number of keys (default T). Query t sees keys s <= t, as ``is_causal=True`` does
            in ``F.scaled_dot_product_attention`` (aligned at the top-left corner).
        device: where to build the mask.
    Returns:
        (T, S) bool tensor, lower-triangular including the diagonal.
    Lesson: 03_masking
    """
    S = T if S is None else S
    return torch.ones(T, S, dtype=torch.bool, device=device).tril()


def padding_mask(lengths, S: int) -> Tensor:
    """Bool mask that hides padded keys: True where key s < lengths[b] (True = may attend).

    Args:
        lengths: (B,) number of real (non-padding) tokens in each sequence.
        S: padded key length.
    Returns:
        (B, 1, 1, S) bool tensor, broadcasting over heads H and queries T.
    Lesson: 03_masking
    """
    lengths = torch.as_tensor(lengths)
    if lengths.ndim != 1 or lengths.is_floating_point():
        raise ValueError(f"lengths must be a 1-D integer tensor (B,), got shape "
                         f"{tuple(lengths.shape)} and dtype {lengths.dtype}")
    if ((lengths < 0) | (lengths > S)).any():
        raise ValueError(f"lengths must lie in 0..S={S}, got {lengths.tolist()}")
    positions = torch.arange(S, device=lengths.device)  # (S,)
    return (positions < lengths[:, None])[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


def broadcast_shape(*shapes) -> tuple[int, ...] | None:
    """The shape that ``shapes`` broadcast to, or None if they do not (torch's rule, without
    torch.broadcast_shapes, whose first call imports sympy)."""
    result = []
    for sizes in itertools.zip_longest(*(reversed(tuple(s)) for s in shapes), fillvalue=1):
        wide = set(sizes) - {1}
        if len(wide) > 1:
            return None
        result.append(wide.pop() if wide else 1)
    return tuple(reversed(result))


def check_mask(attn_mask: Tensor, scores_shape) -> None:
    """Raise a clear error unless ``attn_mask`` is a usable mask for scores of this shape."""
    if not isinstance(attn_mask, Tensor):
        raise TypeError(f"attn_mask must be a tensor, got {type(attn_mask).__name__}")
    if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
        raise TypeError(
            f"attn_mask must be bool (True = may attend) or float (added to the scores), "
            f"got {attn_mask.dtype}. A 1/0 mask (Hugging Face style) converts with "
            f"from_hf_mask, or with mask.bool() if 1 means 'may attend'.")
    if broadcast_shape(attn_mask.shape, scores_shape) != tuple(scores_shape):
        raise ValueError(
            f"attn_mask of shape {tuple(attn_mask.shape)} cannot broadcast to the scores of "
            f"shape {tuple(scores_shape)} (B, H, T, S). Use (T, S) for one mask for all, or "
            f"(B, 1, 1, S) for a per-sequence key mask.")
    if attn_mask.is_floating_point() and attn_mask.isnan().any():
        raise ValueError("attn_mask contains NaN; use -inf (or a large negative number) to hide "
                         "a position and 0 to keep it")


def apply_mask(scores: Tensor, attn_mask: Tensor | None) -> Tensor:
    """Mask attention scores before the softmax.

    Args:
        scores: (B, H, T, S) attention scores (any leading dims).
        attn_mask: None; a bool mask, True where a query may attend (the other scores become
            -inf); or a float mask added to the scores. Broadcasts to ``scores``.
    Returns:
        (B, H, T, S) masked scores; the input is not modified.
    Lesson: 03_masking
    """
    if attn_mask is None:
        return scores
    check_mask(attn_mask, scores.shape)
    if attn_mask.dtype == torch.bool:
        return scores.masked_fill(~attn_mask, float("-inf"))
    return scores + attn_mask.to(scores.dtype)  # a float32 mask also serves float64 scores


def to_additive_mask(attn_mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Turn a bool mask (True = may attend) into a float mask: 0 where allowed, -inf elsewhere.

    Float masks are returned unchanged (cast to ``dtype``).
    Lesson: 03_masking
    """
    if attn_mask.dtype != torch.bool:
        return attn_mask.to(dtype)
    zeros = torch.zeros(attn_mask.shape, dtype=dtype, device=attn_mask.device)
    return zeros.masked_fill(~attn_mask, float("-inf"))


def to_mha_mask(attn_mask: Tensor) -> Tensor:
    """Convert our bool mask (True = may attend) to ``nn.MultiheadAttention``'s (True = ignore).

    Float masks mean the same in both conventions and are returned unchanged.
    Lesson: 03_masking
    """
    return ~attn_mask if attn_mask.dtype == torch.bool else attn_mask


def from_hf_mask(attention_mask: Tensor) -> Tensor:
    """Convert a Hugging Face style ``attention_mask`` (B, S) of 1 = token, 0 = padding.

    Returns:
        (B, 1, 1, S) bool mask in our convention (True = may attend).
    Lesson: 03_masking
    """
    return (attention_mask != 0)[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


def combine_masks(first: Tensor | None, second: Tensor | None) -> Tensor | None:
    """A mask that allows a position only where both masks allow it (None = allow all).

    Two bool masks combine with AND; otherwise both become additive float masks and add up.
    Lesson: 03_masking
    """
    if first is None or second is None:
        return second if first is None else first
    if first.dtype == second.dtype == torch.bool:
        return first & second
    dtype = first.dtype if first.is_floating_point() else second.dtype
    return to_additive_mask(first, dtype) + to_additive_mask(second, dtype)
