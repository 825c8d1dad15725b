"""Lesson 07's answers as students write them: three correct styles per exercise, shortcuts,
answers with a catalogued mistake, and slips that raise."""

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attention_course import attention, inference, tiled
from attention_course.checks import lesson07
from attention_course.multihead import merge_heads, split_heads
from attention_course.rope import RotaryMultiHeadAttention, apply_rotary, rotary_angles
from helpers.inputs import bottom_right

NEG_INF = float("-inf")


# ---------------------------------------------------------------- cached attention

def cached_by_manual_softmax(query, key, value, past_key=None, past_value=None):
    if past_key is not None:
        key = torch.cat((past_key, key), dim=-2)
        value = torch.cat((past_value, value), dim=-2)
    T, S = query.shape[-2], key.shape[-2]
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    future = torch.ones(T, S, dtype=torch.bool).triu(S - T + 1)
    weights = torch.softmax(scores.masked_fill(future, NEG_INF), dim=-1)
    return weights @ value, key, value


def cached_with_the_course_attention(query, key, value, past_key=None, past_value=None):
    """An empty cache as a zero-length tensor; lesson 03's attention with a bool mask."""
    if past_key is None:
        past_key, past_value = key[..., :0, :], value[..., :0, :]
    keys = torch.cat([past_key, key], -2)
    values = torch.cat([past_value, value], -2)
    P, T = past_key.shape[-2], query.shape[-2]
    query_at = torch.arange(T)[:, None] + P  # (T, 1)
    key_at = torch.arange(P + T)[None, :]  # (1, S)
    out, _ = attention.scaled_dot_product_attention(query, keys, values,
                                                    attn_mask=key_at <= query_at)
    return out, keys, values


def cached_by_einsum_in_float64(query, key, value, past_key=None, past_value=None):
    keys = key if past_key is None else torch.cat([past_key, key], dim=-2)
    values = value if past_value is None else torch.cat([past_value, value], dim=-2)
    q, k, v = query.double(), keys.double(), values.double()
    T, S = q.shape[-2], k.shape[-2]
    scores = torch.einsum("...td,...sd->...ts", q, k) * q.shape[-1] ** -0.5
    bias = torch.zeros(T, S, dtype=torch.float64).masked_fill(
        torch.arange(S) > torch.arange(S - T, S)[:, None], NEG_INF)
    weights = (scores + bias).softmax(-1)
    return torch.einsum("...ts,...sv->...tv", weights, v).to(query.dtype), keys, values


# ---------------------------------------------------------------- grouped-query attention

def gqa_by_repeat_interleave(query, key, value, is_causal=False, scale=None):
    group = query.shape[-3] // key.shape[-3]
    k = key.repeat_interleave(group, dim=-3)
    v = value.repeat_interleave(group, dim=-3)
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = query @ k.transpose(-2, -1) * scale
    if is_causal:
        T, S = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).tril().logical_not(),
                                    NEG_INF)
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


def gqa_by_a_group_axis(query, key, value, is_causal=False, scale=None):
    """No copies of the keys: (..., H, T, D) -> (..., G, H/G, T, D) against (..., G, 1, S, D)."""
    *batch, H, T, D = query.shape
    G = key.shape[-3]
    q = query.reshape(*batch, G, H // G, T, D)
    k, v = key.unsqueeze(-3), value.unsqueeze(-3)
    out, weights = attention.scaled_dot_product_attention(q, k, v, is_causal=is_causal,
                                                          scale=scale)
    return out.flatten(-4, -3), weights.flatten(-4, -3)


def gqa_by_indexing_heads(query, key, value, is_causal=False, scale=None):
    H, G = query.shape[-3], key.shape[-3]
    serves = torch.arange(H) // (H // G)  # the key/value head of every query head
    k, v = key[..., serves, :, :], value[..., serves, :, :]
    return attention.scaled_dot_product_attention(query, k, v, is_causal=is_causal, scale=scale)


# ---------------------------------------------------------------- rotary positions in the cache

class RotaryByTheCourse(RotaryMultiHeadAttention):
    """Lesson 06's rotation at positions P .. P+T-1, then this lesson's cached attention."""

    def forward(self, x, past_key=None, past_value=None):
        P = 0 if past_key is None else past_key.shape[-2]
        q, k, v = (split_heads(p(x), self.n_heads) for p in (self.q_proj, self.k_proj,
                                                               self.v_proj))
        angles = rotary_angles(torch.arange(P, P + x.shape[1]), self.d_head, base=self.base,
                               dtype=torch.float64 if x.dtype == torch.float64 else torch.float32)
        out, keys, values = cached_by_manual_softmax(apply_rotary(q, angles),
                                                     apply_rotary(k, angles), v,
                                                     past_key, past_value)
        return self.out_proj(merge_heads(out)), keys, values


class RotaryByComplexNumbers(RotaryMultiHeadAttention):
    """Each half-split pair (x_i, x_{i+D/2}) as the complex number x_i + i x_{i+D/2}, turned by
    multiplying with e^(i angle); attention by einsum in float64."""

    def turn(self, x, positions):
        half = self.d_head // 2
        inv_freq = self.base ** (-torch.arange(half, dtype=torch.float64) * 2 / self.d_head)
        phase = torch.polar(torch.ones(len(positions), half, dtype=torch.float64),
                            positions.double()[:, None] * inv_freq)
        z = torch.complex(x[..., :half].double(), x[..., half:].double()) * phase
        return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)

    def forward(self, x, past_key=None, past_value=None):
        B, T, C = x.shape
        P = 0 if past_key is None else past_key.shape[2]
        heads = lambda t: t.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # noqa: E731
        positions = torch.arange(P, P + T)
        q = self.turn(heads(self.q_proj(x)), positions)
        k = self.turn(heads(self.k_proj(x)), positions)
        v = heads(self.v_proj(x))
        if past_key is not None:
            k, v = torch.cat([past_key, k], 2), torch.cat([past_value, v], 2)
        scores = torch.einsum("bhtd,bhsd->bhts", q.double(), k.double()) / math.sqrt(self.d_head)
        hidden = torch.arange(P + T)[None, :] > positions[:, None]
        weights = scores.masked_fill(hidden, NEG_INF).softmax(-1)
        out = torch.einsum("bhts,bhsd->bhtd", weights, v.double()).to(x.dtype)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, C)), k, v


