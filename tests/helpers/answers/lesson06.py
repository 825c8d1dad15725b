"""Lesson 06's answers as students write them: the class a student starts from, three correct
styles per exercise (rotate_pairs also from its two pieces, the angles and the rotation, each
in several styles), a shortcut, and answers with a catalogued mistake (some recognised by a
sign), every one of the lesson's own mistakes written by hand."""

import math

import torch

from attention_course import attention, multihead, rope

NEG_INF = float("-inf")


# ---------------------------------------------------------------- rotary_angles

def angles_by_outer(positions, d_head, *, base=10000.0, device=None, dtype=torch.float32):
    if isinstance(positions, int):
        positions = torch.arange(positions)
    inverse_frequencies = 1.0 / base ** (torch.arange(0, d_head, 2, dtype=dtype,
                                                      device=device) / d_head)
    return torch.outer(positions.to(dtype=dtype, device=device), inverse_frequencies)


def angles_by_loops(positions, d_head, *, base=10000.0, device=None, dtype=torch.float32):
    ts = range(positions) if isinstance(positions, int) else positions.tolist()
    rows = [[t / math.pow(base, 2 * i / d_head) for i in range(d_head // 2)] for t in ts]
    return torch.tensor(rows, dtype=dtype, device=device).reshape(len(ts), d_head // 2)


def angles_by_exp_log(positions, d_head, *, base=10000.0, device=None, dtype=torch.float32):
    i = torch.arange(d_head // 2, dtype=torch.float64, device=device)
    speeds = torch.exp(-math.log(base) * 2 * i / d_head)  # (D/2,)
    if not torch.is_tensor(positions):
        positions = torch.arange(positions, device=device)
    return (positions.to(device=device, dtype=torch.float64).unsqueeze(1) * speeds).to(dtype)


def _positions(positions, dtype, device=None):
    """An int T as the positions 0 .. T-1, a tensor as itself, in ``dtype``."""
    if isinstance(positions, int):
        positions = torch.arange(positions)
    return positions.to(dtype=dtype, device=device)


# ---------------------------------------------------------------- apply_rotary

def rotate_by_rotate_half(x, angles):
    """Hugging Face's formula: x * cos + rotate_half(x) * sin, tables widened to (T, D)."""
    def rotate_half(v):
        v1, v2 = v.chunk(2, dim=-1)
        return torch.cat((-v2, v1), dim=-1)
    cos = torch.cat((angles.cos(), angles.cos()), dim=-1)  # (T, D)
    sin = torch.cat((angles.sin(), angles.sin()), dim=-1)
    return x * cos + rotate_half(x) * sin


def rotate_by_complex_numbers(x, angles):
    """Pair i as the complex number x_i + j x_{i+D/2}, turned by multiplying with e^{j a}."""
    half = x.shape[-1] // 2
    pairs = torch.complex(x[..., :half], x[..., half:])  # (..., T, D/2)
    turned = pairs * torch.polar(torch.ones_like(angles), angles)
    return torch.cat([turned.real, turned.imag], dim=-1)


def rotate_by_matrices(x, angles):
    """A 2 x 2 rotation matrix per position and pair, applied with einsum."""
    c, s = torch.cos(angles), torch.sin(angles)
    matrices = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)  # (T,P,2,2)
    half = x.shape[-1] // 2
    pairs = torch.stack([x[..., :half], x[..., half:]], dim=-1)  # (..., T, P, 2)
    turned = torch.einsum("tpij,...tpj->...tpi", matrices, pairs)
    return torch.cat([turned[..., 0], turned[..., 1]], dim=-1)


# ---------------------------------------------------------------- rotate_pairs

def rotating(angles, rotate):
    """rotate_pairs written as a student writes it in two steps: the (T, D/2) angles by
    ``angles`` (in at least 32 bits, on the device of x), then the pairs turned by ``rotate``."""
    def rotate_pairs(x, positions=None, *, base=10000.0):
        at = x.shape[-2] if positions is None else positions
        dtype = torch.promote_types(x.dtype, torch.float32)
        table = angles(at, x.shape[-1], base=base, device=x.device, dtype=dtype)
        return rotate(x, table).to(x.dtype)
    rotate_pairs.__name__ = rotate_pairs.__qualname__ = f"{angles.__name__}_{rotate.__name__}"
    return rotate_pairs


def rotate_pairs_like_hugging_face(x, positions=None, *, base=10000.0):
    """All in one: inverse frequencies, an outer product, (T, D) tables and rotate_half."""
    T, D = x.shape[-2:]
    if positions is None:
        positions = torch.arange(T, device=x.device)
    dtype = torch.promote_types(x.dtype, torch.float32)
    inverse_frequencies = 1.0 / base ** (torch.arange(0, D, 2, device=x.device, dtype=dtype) / D)
    angles = torch.outer(positions.to(device=x.device, dtype=dtype), inverse_frequencies)
    cos, sin = torch.cat((angles.cos(), angles.cos()), -1), torch.cat((angles.sin(),) * 2, -1)
    x1, x2 = x.chunk(2, dim=-1)
    return (x * cos + torch.cat((-x2, x1), dim=-1) * sin).to(x.dtype)


# ---------------------------------------------------------------- RotaryMultiHeadAttention

class StudentRotaryMHA(multihead.MultiHeadAttention):
    """The class as the notebook gives it: constructor written, forward to write."""

    def __init__(self, d_model, n_heads, dropout=0.0, bias=True, base=10000.0):
        super().__init__(d_model, n_heads, dropout, bias)
        self.base = base

    def forward(self, query, key, value, attn_mask=None, is_causal=False, query_positions=None,
                key_positions=None):
        raise NotImplementedError()


def _heads(module, query, key, value):
    return (multihead.split_heads(p(x), module.n_heads) for p, x in
            ((module.q_proj, query), (module.k_proj, key), (module.v_proj, value)))


class RotaryFromEarlierLessons(StudentRotaryMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False, query_positions=None,
                key_positions=None):
        q, k, v = _heads(self, query, key, value)
        if query_positions is None:
            query_positions = torch.arange(q.shape[-2])
        if key_positions is None:
            key_positions = torch.arange(k.shape[-2])
        q = rotate_by_rotate_half(q, angles_by_outer(query_positions, self.d_head,
                                                     base=self.base, dtype=q.dtype))
        k = rotate_by_rotate_half(k, angles_by_outer(key_positions, self.d_head, base=self.base,
                                                     dtype=k.dtype))
        out, weights = attention.scaled_dot_product_attention(
            q, k, v, attn_mask, self.dropout if self.training else 0.0, is_causal)
        return self.out_proj(multihead.merge_heads(out)), weights


class RotaryByEinsum(StudentRotaryMHA):
    """Heads as (B, T, H, D), scores by einsum, masks and empty rows by hand, angles in
    float64 then cast."""

    def forward(self, query, key, value, attn_mask=None, is_causal=False, query_positions=None,
                key_positions=None):
        H, D = self.n_heads, self.d_head
        q, k, v = (p(x).unflatten(-1, (H, D)) for p, x in
                   ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
        T, S = q.shape[1], k.shape[1]
        q = rotate_by_complex_numbers(q.transpose(1, 2), angles_by_exp_log(
            T if query_positions is None else query_positions, D, base=self.base,
            dtype=torch.float64).to(q.dtype))  # (B, H, T, D)
        k = rotate_by_complex_numbers(k.transpose(1, 2), angles_by_exp_log(
            S if key_positions is None else key_positions, D, base=self.base,
            dtype=torch.float64).to(k.dtype))
        scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(D)
        if is_causal:
            scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), NEG_INF)
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, NEG_INF)
        elif attn_mask is not None:
            scores = scores + attn_mask
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        out = torch.einsum("bhts,bshd->bthd", weights, v).flatten(-2)
        return self.out_proj(out), weights


class RotaryPerHead(StudentRotaryMHA):
    """One head at a time, with each head's slice of the projections' weights."""

    def forward(self, query, key, value, attn_mask=None, is_causal=False, query_positions=None,
                key_positions=None):
        outs, all_weights = [], []
        q_all, k_all, v_all = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        q_at = query.shape[-2] if query_positions is None else query_positions
        k_at = key.shape[-2] if key_positions is None else key_positions
        for h in range(self.n_heads):
            part = slice(h * self.d_head, (h + 1) * self.d_head)
            q, k, v = q_all[..., part], k_all[..., part], v_all[..., part]  # (B, T|S, D)
            q = rotate_by_matrices(q, angles_by_loops(q_at, self.d_head, base=self.base,
                                                      dtype=q.dtype))
            k = rotate_by_matrices(k, angles_by_loops(k_at, self.d_head, base=self.base,
                                                      dtype=k.dtype))
            out, weights = attention.scaled_dot_product_attention(
                q, k, v, None if attn_mask is None else attn_mask.squeeze(1) if
                attn_mask.dim() == 4 else attn_mask, is_causal=is_causal)
            outs.append(out)
            all_weights.append(weights)
        return self.out_proj(torch.cat(outs, dim=-1)), torch.stack(all_weights, dim=1)


class RotaryCallingTheReference(StudentRotaryMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False, query_positions=None,
                key_positions=None):
        return rope.RotaryMultiHeadAttention.forward(self, query, key, value, attn_mask,
                                                     is_causal, query_positions, key_positions)


CORRECT = {
    "rotate_pairs": [rotate_pairs_like_hugging_face,
                     rotating(angles_by_loops, rotate_by_complex_numbers),
                     rotating(angles_by_exp_log, rotate_by_matrices),
                     rotating(angles_by_outer, rotate_by_rotate_half)],
    "rotary_multi_head_attention": [RotaryFromEarlierLessons, RotaryByEinsum, RotaryPerHead],
}
REFERENCES = {
    "rotate_pairs": rope.rotate_pairs,
    "rotary_multi_head_attention": rope.RotaryMultiHeadAttention.forward,
}
PRINTED_NAME = {"rotary_multi_head_attention": "RotaryMultiHeadAttention.forward"}
# the stub a student starts from, where it is a class with a given constructor
STUBS = {"rotary_multi_head_attention": StudentRotaryMHA}
CALLING_THE_REFERENCE = {"rotary_multi_head_attention": RotaryCallingTheReference}


# ---------------------------------------------------------------- catalogued mistakes

def angles_with_i(positions, d_head, *, base=10000.0, device=None, dtype=torch.float32):
    i = torch.arange(d_head // 2, dtype=dtype, device=device)
    return _positions(positions, dtype, device)[:, None] / base ** (i / d_head)


def angles_from_one(positions, d_head, *, base=10000.0, device=None, dtype=torch.float32):
    positions = _positions(positions, dtype, device) + 1
    return torch.outer(positions, base ** (-torch.arange(0, d_head, 2, dtype=dtype) / d_head))


def angles_with_10000(positions, d_head, *, base=10000.0, device=None, dtype=torch.float32):
    return angles_by_outer(positions, d_head, device=device, dtype=dtype)


def angles_with_2i_twice(positions, d_head, *, base=10000.0, device=None, dtype=torch.float32):
    two_i = torch.arange(0, d_head, 2, dtype=dtype, device=device)  # already 0, 2, 4, ...
    return _positions(positions, dtype, device)[:, None] / base ** (2 * two_i / d_head)


def angles_multiplied(positions, d_head, *, base=10000.0, device=None, dtype=torch.float32):
    two_i = torch.arange(0, d_head, 2, dtype=dtype, device=device)
    return _positions(positions, dtype, device)[:, None] * base ** (two_i / d_head)


def angles_of_the_first_positions(positions, d_head, *, base=10000.0, device=None,
                                  dtype=torch.float32):
    """Counts the tokens and makes the angles of 0 .. T-1, whatever positions it was given."""
    T = positions if isinstance(positions, int) else len(positions)
    return angles_by_outer(T, d_head, base=base, device=device, dtype=dtype)


def rotate_interleaved_as_complex(x, angles):
    """Meta's original LLaMA code: neighbours (2i, 2i+1) viewed as one complex number."""
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    turned = torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles))
    return turned.flatten(-2)


def rotate_half_with_repeated_tables(x, angles):
    """rotate_half pairs the halves, but each angle is repeated for neighbours."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = angles.cos().repeat_interleave(2, -1), angles.sin().repeat_interleave(2, -1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def rotate_every_two_with_half_tables(x, angles):
    """GPT-J's rotate_every_two with tables widened for half-split pairs."""
    turned = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
    cos = torch.cat((angles.cos(), angles.cos()), dim=-1)
    sin = torch.cat((angles.sin(), angles.sin()), dim=-1)
    return x * cos + turned * sin


def rotate_with_sin_and_cos_swapped(x, angles):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = angles.sin(), angles.cos()
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)


