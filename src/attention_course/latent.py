"""Multi-head latent attention (MLA): a key/value cache made small by compression.

Lesson: 10_latent_attention

DeepSeek-V2 (arXiv 2405.04434, section 2.1) caches one low-rank latent per token instead of
every head's key and value: c = x W_DKV, of width d_c, and every head h recovers its keys
k = c W_UK[h] and values v = c W_UV[h] from it. Two products make the recovery unnecessary:
q . (c W_UK[h]) = (q W_UK[h]^T) . c, so the key up-projection can be folded into the query
("absorbed"), and softmax(...) (c W_UV[h]) = (softmax(...) c) W_UV[h], so the value
up-projection can be applied after the weighted sum (and merged into the output projection).
In the absorbed form every head attends to the latent itself: multi-query attention with one
key/value head of width d_c.

Rotary positions do not survive the absorption: a key rotated at its position s,
R_s (c W_UK[h]), gives q_t . R_s c W_UK[h] = (q_t R_{s - t}) W_UK[h]^T . c, a matrix between
the query and the latent that depends on the offset. DeepSeek-V2 therefore keeps the latent
free of positions and adds a small **decoupled** rotary part: a key k_R = RoPE(x W_KR) of width
d_R shared by every head (cached beside the latent) and a rotary query q_R = RoPE(x W_QR[h]) per
head. Each head's score is (q_C . k_C + q_R . k_R) / sqrt(D + d_R): the scale counts the width
of both parts. The cache then holds d_c + d_R numbers per token and layer.

Conventions here: weights are tensors applied on the right (x @ W); per-head weights carry the
head axis first, (H, in, out); rotations are lesson 06's half-split ``rotate_pairs``. The
queries are not compressed (DeepSeek-V2 also compresses them, to save training memory; it does
not change the cache), and the latent is not normalised (DeepSeek-V3 adds an RMSNorm there).
"""

import math

import torch
from torch import Tensor, nn

from .attention import scaled_dot_product_attention
from .inference import GroupedQueryAttention, grouped_query_attention
from .multihead import merge_heads, split_heads
from .rope import rotate_pairs


def _bottom_right(T: int, S: int, device) -> Tensor:
    """(T, S) bool, True = may attend: the T queries are the last T of the S positions."""
    return torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T)


def naive_latent_attention(query: Tensor, latent: Tensor, w_uk: Tensor, w_uv: Tensor,
                           scale: float | None = None) -> Tensor:
    """Causal attention from a latent cache, the naive way: every head's keys and values are
    up-projected from the latent, then attended.

    Args:
        query: (B, H, T, D) the content queries of the T newest tokens, the last T of the S
            positions (any leading dims before the head axis).
        latent: (B, S, d_c) the latent of every token so far, the T newest last.
        w_uk: (H, d_c, D) key up-projection of each head: keys = latent @ w_uk[h].
        w_uv: (H, d_c, Dv) value up-projection of each head.
        scale: factor for the scores; None means 1/sqrt(D), the width of a head's key.
    Returns:
        (B, H, T, Dv): new token t (at position S - T + t) attends to positions 0 .. S - T + t.
    Lesson: 10_latent_attention
    """
    shared = latent.unsqueeze(-3)  # (B, S, d_c) -> (B, 1, S, d_c): one latent for every head
    keys = shared @ w_uk  # (B, 1, S, d_c) @ (H, d_c, D) -> (B, H, S, D)
    values = shared @ w_uv  # (B, 1, S, d_c) @ (H, d_c, Dv) -> (B, H, S, Dv)
    allowed = _bottom_right(query.shape[-2], latent.shape[-2], query.device)
    out, _ = scaled_dot_product_attention(query, keys, values, attn_mask=allowed, scale=scale)
    return out