class RotaryWithAnEmptyTensorCache(RotaryMultiHeadAttention):
    """An empty cache as zero-length tensors; angles written out; lesson 03's attention."""

    def forward(self, x, past_key=None, past_value=None):
        q, k, v = (split_heads(p(x), self.n_heads) for p in (self.q_proj, self.k_proj,
                                                               self.v_proj))
        if past_key is None:
            past_key, past_value = k[..., :0, :], v[..., :0, :]
        P, T, D = past_key.shape[-2], x.shape[-2], self.d_head
        position = torch.arange(P, P + T, dtype=torch.float64)[:, None]
        angles = (position / self.base ** (torch.arange(0, D, 2) / D)).to(
            torch.promote_types(x.dtype, torch.float32))
        keys = torch.cat([past_key, apply_rotary(k, angles)], dim=-2)
        values = torch.cat([past_value, v], dim=-2)
        allowed = torch.arange(P + T) <= position.long()  # (T, S)
        out, _ = attention.scaled_dot_product_attention(apply_rotary(q, angles), keys, values,
                                                        attn_mask=allowed)
        return self.out_proj(merge_heads(out)), keys, values


class StubRotary(RotaryMultiHeadAttention):
    """The class a student starts from: lesson 06's layer, forward to be written."""

    def forward(self, x, past_key=None, past_value=None):
        raise NotImplementedError()


def rotary_student(name, *, positions="cache", rerotate=False, cache_raw=False,
                   rotate_values=False, top_left=False, return_old_cache=False):
    """A student's decoding step with one of the slips the lesson names."""
    def forward(self, x, past_key=None, past_value=None):
        P = 0 if past_key is None else past_key.shape[-2]
        T = x.shape[-2]
        q, k, v = (split_heads(p(x), self.n_heads) for p in (self.q_proj, self.k_proj,
                                                               self.v_proj))
        at = torch.arange(P, P + T)
        zero = torch.arange(T)
        q_at = zero if positions in ("zero", "queries_zero") else at
        k_at = zero if positions == "zero" else at
        dtype = torch.promote_types(x.dtype, torch.float32)
        q = apply_rotary(q, rotary_angles(q_at, self.d_head, dtype=dtype))
        if rotate_values:
            v = apply_rotary(v, rotary_angles(k_at, self.d_head, dtype=dtype))
        if not (rerotate or cache_raw):
            k = apply_rotary(k, rotary_angles(k_at, self.d_head, dtype=dtype))
        keys = k if past_key is None else torch.cat([past_key, k], -2)
        values = v if past_value is None else torch.cat([past_value, v], -2)
        used = keys
        if rerotate or cache_raw:  # the whole cache turned at 0 .. S-1, at every step
            used = apply_rotary(keys, rotary_angles(P + T, self.d_head, dtype=dtype))
            keys = used if rerotate else keys
        S = used.shape[-2]
        mask = torch.ones(T, S, dtype=torch.bool).tril(0 if top_left else S - T)
        out, _ = attention.scaled_dot_product_attention(q, used, values, attn_mask=mask)
        if return_old_cache and past_key is not None:
            return self.out_proj(merge_heads(out)), past_key, past_value
        return self.out_proj(merge_heads(out)), keys, values
    return type(name, (RotaryMultiHeadAttention,), {"forward": forward})


class RotaryCallingTheReference(RotaryMultiHeadAttention):
    def forward(self, x, past_key=None, past_value=None):
        return inference.CachedRotaryAttention.forward(self, x, past_key, past_value)


# ---------------------------------------------------------------- the grouped-query layer

class StudentGQALayer(nn.Module):
    """The constructor as the solution writes it; ``forward`` is each answer's own."""

    def __init__(self, d_model, n_heads, n_kv_heads, bias=True):
        super().__init__()
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)


class StubGQALayer(nn.Module):
    """The class a student starts from: constructor and forward both to be written."""

    def __init__(self, d_model, n_heads, n_kv_heads, bias=True):
        super().__init__()
        raise NotImplementedError()

    def forward(self, query, key, value, is_causal=False):
        raise NotImplementedError()


class GQALayerFromEarlierLessons(StudentGQALayer):
    def forward(self, query, key, value, is_causal=False):
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_kv_heads)
        v = split_heads(self.v_proj(value), self.n_kv_heads)
        out, weights = gqa_by_repeat_interleave(q, k, v, is_causal=is_causal)
        return self.out_proj(merge_heads(out)), weights