def rotate_clockwise(x, angles):
    x1, x2 = x.chunk(2, dim=-1)
    cos = torch.cat((angles.cos(), angles.cos()), dim=-1)
    sin = torch.cat((angles.sin(), angles.sin()), dim=-1)
    return x * cos + torch.cat((x2, -x1), dim=-1) * sin


class RotaryHandWritten(StudentRotaryMHA):
    """A student's forward; the subclasses below each change one step of it."""

    def angles(self, n, dtype):
        return angles_by_outer(n, self.d_head, base=self.base, dtype=dtype)

    def forward(self, query, key, value, attn_mask=None, is_causal=False, query_positions=None,
                key_positions=None):
        self.at = (query_positions, key_positions)
        q, k, v = self.rotated(*_heads(self, query, key, value))
        out, weights = attention.scaled_dot_product_attention(q, k, v, attn_mask,
                                                              is_causal=is_causal)
        return self.out_proj(multihead.merge_heads(out)), weights

    def positions(self, q, k):
        """Where the queries and the keys sit: the given positions, else 0 .. T-1, 0 .. S-1."""
        q_at, k_at = getattr(self, "at", (None, None))
        return (q.shape[-2] if q_at is None else q_at, k.shape[-2] if k_at is None else k_at)

    def rotated(self, q, k, v):
        q_at, k_at = self.positions(q, k)
        return (rotate_by_rotate_half(q, self.angles(q_at, q.dtype)),
                rotate_by_rotate_half(k, self.angles(k_at, k.dtype)), v)