def absorbed_latent_attention(query: Tensor, latent: Tensor, w_uk: Tensor, w_uv: Tensor,
                              scale: float | None = None) -> Tensor:
    """The same attention as ``naive_latent_attention``, computed without any head's keys or
    values: the key up-projection folded into the query, the value up-projection applied after
    the weighted sum of the latents.

    Args and Returns: as ``naive_latent_attention``; the scale is 1/sqrt(D) by default, D the
    width of a head's key (the query's last axis), not the latent's width.
    Lesson: 10_latent_attention
    """
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    q_latent = query @ w_uk.transpose(-2, -1)  # (B, H, T, D) @ (H, D, d_c) -> (B, H, T, d_c)
    shared = latent.unsqueeze(-3)  # (B, 1, S, d_c): the one key/value head of every query head
    allowed = _bottom_right(query.shape[-2], latent.shape[-2], query.device)
    out_latent, _ = scaled_dot_product_attention(q_latent, shared, shared, attn_mask=allowed,
                                                 scale=scale)  # (B, H, T, d_c)
    return out_latent @ w_uv  # (B, H, T, d_c) @ (H, d_c, Dv) -> (B, H, T, Dv)


class LatentAttention(nn.Module):
    """Causal self-attention with a latent key/value cache and a decoupled rotary key
    (DeepSeek-V2's multi-head latent attention), run as a decoder runs it.

    Parameters (x @ W, the head axis first): w_q (H, C, D) content queries, w_qr (H, C, d_R)
    rotary queries, w_dkv (C, d_c) the down-projection to the latent, w_kr (C, d_R) the rotary
    key shared by every head, w_uk (H, d_c, D) and w_uv (H, d_c, D) the up-projections,
    w_o (H, D, C) the output projection; D = C / H.
    Lesson: 10_latent_attention
    """

    def __init__(self, d_model: int, n_heads: int, d_latent: int, d_rope: int,
                 base: float = 10000.0):
        super().__init__()
        if d_model % n_heads or d_rope % 2:
            raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}, and the rotary "
                             f"width d_rope={d_rope} must be even")
        H, C, D = n_heads, d_model, d_model // n_heads
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, D
        self.d_latent, self.d_rope, self.base = d_latent, d_rope, base

        def weight(*shape, fan_in):
            return nn.Parameter(torch.randn(*shape) / math.sqrt(fan_in))

        self.w_q = weight(H, C, D, fan_in=C)
        self.w_qr = weight(H, C, d_rope, fan_in=C)
        self.w_dkv = weight(C, d_latent, fan_in=C)
        self.w_kr = weight(C, d_rope, fan_in=C)
        self.w_uk = weight(H, d_latent, D, fan_in=d_latent)
        self.w_uv = weight(H, d_latent, D, fan_in=d_latent)
        self.w_o = weight(H, D, C, fan_in=C)

    def forward(self, x: Tensor, cache: tuple[Tensor, Tensor] | None = None):
        """Attend from T new tokens to the cache and to the new tokens up to each one.

        Args:
            x: (B, T, C) the new tokens, at positions P .. P+T-1 after the P cached ones.
            cache: None (P = 0), or what the previous call returned.
        Returns:
            out: (B, T, C) the new tokens' outputs, after the output projection.
            cache: (latent (B, P + T, d_c), rope_key (B, P + T, d_R)): the latents and the
                rotary keys (rotated at their positions) of every token so far.
        """
        P = 0 if cache is None else cache[0].shape[-2]
        positions = torch.arange(P, P + x.shape[-2], device=x.device)  # (T,)
        latent = x @ self.w_dkv  # (B, T, C) @ (C, d_c) -> (B, T, d_c)
        rope_key = rotate_pairs(x @ self.w_kr, positions, base=self.base)  # (B, T, d_R)
        if cache is not None:
            latent = torch.cat([cache[0], latent], dim=-2)  # (B, S, d_c)
            rope_key = torch.cat([cache[1], rope_key], dim=-2)  # (B, S, d_R)
        heads = x.unsqueeze(-3)  # (B, 1, T, C)
        q_latent = heads @ self.w_q @ self.w_uk.transpose(-2, -1)  # (B, H, T, d_c): absorbed
        q_rope = rotate_pairs(heads @ self.w_qr, positions, base=self.base)  # (B, H, T, d_R)
        query = torch.cat([q_latent, q_rope], dim=-1)  # (B, H, T, d_c + d_R)
        key = torch.cat([latent, rope_key], dim=-1).unsqueeze(-3)  # (B, 1, S, d_c + d_R)
        allowed = _bottom_right(x.shape[-2], latent.shape[-2], x.device)
        out, _ = scaled_dot_product_attention(query, key, latent.unsqueeze(-3), attn_mask=allowed,
                                              scale=(self.d_head + self.d_rope) ** -0.5)
        out = out @ self.w_uv @ self.w_o  # (B, H, T, d_c) -> (B, H, T, D) -> (B, H, T, C)
        return out.sum(dim=-3), (latent, rope_key)  # heads added up: (B, T, C)