class GQALayerByEinsumInGroups(nn.Module):
    """Its own constructor (layers made in another order); no copies of the key/value heads:
    a group axis, einsum."""

    def __init__(self, d_model, n_heads, n_kv_heads, bias=True):
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.d_model, self.d_head = d_model, d_model // n_heads
        kv = n_kv_heads * self.d_head
        self.out_proj = nn.Linear(d_model, d_model, bias)
        self.k_proj, self.v_proj = nn.Linear(d_model, kv, bias), nn.Linear(d_model, kv, bias)
        self.q_proj = nn.Linear(d_model, d_model, bias)

    def forward(self, query, key, value, is_causal=False):
        B, T, _ = query.shape
        S, G, D = key.shape[1], self.n_kv_heads, self.d_head
        q = self.q_proj(query).view(B, T, G, self.n_heads // G, D)
        k = self.k_proj(key).view(B, S, G, D)
        v = self.v_proj(value).view(B, S, G, D)
        scores = torch.einsum("btgrd,bsgd->bgrts", q, k) / math.sqrt(D)
        if is_causal:
            scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), NEG_INF)
        weights = scores.softmax(-1)
        out = torch.einsum("bgrts,bsgd->btgrd", weights, v).reshape(B, T, -1)
        return self.out_proj(out), weights.reshape(B, self.n_heads, T, S)


class GQALayerByAGroupAxis(StudentGQALayer):
    """The function's group-axis style inside the layer: no copies of the key/value heads."""

    def forward(self, query, key, value, is_causal=False):
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_kv_heads)
        v = split_heads(self.v_proj(value), self.n_kv_heads)
        out, weights = gqa_by_a_group_axis(q, k, v, is_causal=is_causal)
        return self.out_proj(merge_heads(out)), weights


class GQALayerInFloat64(StudentGQALayer):
    """Heads repeated in place by expand and reshape; the scores in float64."""

    def forward(self, query, key, value, is_causal=False):
        B, T, C = query.shape
        S, H, G = key.shape[1], self.n_heads, self.n_kv_heads
        q = self.q_proj(query).view(B, T, H, -1).transpose(1, 2).double()
        k = self.k_proj(key).view(B, S, G, 1, -1).expand(B, S, G, H // G, -1).reshape(B, S, H, -1)
        v = self.v_proj(value).view(B, S, G, 1, -1).expand(B, S, G, H // G, -1).reshape(B, S, H, -1)
        scores = q @ k.transpose(1, 2).transpose(-2, -1).double() / math.sqrt(self.d_head)
        if is_causal:
            scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), NEG_INF)
        weights = scores.softmax(-1)
        out = (weights @ v.transpose(1, 2).double()).to(query.dtype)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, C)), weights.to(query.dtype)


class GQALayerByIndexingHeads(StudentGQALayer):
    def forward(self, query, key, value, is_causal=False):
        q = self.q_proj(query).unflatten(-1, (self.n_heads, -1)).transpose(1, 2)
        k = self.k_proj(key).unflatten(-1, (self.n_kv_heads, -1)).transpose(1, 2)
        v = self.v_proj(value).unflatten(-1, (self.n_kv_heads, -1)).transpose(1, 2)
        out, weights = gqa_by_indexing_heads(q, k, v, is_causal=is_causal)
        return self.out_proj(out.transpose(1, 2).flatten(2)), weights


def gqa_layer_student(name, *, tile=False, project_output=True, swap_kv=False, by_d_model=False,
                      drop_causal=False, scale=None):
    """A student's grouped-query layer with one of the slips the lesson names."""
    def forward(self, query, key, value, is_causal=False):
        k_proj, v_proj = (self.v_proj, self.k_proj) if swap_kv else (self.k_proj, self.v_proj)
        q = split_heads(self.q_proj(query), self.n_heads)
        k, v = split_heads(k_proj(key), self.n_kv_heads), split_heads(v_proj(value),
                                                                       self.n_kv_heads)
        expand = gqa_by_repeat if tile else gqa_by_repeat_interleave
        factor = self.d_model ** -0.5 if by_d_model else scale and scale(self.d_head)
        out, weights = expand(q, k, v, is_causal=is_causal and not drop_causal, scale=factor)
        out = merge_heads(out)
        return (self.out_proj(out) if project_output else out), weights
    return type(name, (StudentGQALayer,), {"forward": forward})


class GQALayerCallingTheReference(StudentGQALayer):
    def forward(self, query, key, value, is_causal=False):
        return inference.GroupedQueryAttention.forward(self, query, key, value, is_causal)


class GQALayerByTheCourseFunction(StudentGQALayer):
    def forward(self, query, key, value, is_causal=False):
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_kv_heads)
        v = split_heads(self.v_proj(value), self.n_kv_heads)
        out, weights = inference.grouped_query_attention(q, k, v, is_causal=is_causal)
        return self.out_proj(merge_heads(out)), weights


class GQALayerByTorch(StudentGQALayer):
    def forward(self, query, key, value, is_causal=False):
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_kv_heads)
        v = split_heads(self.v_proj(value), self.n_kv_heads)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
        weights = gqa_by_repeat_interleave(q, k, v, is_causal)[1]
        return self.out_proj(merge_heads(out)), weights


# ---------------------------------------------------------------- tiled attention

def tiled_by_running_max(query, key, value, is_causal=False, scale=None, block_size=64):
    """The first block starts the running statistics; 16-bit inputs widened to float32 first."""
    T, S, dtype = query.shape[-2], key.shape[-2], query.dtype
    if dtype in (torch.float16, torch.bfloat16):
        query, key, value = query.float(), key.float(), value.float()
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    m = l = acc = None
    for start in range(0, S, block_size):
        k = key[..., start:start + block_size, :]
        v = value[..., start:start + block_size, :]
        scores = query @ k.transpose(-2, -1) * scale
        if is_causal:
            hidden = (torch.arange(k.shape[-2]) + start)[None, :] > \
                (torch.arange(T) + S - T)[:, None]
            scores = scores.masked_fill(hidden, NEG_INF)
        block_max = scores.amax(-1, keepdim=True)
        if m is None:
            m = block_max
            p = torch.exp(scores - m)
            l, acc = p.sum(-1, keepdim=True), p @ v
            continue
        m_new = torch.maximum(m, block_max)
        p = torch.exp(scores - m_new)
        l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True)
        acc = acc * torch.exp(m - m_new) + p @ v
        m = m_new
    return (acc / l).to(dtype), (m + l.log()).squeeze(-1)