class RotaryRotatingValues(RotaryHandWritten):
    def rotated(self, q, k, v):
        q, k, v = super().rotated(q, k, v)
        return q, k, rotate_by_rotate_half(v, self.angles(v.shape[-2], v.dtype))


class RotaryRotatingQueriesOnly(RotaryHandWritten):
    def rotated(self, q, k, v):
        return rotate_by_rotate_half(q, self.angles(q.shape[-2], q.dtype)), k, v


class RotaryRotatingScores(RotaryHandWritten):
    """Scores by hand, scaled, then rotated as if each row were a vector of pairs."""

    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = _heads(self, query, key, value)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  # (B, H, T, S)
        T, S = scores.shape[-2:]
        scores = rotate_by_rotate_half(scores, angles_by_outer(T, S, base=self.base,
                                                               dtype=scores.dtype))
        if is_causal:
            scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), NEG_INF)
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, NEG_INF)
        elif attn_mask is not None:
            scores = scores + attn_mask
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return self.out_proj(multihead.merge_heads(weights @ v)), weights


class RotaryRotatingTheWeights(RotaryHandWritten):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = _heads(self, query, key, value)
        _, weights = attention.scaled_dot_product_attention(q, k, v, attn_mask,
                                                            is_causal=is_causal)
        T, S = weights.shape[-2:]
        weights = rotate_by_rotate_half(weights, angles_by_outer(T, S, base=self.base,
                                                                 dtype=weights.dtype))
        return self.out_proj(multihead.merge_heads(weights @ v)), weights