KINDS = ("MHA", "GQA", "MQA", "MLA")


def cache_bytes_per_token(kind: str, config: dict) -> int:
    """Bytes one token adds to one layer's key/value cache.

    Args:
        kind: "MHA" (H key and value heads), "GQA" (n_kv_heads of each), "MQA" (one of each)
            or "MLA" (one latent of width d_latent and one shared rotary key of width d_rope).
        config: n_heads, d_head, n_kv_heads (GQA), d_latent and d_rope (MLA), and
            bytes_per_number (2 for bfloat16).
    Returns:
        an int, the number of bytes.
    Lesson: 10_latent_attention
    """
    heads = {"MHA": config["n_heads"], "GQA": config.get("n_kv_heads"), "MQA": 1}
    if kind == "MLA":
        numbers = config["d_latent"] + config["d_rope"]  # the latent and the shared rotary key
    elif kind in heads:
        numbers = 2 * heads[kind] * config["d_head"]  # a key and a value per key/value head
    else:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return numbers * config["bytes_per_number"]


def cache_bytes(cache) -> int:
    """Bytes of every tensor in a cache: a tensor, or tuples, lists and dicts of them."""
    if isinstance(cache, Tensor):
        return cache.nbytes
    if isinstance(cache, dict):
        cache = list(cache.values())
    if isinstance(cache, tuple | list):
        return sum(cache_bytes(part) for part in cache)
    return 0


# ---------------------------------------------------------------- the lesson's experiments

class SelfAttention(nn.Module):
    """A layer whose forward is ``forward(x, cache=None) -> (out, cache)`` (``LatentAttention``)
    as lesson 06's ``EchoModel`` calls its attention: ``(query, key, value, is_causal=True)``
    with query = key = value, returning (out, None). Lesson: 10_latent_attention"""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, query: Tensor, key: Tensor, value: Tensor, attn_mask=None,
                is_causal: bool = True):
        return self.layer(query)[0], None


class RotaryGroupedQueryAttention(GroupedQueryAttention):
    """Lesson 07's grouped-query layer with rotary positions (queries and keys rotated at
    positions 0 .. T-1 and 0 .. S-1): the GQA model of the lesson's training experiment.
    Lesson: 10_latent_attention"""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, bias: bool = True,
                 base: float = 10000.0):
        super().__init__(d_model, n_heads, n_kv_heads, bias)
        self.base = base

    def forward(self, query: Tensor, key: Tensor, value: Tensor, is_causal: bool = False):
        q = rotate_pairs(split_heads(self.q_proj(query), self.n_heads), base=self.base)
        k = rotate_pairs(split_heads(self.k_proj(key), self.n_kv_heads), base=self.base)
        v = split_heads(self.v_proj(value), self.n_kv_heads)  # (B, G, S, D)
        out, weights = grouped_query_attention(q, k, v, is_causal=is_causal)  # (B, H, T, D)
        return self.out_proj(merge_heads(out)), weights  # (B, T, C)