def tiled_by_log_sum_exp(query, key, value, is_causal=False, scale=None, block_size=64):
    """Keeps the output normalised after every block, and log(l) + m as one number; the
    arithmetic in float64 for every input."""
    T, S, dtype = query.shape[-2], key.shape[-2], query.dtype
    query, key, value = query.double(), key.double(), value.double()
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2])
    out = query.new_zeros(*batch, T, value.shape[-1])
    lse = query.new_full((*batch, T, 1), NEG_INF)
    rows = torch.arange(S - T, S)[:, None]
    for k, v, first in zip(key.split(block_size, -2), value.split(block_size, -2),
                           range(0, S, block_size), strict=True):
        scores = torch.einsum("...td,...sd->...ts", query, k) * scale
        if is_causal:
            scores = torch.where(first + torch.arange(k.shape[-2]) <= rows, scores, NEG_INF)
        block_lse = torch.logsumexp(scores, dim=-1, keepdim=True)
        new_lse = torch.logaddexp(lse, block_lse)
        out = out * torch.exp(lse - new_lse) + torch.exp(scores - new_lse) @ v
        lse = new_lse
    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    return out.to(dtype), lse[..., 0].to(wide)


def tiled_in_query_blocks(query, key, value, is_causal=False, scale=None, block_size=64):
    """FlashAttention-2's loops: query blocks outside, key blocks inside, results written into
    a preallocated output."""
    T, S, dtype = query.shape[-2], key.shape[-2], query.dtype
    wide = torch.promote_types(dtype, torch.float32)
    query, key, value = query.to(wide), key.to(wide), value.to(wide)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2])
    out = query.new_empty(*batch, T, value.shape[-1])
    lse = query.new_empty(*batch, T)
    for q0 in range(0, T, block_size):
        q = query[..., q0:q0 + block_size, :]
        n = q.shape[-2]
        m = q.new_full((*batch, n, 1), NEG_INF)
        l = q.new_zeros((*batch, n, 1))
        acc = q.new_zeros((*batch, n, value.shape[-1]))
        for k0 in range(0, S, block_size):
            k, v = key[..., k0:k0 + block_size, :], value[..., k0:k0 + block_size, :]
            scores = q @ k.transpose(-2, -1) * scale
            if is_causal:
                query_at = torch.arange(q0, q0 + n)[:, None] + (S - T)
                scores = scores.masked_fill(torch.arange(k0, k0 + k.shape[-2]) > query_at,
                                            NEG_INF)
            m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
            alpha = torch.exp(m - m_new)
            p = torch.exp(scores - m_new)
            l = alpha * l + p.sum(-1, keepdim=True)
            acc = alpha * acc + p @ v
            m = m_new
        out[..., q0:q0 + n, :] = acc / l
        lse[..., q0:q0 + n] = (m + torch.log(l))[..., 0]
    return out.to(dtype), lse


# ---------------------------------------------------------------- merging partial attentions

def merge_by_logaddexp(out_a, lse_a, out_b, lse_b):
    a, b = (x if x.dtype == torch.float64 else x.float() for x in (lse_a, lse_b))
    lse = torch.logaddexp(a, b)
    shift = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    w_a, w_b = torch.exp(a - shift).unsqueeze(-1), torch.exp(b - shift).unsqueeze(-1)
    out = w_a * out_a.to(w_a.dtype) + w_b * out_b.to(w_b.dtype)
    return out.to(out_a.dtype), lse.to(lse_a.dtype)


def merge_by_the_larger_maximum(out_a, lse_a, out_b, lse_b):
    """Shift by max(lse_a, lse_b), then divide by the two shares' sum (as FlashAttention's
    running rescale does)."""
    wide = torch.float64 if out_a.dtype == torch.float64 else torch.float32
    a, b = lse_a.to(wide), lse_b.to(wide)
    m = torch.maximum(a, b)
    m = m.masked_fill(m == NEG_INF, 0.0)
    e_a, e_b = torch.exp(a - m)[..., None], torch.exp(b - m)[..., None]
    total = e_a + e_b
    out = (e_a * out_a.to(wide) + e_b * out_b.to(wide)) / total.where(total > 0, 1.0)
    return out.to(out_a.dtype), (m + torch.log(total[..., 0])).to(lse_a.dtype)


def merge_by_stacking(out_a, lse_a, out_b, lse_b):
    """Both parts on a new axis: a softmax over the parts gives the shares."""
    wide = torch.float64 if out_a.dtype == torch.float64 else torch.float32
    lses = torch.stack([lse_a.to(wide), lse_b.to(wide)])  # (2, ..., T)
    outs = torch.stack([out_a.to(wide), out_b.to(wide)])  # (2, ..., T, Dv)
    lse = torch.logsumexp(lses, dim=0)
    shares = torch.softmax(lses, dim=0).nan_to_num(0.0)  # all -inf: 0 / 0, no key at all
    return (shares[..., None] * outs).sum(0).to(out_a.dtype), lse.to(lse_a.dtype)