class RotaryRotatingTheOutput(RotaryHandWritten):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = _heads(self, query, key, value)
        out, weights = attention.scaled_dot_product_attention(q, k, v, attn_mask,
                                                              is_causal=is_causal)
        out = rotate_by_rotate_half(out, self.angles(out.shape[-2], out.dtype))
        return self.out_proj(multihead.merge_heads(out)), weights


class RotaryBeforeTheSplit(RotaryHandWritten):
    """The (B, T, C) projections rotated as one vector of C / 2 pairs, then split."""

    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        q = rotate_by_rotate_half(q, angles_by_outer(q.shape[-2], self.d_model,
                                                     base=self.base, dtype=q.dtype))
        k = rotate_by_rotate_half(k, angles_by_outer(k.shape[-2], self.d_model,
                                                     base=self.base, dtype=k.dtype))
        q, k, v = (multihead.split_heads(x, self.n_heads) for x in (q, k, v))
        out, weights = attention.scaled_dot_product_attention(q, k, v, attn_mask,
                                                              is_causal=is_causal)
        return self.out_proj(multihead.merge_heads(out)), weights


class RotaryWithModelWidthSpeeds(RotaryHandWritten):
    def angles(self, n, dtype):
        two_i = torch.arange(0, self.d_head, 2, dtype=dtype)
        return _positions(n, dtype)[:, None] / self.base ** (two_i / self.d_model)


