"""Rotary position embeddings (RoPE): positions enter attention by rotating queries and keys.

Each head's D dimensions form D/2 pairs, and the pair i of the vector at position t is rotated
by the angle t * base^(-2i/D): fast turns for the first pairs, slow ones for the last. The
score of a rotated query at position t and a rotated key at position s then depends on the
positions only through the offset t - s, since rotating both by t and s is rotating the key
by s - t relative to the query.

Pairing convention: **half-split**. Dimension i is paired with dimension i + D/2 (i < D/2),
as in GPT-NeoX, Hugging Face's LLaMA (its ``rotate_half``) and ONNX's ``RotaryEmbedding``
with ``interleaved=0``. The other convention, **interleaved**, pairs dimensions 2i and 2i + 1
(the RoFormer paper, GPT-J, Meta's original LLaMA code). Both rotate by the same angles and
differ only by a fixed permutation of the dimensions, but weights trained with one do not
work with the other.

Lesson: 06_rotary_positions
"""

import torch
from torch import Tensor

from .attention import compute_dtype, scaled_dot_product_attention
from .multihead import MultiHeadAttention, merge_heads, split_heads


def rotary_angles(positions: int | Tensor, d_head: int, *, base: float = 10000.0, device=None,
                  dtype=torch.float32) -> Tensor:
    """The rotation angle of every position and pair: angles[t, i] = p_t / base^(2i / D).

    Args:
        positions: the positions p_t of the tokens: an int T for the positions 0 .. T-1, or a
            tensor of T positions (e.g. ``torch.arange(P, P + T)`` for T tokens after a cache
            of P), integer or float, of any shape (..., T).
        d_head: head width D, even; there are D/2 pairs.
        base: wavelength scale; the slowest pair turns once every 2*pi*base^((D-2)/D) steps.
        device, dtype: where, and in which float dtype, the angles are returned.
    Returns:
        (..., T, D/2) angles in radians, (T, D/2) for an int or a (T,) tensor; on ``device``,
        else on the device of the positions; for a 16-bit dtype computed in float32 and
        rounded once.
        Even so a bfloat16 angle near t is off by up to t/512 radians: rotate 16-bit queries
        and keys with float32 angles, as ``RotaryMultiHeadAttention`` does.
    Lesson: 06_rotary_positions
    """
    if d_head % 2:
        raise ValueError(f"rotary embeddings rotate pairs: the head width {d_head} must be even")
    wide = compute_dtype(dtype)  # float32 for 16-bit floats: positions stay exact
    if isinstance(positions, int):
        positions = torch.arange(positions, device=device)
    position = positions.to(device=device, dtype=wide)[..., None]  # (..., T, 1)
    two_i = torch.arange(0, d_head, 2, device=position.device, dtype=wide)  # (D/2,)
    return (position / base ** (two_i / d_head)).to(dtype)  # (..., T, 1) / (D/2,): (..., T, D/2)


def apply_rotary(x: Tensor, angles: Tensor) -> Tensor:
    """Rotate every half-split pair (x_i, x_{i+D/2}) of each position by its angle.

    (x_i, x_{i+D/2}) -> (x_i cos a - x_{i+D/2} sin a,  x_i sin a + x_{i+D/2} cos a),
    a = angles[t, i]: a rotation by +a in the plane of the pair, so norms are kept.
    Args:
        x: (..., T, D) queries or keys, e.g. (B, H, T, D).
        angles: (T, D/2) angles of the T positions, e.g. ``rotary_angles(T, D)``, or any
            shape that broadcasts against (..., T, D/2); float32 angles for a 16-bit x rotate
            it in float32.
    Returns:
        (..., T, D) rotated tensor, in the dtype of x.
    Lesson: 06_rotary_positions
    """
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]  # (..., T, D/2) each: the two halves of every pair
    cos, sin = angles.cos(), angles.sin()  # (T, D/2), broadcast over the leading axes
    rotated = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (..., T, D)
    return rotated.to(x.dtype)


def rotate_pairs(x: Tensor, positions: Tensor | None = None, *, base: float = 10000.0) -> Tensor:
    """Turn every half-split pair of x by the angle of its position: ``rotary_angles`` and
    ``apply_rotary`` in one step, with angles in at least 32 bits.

    Args:
        x: (..., T, D) queries or keys, D even.
        positions: None for the positions 0 .. T-1, or a (T,) tensor of positions (e.g.
            ``torch.arange(P, P + T)`` after a cache of P).
        base: the wavelength scale.
    Returns:
        (..., T, D) tensor in the dtype of x: pair i of token t turned by p_t / base^(2i/D),
        the angles made on the device of x in its dtype, float32 for 16-bit x.
    Lesson: 06_rotary_positions
    """
    at = x.shape[-2] if positions is None else positions
    angles = rotary_angles(at, x.shape[-1], base=base, device=x.device,
                           dtype=compute_dtype(x.dtype))
    return apply_rotary(x, angles)


class RotaryMultiHeadAttention(MultiHeadAttention):
    """Lesson 04's multi-head attention with rotary positions: after the projections and the
    split into heads, each head's queries and keys are rotated by their positions (by default
    query t at position t and key s at position s, counted from 0; ``forward`` may place them
    elsewhere, e.g. after a cache); the values are not.

    The angles come from the head width D, not the model width C, because the scores are dot
    products within a head. Masks follow the course convention (bool True = may attend).
    Lesson: 06_rotary_positions
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True,
                 base: float = 10000.0, device=None, dtype=None):
        super().__init__(d_model, n_heads, dropout, bias, device, dtype)
        if self.d_head % 2:
            raise ValueError(f"rotary heads need an even width, got D = {self.d_head}")
        self.base = base

    def forward(self, query: Tensor, key: Tensor, value: Tensor,
                attn_mask: Tensor | None = None, is_causal: bool = False,
                query_positions: Tensor | None = None, key_positions: Tensor | None = None):
        """Attend from (B, T, C) queries to (B, S, C) keys and values, rotating q and k.

        Args:
            query_positions: (T,) positions of the queries; None means 0 .. T-1.
            key_positions: (S,) positions of the keys; None means 0 .. S-1. For T new tokens
                after a cache of P, both are ``torch.arange(P, P + T)``.
            attn_mask, is_causal: as in ``MultiHeadAttention`` (is_causal hides key s from
                query t when s > t, counted in these T queries and S keys).
        Returns:
            out: (B, T, C) attended values after the output projection.
            weights: (B, H, T, S) attention weights of every head.
        """
        q = split_heads(self.q_proj(query), self.n_heads)  # (B, T, C) -> (B, H, T, D)
        k = split_heads(self.k_proj(key), self.n_heads)  # (B, S, C) -> (B, H, S, D)
        v = split_heads(self.v_proj(value), self.n_heads)  # (B, S, C) -> (B, H, S, D)
        # angles of 16-bit q and k stay float32: apply_rotary rotates in float32 and rounds once
        factory = {"base": self.base, "device": q.device, "dtype": compute_dtype(q.dtype)}
        q_at = q.shape[-2] if query_positions is None else query_positions  # T or (T,)
        k_at = k.shape[-2] if key_positions is None else key_positions  # S or (S,)
        q = apply_rotary(q, rotary_angles(q_at, self.d_head, **factory))
        k = apply_rotary(k, rotary_angles(k_at, self.d_head, **factory))
        dropout_p = self.dropout if self.training else 0.0
        out, weights = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
        return self.out_proj(merge_heads(out)), weights  # (B, H, T, D) -> (B, T, C)