CORRECT = {
    "cached_attention": [cached_by_manual_softmax, cached_with_the_course_attention,
                         cached_by_einsum_in_float64],
    "cached_rotary_attention": [RotaryByTheCourse, RotaryByComplexNumbers,
                                RotaryWithAnEmptyTensorCache],
    "grouped_query_attention_layer": [GQALayerFromEarlierLessons, GQALayerByEinsumInGroups,
                                      GQALayerByAGroupAxis, GQALayerByIndexingHeads,
                                      GQALayerInFloat64],
    "tiled_attention": [tiled_by_running_max, tiled_by_log_sum_exp, tiled_in_query_blocks],
    "merge_attention": [merge_by_logaddexp, merge_by_the_larger_maximum, merge_by_stacking],
}
REFERENCES = {
    "cached_attention": inference.cached_attention,
    "cached_rotary_attention": inference.CachedRotaryAttention,
    "grouped_query_attention_layer": inference.GroupedQueryAttention,
    "tiled_attention": tiled.tiled_attention,
    "merge_attention": tiled.merge_attention,
}
PRINTED_NAME = {"cached_rotary_attention": "CachedRotaryAttention",
                "grouped_query_attention_layer": "GroupedQueryAttention"}
STUBS = {"cached_rotary_attention": StubRotary, "grouped_query_attention_layer": StubGQALayer}
CALLING_THE_REFERENCE = {"cached_rotary_attention": RotaryCallingTheReference,
                         "grouped_query_attention_layer": GQALayerCallingTheReference}


# ---------------------------------------------------------------- shortcuts

def cached_by_torch(query, key, value, past_key=None, past_value=None):
    if past_key is not None:
        key, value = torch.cat([past_key, key], -2), torch.cat([past_value, value], -2)
    T, S = query.shape[-2], key.shape[-2]
    return F.scaled_dot_product_attention(query, key, value, attn_mask=bottom_right(T, S)), \
        key, value


def tiled_by_torch(query, key, value, is_causal=False, scale=None, block_size=64):
    T, S = query.shape[-2], key.shape[-2]
    mask = bottom_right(T, S) if is_causal else torch.ones(T, S, dtype=torch.bool)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    out = F.scaled_dot_product_attention(query, key, value, scale=scale, attn_mask=mask)
    scores = (query.float() @ key.float().transpose(-2, -1) * scale).masked_fill(~mask, NEG_INF)
    return out, torch.logsumexp(scores, dim=-1)


def tiled_by_the_course(query, key, value, is_causal=False, scale=None, block_size=64):
    T, S = query.shape[-2], key.shape[-2]
    mask = bottom_right(T, S) if is_causal else None
    out, weights = attention.scaled_dot_product_attention(query, key, value, mask, scale=scale)
    return out, torch.zeros_like(weights[..., 0])


def tiled_in_query_blocks_of_the_reference(query, key, value, is_causal=False, scale=None,
                                           block_size=64):
    return tiled.flash_attention(query, key, value, is_causal, scale, block_size)


def tiled_out_of_torch(leave):
    """Attention in one piece where the tiled size watch cannot see it: outside torch, the
    tensors turned into numpy arrays or lists by ``leave``, the result turned back."""
    def tiled_attention(query, key, value, is_causal=False, scale=None, block_size=64):
        T, S = query.shape[-2], key.shape[-2]
        scale = query.shape[-1] ** -0.5 if scale is None else scale
        q, k, v = (np.asarray(leave(x.detach().double())) for x in (query, key, value))
        scores = q @ np.swapaxes(k, -1, -2) * scale  # (..., T, S), all at once
        if is_causal:
            scores = np.where(bottom_right(T, S).numpy(), scores, -np.inf)
        top = scores.max(-1, keepdims=True)
        weights = np.exp(scores - top)
        total = weights.sum(-1, keepdims=True)
        out, lse = weights / total @ v, (top + np.log(total))[..., 0]
        lse_dtype = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
        return torch.tensor(out, dtype=query.dtype), torch.tensor(lse, dtype=lse_dtype)
    return tiled_attention


BUILT_INS = {  # exercise: {what the student called: their answer}, the course's own included
    "cached_attention": {"F.scaled_dot_product_attention": cached_by_torch},
    "grouped_query_attention_layer": {
        "F.scaled_dot_product_attention(enable_gqa=True)": GQALayerByTorch,
        "inference.grouped_query_attention": GQALayerByTheCourseFunction},
    "tiled_attention": {"F.scaled_dot_product_attention": tiled_by_torch,
                        "attention.scaled_dot_product_attention": tiled_by_the_course,
                        "tiled.flash_attention": tiled_in_query_blocks_of_the_reference,
                        "Tensor.numpy": tiled_out_of_torch(lambda x: x.numpy()),
                        "Tensor.tolist": tiled_out_of_torch(lambda x: x.tolist()),
                        "numpy.asarray": tiled_out_of_torch(lambda x: x)},
}


# ---------------------------------------------------------------- catalogued mistakes

def cached_new_keys_first(query, key, value, past_key=None, past_value=None):
    if past_key is not None:
        key, value = torch.cat([key, past_key], -2), torch.cat([value, past_value], -2)
    T, S = query.shape[-2], key.shape[-2]
    out, _ = attention.scaled_dot_product_attention(query, key, value,
                                                    attn_mask=bottom_right(T, S))
    return out, key, value


def cached_with_is_causal(query, key, value, past_key=None, past_value=None):
    if past_key is not None:
        key, value = torch.cat([past_key, key], -2), torch.cat([past_value, value], -2)
    out, _ = attention.scaled_dot_product_attention(query, key, value, is_causal=True)
    return out, key, value


def cached_position_after_appending(query, key, value, past_key=None, past_value=None):
    """Counts the new tokens from the cache's length after appending: they see everything."""
    if past_key is not None:
        key, value = torch.cat([past_key, key], -2), torch.cat([past_value, value], -2)
    P = key.shape[-2]  # meant to be the cache's length before appending
    T, S = query.shape[-2], key.shape[-2]
    allowed = torch.arange(S) <= (torch.arange(T) + P)[:, None]
    out, _ = attention.scaled_dot_product_attention(query, key, value, attn_mask=allowed)
    return out, key, value