class RotaryIgnoringPositions(RotaryHandWritten):
    """Takes the positions in its signature, then rotates at 0 .. T-1 and 0 .. S-1."""

    def positions(self, q, k):
        return q.shape[-2], k.shape[-2]


class RotaryWithFloat32Angles(RotaryHandWritten):
    def angles(self, n, dtype):
        return angles_by_outer(n, self.d_head, base=self.base)


class RotaryWithDefaultBase(RotaryHandWritten):
    def angles(self, n, dtype):
        return angles_by_outer(n, self.d_head, dtype=dtype)


class RotaryDroppingOutInEvalMode(RotaryHandWritten):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = self.rotated(*_heads(self, query, key, value))
        out, weights = attention.scaled_dot_product_attention(q, k, v, attn_mask, self.dropout,
                                                              is_causal)
        return self.out_proj(multihead.merge_heads(out)), weights


# mistakes recognised from the outputs (a sign), not from a variant: one example each
SIGN_EXAMPLES = {
    ("rotary_multi_head_attention", "dropout applied in eval mode"): {
        "dropout_p=self.dropout": RotaryDroppingOutInEvalMode},
}

MISTAKES = {  # student's answer: (exercise, the mistakes the check must name)
    rotating(angles_with_i, rotate_by_rotate_half): (
        "rotate_pairs", ["exponent uses i instead of 2i (base^(i/D))"]),
    rotating(angles_with_2i_twice, rotate_by_matrices): (
        "rotate_pairs", ["the 2 of 2i counted twice (exponent 4i / D)"]),
    rotating(angles_from_one, rotate_by_rotate_half): (
        "rotate_pairs", ["positions counted from 1"]),
    rotating(angles_with_10000, rotate_by_complex_numbers): (
        "rotate_pairs", ["ignores the base argument"]),
    rotating(angles_multiplied, rotate_by_rotate_half): (
        "rotate_pairs", ["frequency inverted (t * base^(2i/D))"]),
    rotating(angles_of_the_first_positions, rotate_by_rotate_half): (
        "rotate_pairs", ["a tensor of positions ignored: the angles of 0 .. T-1 instead"]),
    RotaryIgnoringPositions: (
        "rotary_multi_head_attention",
        ["query_positions and key_positions ignored (positions counted from 0)"]),
    rotating(angles_by_outer, rotate_interleaved_as_complex): (
        "rotate_pairs", ["interleaved pairs (2i, 2i+1) instead of half-split pairs (i, i + D/2)"]),
    rotating(angles_by_outer, rotate_half_with_repeated_tables): (
        "rotate_pairs", ["angles laid out for interleaved pairs while the pairs are half-split"]),
    rotating(angles_by_outer, rotate_every_two_with_half_tables): (
        "rotate_pairs", ["angles laid out half-split while the pairs are interleaved"]),
    rotating(angles_by_outer, rotate_with_sin_and_cos_swapped): (
        "rotate_pairs", ["sin and cos swapped"]),
    rotating(angles_by_outer, rotate_clockwise): (
        "rotate_pairs", ["rotation in the wrong direction (the sign of sin flipped)"]),
    RotaryRotatingValues: ("rotary_multi_head_attention", ["rotation applied to the values too"]),
    RotaryRotatingQueriesOnly: ("rotary_multi_head_attention", ["keys not rotated"]),
    RotaryRotatingScores: ("rotary_multi_head_attention",
                           ["rotation applied to the scores instead of the queries and keys"]),
    RotaryRotatingTheWeights: ("rotary_multi_head_attention",
                               ["rotation applied to the weights after the softmax"]),
    RotaryRotatingTheOutput: (
        "rotary_multi_head_attention",
        ["rotation applied to the attention output instead of the queries and keys"]),
    RotaryBeforeTheSplit: ("rotary_multi_head_attention",
                           ["rotation over the model width before the heads are split"]),
    RotaryWithModelWidthSpeeds: ("rotary_multi_head_attention",
                                 ["angles from the model width instead of the head width"]),
    RotaryWithFloat32Angles: ("rotary_multi_head_attention",
                              ["angles computed in float32 for float64 inputs"]),
    RotaryWithDefaultBase: ("rotary_multi_head_attention", ["ignores self.base"]),
}
