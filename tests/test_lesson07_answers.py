"""Lesson 07's answers as students write them: three correct styles per exercise, and slips
that raise. ``check_solutions`` and ``test_checks_errors`` take them from here, so the course-wide
tests cover lesson 07 too; this module imports nothing of theirs."""

import math

import torch

from attention_course import attention, inference, tiled

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


# ---------------------------------------------------------------- tiled attention

def tiled_by_running_max(query, key, value, is_causal=False, scale=None, block_size=64):
    T, S = query.shape[-2], key.shape[-2]
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
    return acc / l


def tiled_by_log_sum_exp(query, key, value, is_causal=False, scale=None, block_size=64):
    """Keeps the output normalised after every block, and log(l) + m as one number."""
    T, S = query.shape[-2], key.shape[-2]
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
    return out


def tiled_in_query_blocks(query, key, value, is_causal=False, scale=None, block_size=64):
    """FlashAttention-2's loops: query blocks outside, key blocks inside, results written into
    a preallocated output."""
    T, S = query.shape[-2], key.shape[-2]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2])
    out = query.new_empty(*batch, T, value.shape[-1])
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
    return out


CORRECT = {
    "cached_attention": [cached_by_manual_softmax, cached_with_the_course_attention,
                         cached_by_einsum_in_float64],
    "grouped_query_attention": [gqa_by_repeat_interleave, gqa_by_a_group_axis,
                                gqa_by_indexing_heads],
    "tiled_attention": [tiled_by_running_max, tiled_by_log_sum_exp, tiled_in_query_blocks],
}
REFERENCES = {
    "cached_attention": inference.cached_attention,
    "grouped_query_attention": inference.grouped_query_attention,
    "tiled_attention": tiled.tiled_attention,
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


def tiled_in_one_piece(query, key, value, is_causal=False, scale=None, block_size=64):
    """Right numbers, but the (T, S) scores are all there at once: no tiling at all."""
    T, S = query.shape[-2], key.shape[-2]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:
        scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).tril(S - T) == 0,
                                    NEG_INF)
    return torch.softmax(scores, dim=-1) @ value


SLIPS = [
    ("cached_attention", cached_appending_on_the_heads, "cache appended on the wrong axis"),
    ("cached_attention", cached_appending_features, "cache appended on the wrong axis"),
    ("cached_attention", cached_always_appending, "an empty cache (None) not handled"),
    ("grouped_query_attention", gqa_without_repeating,
     "key/value heads not lined up with the query heads"),
    ("grouped_query_attention", gqa_repeating_by_the_group_count,
     "key/value heads not lined up with the query heads"),
    ("tiled_attention", tiled_in_one_piece, "the whole (T, S) score matrix computed at once"),
]