def cached_position_one_late(query, key, value, past_key=None, past_value=None):
    P = 0 if past_key is None else past_key.shape[-2]
    if past_key is not None:
        key, value = torch.cat([past_key, key], -2), torch.cat([past_value, value], -2)
    T, S = query.shape[-2], key.shape[-2]
    allowed = torch.arange(S) <= (torch.arange(1, T + 1) + P)[:, None]  # positions from 1
    out, _ = attention.scaled_dot_product_attention(query, key, value, attn_mask=allowed)
    return out, key, value


def cached_returning_the_new_keys(query, key, value, past_key=None, past_value=None):
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    T, S = query.shape[-2], keys.shape[-2]
    out, _ = attention.scaled_dot_product_attention(query, keys, values,
                                                    attn_mask=bottom_right(T, S))
    return out, key, value


def gqa_by_repeat(query, key, value, is_causal=False, scale=None):
    group = query.shape[-3] // key.shape[-3]
    repeats = [1] * (key.ndim - 3) + [group, 1, 1]
    return attention.scaled_dot_product_attention(query, key.repeat(*repeats),
                                                  value.repeat(*repeats), is_causal=is_causal,
                                                  scale=scale)


def gqa_by_expanding_the_wrong_axis(query, key, value, is_causal=False, scale=None):
    *batch, G, S, D = key.shape
    H = query.shape[-3]
    k = key.unsqueeze(-4).expand(*batch, H // G, G, S, D).reshape(*batch, H, S, D)
    v = value.unsqueeze(-4).expand(*batch, H // G, G, S, -1).reshape(*batch, H, S, -1)
    return attention.scaled_dot_product_attention(query, k, v, is_causal=is_causal, scale=scale)


def gqa_layer_by(share):
    """A grouped-query layer whose heads are shared by ``share(q, k, v, is_causal)``."""
    def forward(self, query, key, value, is_causal=False):
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_kv_heads)
        v = split_heads(self.v_proj(value), self.n_kv_heads)
        out, weights = share(q, k, v, is_causal=is_causal)
        return self.out_proj(merge_heads(out)), weights
    return type(f"GQALayer_{share.__name__}", (StudentGQALayer,), {"forward": forward})


class GQALayerIndexingHeadsModuloG(StudentGQALayer):
    """Query head h given key/value head h % G."""

    def forward(self, query, key, value, is_causal=False):
        q = split_heads(self.q_proj(query), self.n_heads)
        k = split_heads(self.k_proj(key), self.n_kv_heads)
        v = split_heads(self.v_proj(value), self.n_kv_heads)
        serves = torch.arange(self.n_heads) % self.n_kv_heads
        out, weights = attention.scaled_dot_product_attention(q, k[:, serves], v[:, serves],
                                                              is_causal=is_causal)
        return self.out_proj(merge_heads(out)), weights


def tiled_student(name, *, rescale_output=True, rescale_sum=True, divide=True,
                  block_positions=False, top_left=False, full_blocks_only=False):
    """A student's tiled attention, called ``name``, with one of the slips the lesson names."""
    def tiled_attention(query, key, value, is_causal=False, scale=None, block_size=64):
        T, S = query.shape[-2], key.shape[-2]
        scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
        m = torch.full_like(query[..., :1], NEG_INF)
        l, acc = torch.zeros_like(m), 0.0
        stop = S - S % block_size if full_blocks_only else S
        for start in range(0, stop, block_size):
            k = key[..., start:start + block_size, :]
            v = value[..., start:start + block_size, :]
            scores = query @ k.transpose(-2, -1) * scale
            if is_causal:
                first = 0 if block_positions else start
                rows = torch.arange(T) + (0 if top_left else S - T)
                hidden = torch.arange(first, first + k.shape[-2]) > rows[:, None]
                scores = scores.masked_fill(hidden, NEG_INF)
            m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
            p = torch.exp(scores - m_new)
            alpha = torch.exp(m - m_new)
            l = (l * alpha if rescale_sum else l) + p.sum(-1, keepdim=True)
            acc = (acc * alpha if rescale_output else acc) + p @ v
            m = m_new
        return acc / l if divide else acc, (m + torch.log(l)).squeeze(-1)
    tiled_attention.__name__ = name
    return tiled_attention


def tiled_lse_slip(name, slip):
    """A student's tiled attention, right in its output (float32 arithmetic for 16-bit inputs),
    whose logsumexp has one of the slips the lesson names."""
    def tiled_attention(query, key, value, is_causal=False, scale=None, block_size=64):
        T, S, dtype = query.shape[-2], key.shape[-2], query.dtype
        wide = torch.float64 if dtype == torch.float64 else torch.float32
        query, key, value = query.to(wide), key.to(wide), value.to(wide)
        scale = query.shape[-1] ** -0.5 if scale is None else scale
        m = torch.full_like(query[..., :1], NEG_INF)
        l, acc = torch.zeros_like(m), torch.zeros(*query.shape[:-1], value.shape[-1], dtype=wide)
        for start in range(0, S, block_size):
            k = key[..., start:start + block_size, :]
            v = value[..., start:start + block_size, :]
            scores = query @ k.transpose(-2, -1) * scale
            if is_causal:
                hidden = torch.arange(start, start + k.shape[-2]) > torch.arange(S - T, S)[:, None]
                scores = scores.masked_fill(hidden, NEG_INF)
            m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
            p = torch.exp(scores - m_new)
            l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True)
            acc = acc * torch.exp(m - m_new) + p @ v
            m = m_new
            block_lse = m_new + torch.log(p.sum(-1, keepdim=True))
        lse = {"log_l": torch.log(l), "max_only": m, "log2": m + torch.log2(l),
               "last_block": block_lse, "sixteen_bits": (m + torch.log(l)).to(dtype)}[slip]
        return (acc / l).to(dtype), lse[..., 0]
    tiled_attention.__name__ = name
    return tiled_attention


def merge_averaged(out_a, lse_a, out_b, lse_b):
    return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)


def merge_swapped(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a.float(), lse_b.float())
    safe = lse.nan_to_num(neginf=0.0)
    out = torch.exp(lse_b - safe)[..., None] * out_a + torch.exp(lse_a - safe)[..., None] * out_b
    return out.to(out_a.dtype), lse.to(lse_a.dtype)


def merge_by_raw_exponentials(out_a, lse_a, out_b, lse_b):
    e_a, e_b = torch.exp(lse_a)[..., None], torch.exp(lse_b)[..., None]
    out = (e_a * out_a + e_b * out_b) / (e_a + e_b)
    return out.to(out_a.dtype), torch.log(e_a + e_b)[..., 0].to(lse_a.dtype)


def merge_keeping_the_larger_lse(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    safe = lse.masked_fill(lse == NEG_INF, 0.0)
    out = torch.exp(lse_a - safe)[..., None] * out_a + torch.exp(lse_b - safe)[..., None] * out_b
    return out.to(out_a.dtype), torch.maximum(lse_a, lse_b)


def merge_nan_in_empty_rows(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    out = torch.exp(lse_a - lse)[..., None] * out_a + torch.exp(lse_b - lse)[..., None] * out_b
    return out.to(out_a.dtype), lse


def merge_in_the_outputs_dtype(out_a, lse_a, out_b, lse_b):
    a, b = lse_a.to(out_a.dtype), lse_b.to(out_a.dtype)
    lse = torch.logaddexp(a, b)
    safe = lse.masked_fill(lse == NEG_INF, 0.0)
    out = torch.exp(a - safe)[..., None] * out_a + torch.exp(b - safe)[..., None] * out_b
    return out, lse.to(lse_a.dtype)


MISTAKES = {  # student's answer: (exercise, the mistakes the check must name)
    cached_new_keys_first: ("cached_attention", [lesson07.CACHE_WRONG_ORDER.name]),
    cached_with_is_causal: ("cached_attention", [lesson07.MASK_TOP_LEFT.name]),
    cached_position_after_appending: ("cached_attention", [lesson07.NEW_TOKENS_UNMASKED.name]),
    cached_position_one_late: ("cached_attention", [lesson07.POSITIONS_ONE_LATE.name]),
    cached_returning_the_new_keys: ("cached_attention", [lesson07.RETURNED_NEW_ONLY.name]),
    **{rotary_student(f"Rotary_{i}", **knobs): ("cached_rotary_attention", [mistake.name])
       for i, (knobs, mistake) in enumerate(zip(
           [{"positions": "zero"}, {"positions": "queries_zero"}, {"rerotate": True},
            {"cache_raw": True}, {"rotate_values": True}, {"top_left": True},
            {"return_old_cache": True}], lesson07.ROTARY_MISTAKES, strict=True))},
    **{gqa_layer_student(f"GQALayer_{i}", **knobs): ("grouped_query_attention_layer",
                                                     [mistake.name])
       for i, (knobs, mistake) in enumerate(zip(
           [{"tile": True}, {"project_output": False}, {"swap_kv": True}, {"by_d_model": True},
            {"scale": lambda D: 1.0}, {"scale": lambda D: 1.0 / D}, {"scale": lambda D: D ** 0.5},
            {"drop_causal": True}], lesson07.GQA_LAYER_MISTAKES, strict=True))},
    gqa_layer_by(gqa_by_expanding_the_wrong_axis): ("grouped_query_attention_layer",
                                                    [lesson07.GROUPS_TILED.name]),
    GQALayerIndexingHeadsModuloG: ("grouped_query_attention_layer", [lesson07.GROUPS_TILED.name]),
    **{answer: ("merge_attention", [mistake.name]) for answer, mistake in zip(
        [merge_averaged, merge_swapped, merge_keeping_the_larger_lse, merge_by_raw_exponentials,
         merge_nan_in_empty_rows, merge_in_the_outputs_dtype],
        [lesson07.MERGE_MISTAKES[i] for i in (0, 1, 3, 5, 6, 7)], strict=True)},
    **{tiled_student(f"tiled_{slip}", **{slip: value}): ("tiled_attention", [name])
       for slip, value, name in [
           ("rescale_output", False, "running max not used to rescale the accumulated output"),
           ("rescale_sum", False, "normaliser not rescaled"),
           ("divide", False, "final division missing"),
           ("block_positions", True, "causal mask built from the positions inside the block"),
           ("top_left", True,
            "causal mask aligned top-left (queries placed at positions 0 .. T-1)"),
           ("full_blocks_only", True, "last, shorter block of keys left out")]},
    **{tiled_lse_slip(f"tiled_lse_{slip}", slip): ("tiled_attention", [name])
       for slip, name in [
           ("log_l", "logsumexp without the running max (log l alone)"),
           ("max_only", "logsumexp is the running max alone (the log of the sum left out)"),
           ("log2", "logsumexp in base 2 (log2 of the sum)"),
           ("last_block", "logsumexp of the last block only")]},
}
SIGN_EXAMPLES = {  # (exercise, mistake) -> {what the student did: their answer}
    ("tiled_attention", "logsumexp rounded to 16 bits"): {
        "lse.to(query.dtype)": tiled_lse_slip("tiled_lse_in_16_bits", "sixteen_bits")},
    ("tiled_attention", "16-bit arithmetic: the running statistics kept in the inputs' dtype"): {
        "no float32": tiled_student("tiled_in_bfloat16")},
}


# ---------------------------------------------------------------- slips that raise

def cached_appending_on_the_heads(query, key, value, past_key=None, past_value=None):
    if past_key is not None:
        key, value = torch.cat([past_key, key], dim=1), torch.cat([past_value, value], dim=1)
    T, S = query.shape[-2], key.shape[-2]
    allowed = torch.ones(T, S, dtype=torch.bool).tril(S - T)
    return attention.scaled_dot_product_attention(query, key, value, attn_mask=allowed)[0], \
        key, value


def cached_appending_features(query, key, value, past_key=None, past_value=None):
    if past_key is not None:
        key, value = torch.cat([past_key, key], dim=-1), torch.cat([past_value, value], dim=-1)
    T, S = query.shape[-2], key.shape[-2]
    allowed = torch.ones(T, S, dtype=torch.bool).tril(S - T)
    return attention.scaled_dot_product_attention(query, key, value, attn_mask=allowed)[0], \
        key, value


def cached_always_appending(query, key, value, past_key=None, past_value=None):
    key, value = torch.cat([past_key, key], dim=-2), torch.cat([past_value, value], dim=-2)
    T, S = query.shape[-2], key.shape[-2]
    allowed = torch.ones(T, S, dtype=torch.bool).tril(S - T)
    return attention.scaled_dot_product_attention(query, key, value, attn_mask=allowed)[0], \
        key, value


def gqa_without_repeating(query, key, value, is_causal=False, scale=None):
    return attention.scaled_dot_product_attention(query, key, value, is_causal=is_causal,
                                                  scale=scale)


def gqa_repeating_by_the_group_count(query, key, value, is_causal=False, scale=None):
    G = key.shape[-3]
    k, v = key.repeat_interleave(G, -3), value.repeat_interleave(G, -3)
    weights = torch.softmax(query @ k.transpose(-2, -1) / math.sqrt(query.shape[-1]), dim=-1)
    return weights @ v, weights


class GQALayerWithHeadSizedKeys(StudentGQALayer):
    """Keys and values projected to all H heads, as in lesson 04."""

    def __init__(self, d_model, n_heads, n_kv_heads, bias=True):
        super().__init__(d_model, n_heads, n_kv_heads, bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)

    forward = GQALayerFromEarlierLessons.forward


class GQALayerAlwaysWithBiases(StudentGQALayer):
    def __init__(self, d_model, n_heads, n_kv_heads, bias=True):
        super().__init__(d_model, n_heads, n_kv_heads)

    forward = GQALayerFromEarlierLessons.forward


def tiled_in_one_piece(query, key, value, is_causal=False, scale=None, block_size=64):
    """Right numbers, but the (T, S) scores are all there at once: no tiling at all."""
    T, S = query.shape[-2], key.shape[-2]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:
        scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).tril(S - T) == 0,
                                    NEG_INF)
    return torch.softmax(scores, dim=-1) @ value, torch.logsumexp(scores, dim=-1)


def tiled_over_queries(query, key, value, is_causal=False, scale=None, block_size=64):
    """Right numbers and never the whole (T, S) matrix, but one block of queries at a time
    against every key, with an ordinary softmax: no online softmax at all."""
    T, S = query.shape[-2], key.shape[-2]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    rows, lses = [], []
    for start in range(0, T, block_size):
        q = query[..., start:start + block_size, :]
        scores = q @ key.transpose(-2, -1) * scale  # (..., b, S): every key at once
        if is_causal:
            position = torch.arange(start, start + q.shape[-2])[:, None] + S - T
            scores = scores.masked_fill(torch.arange(S) > position, NEG_INF)
        rows.append(torch.softmax(scores, dim=-1) @ value)
        lses.append(torch.logsumexp(scores, dim=-1))
    return torch.cat(rows, dim=-2), torch.cat(lses, dim=-1)


def cached_on_the_heads(query, key, value, past_key=None, past_value=None):
    key, value = torch.cat([past_key, key], 1), torch.cat([past_value, value], 1)
    return cached_by_manual_softmax(query, key, value)


def merge_without_a_trailing_axis(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse) * out_a + torch.exp(lse_b - lse) * out_b, lse


SLIPS = [  # (exercise, slip, the mistake explain_error names from the error the slip raises)
    ("cached_attention", cached_appending_on_the_heads, "cache appended on the wrong axis"),
    ("cached_attention", cached_appending_features, "cache appended on the wrong axis"),
    ("cached_attention", cached_always_appending, "an empty cache (None) not handled"),
    ("cached_attention", cached_on_the_heads, "cache appended on the wrong axis"),
    ("grouped_query_attention_layer", gqa_layer_by(gqa_without_repeating),
     "key/value heads not lined up with the query heads"),
    ("grouped_query_attention_layer", gqa_layer_by(gqa_repeating_by_the_group_count),
     "key/value heads not lined up with the query heads"),
    ("grouped_query_attention_layer", GQALayerWithHeadSizedKeys, "a projection of the wrong size"),
    ("grouped_query_attention_layer", GQALayerAlwaysWithBiases, "biases although bias=False"),
    ("tiled_attention", tiled_in_one_piece, "the whole (T, S) score matrix computed at once"),
    ("tiled_attention", tiled_over_queries, "every key at once, a block of queries at a time"),
    ("merge_attention", merge_without_a_trailing_axis,
     "shares of shape (..., T) multiplied with outputs of shape (..., T, Dv)"),
]
