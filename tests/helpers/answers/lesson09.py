"""Lesson 09's answers as students write them: three correct styles per exercise, shortcuts,
and answers with a catalogued mistake, each written the way a student slips."""

import math

import torch
import torch.nn.functional as F

from attention_course import attention, inference, streaming
from attention_course.checks import lesson09
from attention_course.rope import apply_rotary, rotary_angles, rotate_pairs

NEG_INF = float("-inf")


# ---------------------------------------------------------------- the sliding-window mask

def window_by_comparisons(T, S, window, n_sinks=0, device=None):
    p = torch.arange(S - T, S, device=device).unsqueeze(1)
    j = torch.arange(S, device=device).unsqueeze(0)
    return (j <= p) & ((j > p - window) | (j < n_sinks))


def window_by_bands(T, S, window, n_sinks=0, device=None):
    """Two triangles of ones: up to the diagonal, and not before the window's start."""
    ones = torch.ones(T, S, dtype=torch.bool, device=device)
    causal = ones.tril(S - T)
    too_old = ones.tril(S - T - window)
    sinks = causal.clone()
    sinks[:, n_sinks:] = False
    return (causal & ~too_old) | sinks


def window_by_loops(T, S, window, n_sinks=0, device=None):
    mask = torch.zeros(T, S, dtype=torch.bool, device=device)
    for t in range(T):
        p = S - T + t
        mask[t, max(0, p - window + 1):p + 1] = True
        mask[t, :min(n_sinks, p + 1)] = True
    return mask


# ---------------------------------------------------------------- the rolling cache

def rolling_by_hand(query, key, value, past_key=None, past_value=None, *, window, n_sinks=0):
    if past_key is not None:
        key = torch.cat((past_key, key), dim=-2)
        value = torch.cat((past_value, value), dim=-2)
    T, S = query.shape[-2], key.shape[-2]
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    allowed = window_by_comparisons(T, S, window, n_sinks)
    weights = torch.softmax(scores.masked_fill(~allowed, NEG_INF), dim=-1)
    out = weights @ value
    if S > n_sinks + window - 1:
        keep = torch.cat([torch.arange(n_sinks), torch.arange(S - window + 1, S)])
        key, value = key[..., keep, :], value[..., keep, :]
    return out, key, value


def rolling_with_the_course_attention(query, key, value, past_key=None, past_value=None, *,
                                      window, n_sinks=0):
    """An empty cache as a zero-length tensor; lesson 03's attention; an index_select."""
    if past_key is None:
        past_key, past_value = key[..., :0, :], value[..., :0, :]
    keys = torch.cat([past_key, key], -2)
    values = torch.cat([past_value, value], -2)
    S = keys.shape[-2]
    mask = window_by_bands(query.shape[-2], S, window, n_sinks)
    out, _ = attention.scaled_dot_product_attention(query, keys, values, attn_mask=mask)
    kept = [s for s in range(S) if s < n_sinks or s >= S - (window - 1)]
    index = torch.tensor(kept, dtype=torch.long)
    return out, keys.index_select(-2, index), values.index_select(-2, index)


def rolling_by_einsum_in_float64(query, key, value, past_key=None, past_value=None, *, window,
                                 n_sinks=0):
    keys = key if past_key is None else torch.cat([past_key, key], dim=-2)
    values = value if past_value is None else torch.cat([past_value, value], dim=-2)
    q, k, v = query.double(), keys.double(), values.double()
    T, S = q.shape[-2], k.shape[-2]
    scores = torch.einsum("...td,...sd->...ts", q, k) * q.shape[-1] ** -0.5
    bias = torch.zeros(T, S, dtype=torch.float64).masked_fill(
        ~window_by_loops(T, S, window, n_sinks), NEG_INF)
    out = torch.einsum("...ts,...sv->...tv", (scores + bias).softmax(-1), v).to(query.dtype)
    recent = max(S - (window - 1), n_sinks)  # where the recent part starts
    if recent > n_sinks:
        keys = torch.cat([keys[..., :n_sinks, :], keys[..., recent:, :]], dim=-2)
        values = torch.cat([values[..., :n_sinks, :], values[..., recent:, :]], dim=-2)
    return out, keys, values


# ---------------------------------------------------------------- rotary positions in the cache

def rotary_calling_the_rolling_cache(query, key, value, past_key=None, past_value=None, *,
                                     start, window, n_sinks=0, base=10000.0):
    positions = torch.arange(start, start + query.shape[-2])
    angles = rotary_angles(positions, query.shape[-1], base=base, dtype=query.dtype)
    return rolling_by_hand(apply_rotary(query, angles), apply_rotary(key, angles), value,
                           past_key, past_value, window=window, n_sinks=n_sinks)


def rotary_with_rotate_pairs(query, key, value, past_key=None, past_value=None, *, start,
                             window, n_sinks=0, base=10000.0):
    """Lesson 06's rotate_pairs; the reference's own rolling cache (the 'Stuck?' path)."""
    at = torch.arange(query.shape[-2]) + start
    q, k = rotate_pairs(query, at, base=base), rotate_pairs(key, at, base=base)
    return streaming.rolling_cache_attention(q, k, value, past_key, past_value, window=window,
                                             n_sinks=n_sinks)


def rotary_by_complex_numbers(query, key, value, past_key=None, past_value=None, *, start,
                              window, n_sinks=0, base=10000.0):
    """Pairs (x_i, x_{i+D/2}) as complex numbers times e^{i angle}, in float64."""
    D, T = query.shape[-1], query.shape[-2]
    freq = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    turn = torch.polar(torch.ones(T, D // 2, dtype=torch.float64),
                       (start + torch.arange(T, dtype=torch.float64))[:, None] * freq)

    def rotate(x):
        z = torch.complex(x[..., :D // 2].double(), x[..., D // 2:].double()) * turn
        return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)
    return rolling_by_einsum_in_float64(rotate(query), rotate(key), value, past_key, past_value,
                                        window=window, n_sinks=n_sinks)


# ---------------------------------------------------------------- positions within the cache

def in_cache_by_hand(query, key, value, past_key=None, past_value=None, *, window, n_sinks=0,
                     base=10000.0):
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    T, S, D = query.shape[-2], keys.shape[-2], query.shape[-1]
    angles = rotary_angles(torch.arange(S), D, base=base, dtype=query.dtype)
    q = apply_rotary(query, angles[-T:])
    out, _, _ = rolling_by_hand(q, apply_rotary(keys, angles), values, window=window,
                                n_sinks=n_sinks)
    return out, evict_by_hand(keys, window, n_sinks), evict_by_hand(values, window, n_sinks)


def in_cache_with_rotate_pairs(query, key, value, past_key=None, past_value=None, *, window,
                               n_sinks=0, base=10000.0):
    """Lesson 06's rotate_pairs at explicit places; the rolling cache of this lesson for the
    rest, given the rotated keys: its returned (rotated) keys are thrown away."""
    P = 0 if past_key is None else past_key.shape[-2]
    T = query.shape[-2]
    places = torch.arange(P + T)
    rotated_past = None if past_key is None else rotate_pairs(past_key, places[:P], base=base)
    q = rotate_pairs(query, places[P:], base=base)
    k = rotate_pairs(key, places[P:], base=base)
    out, _, values = rolling_by_einsum_in_float64(q, k, value, rotated_past, past_value,
                                                  window=window, n_sinks=n_sinks)
    raw = key if past_key is None else torch.cat([past_key, key], -2)
    return out, evict_by_hand(raw, window, n_sinks), values


def in_cache_by_complex_numbers(query, key, value, past_key=None, past_value=None, *, window,
                                n_sinks=0, base=10000.0):
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    T, S, D = query.shape[-2], keys.shape[-2], query.shape[-1]
    freq = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    turn = torch.polar(torch.ones(S, D // 2, dtype=torch.float64),
                       torch.arange(S, dtype=torch.float64)[:, None] * freq)

    def rotate(x, turns):
        z = torch.complex(x[..., :D // 2].double(), x[..., D // 2:].double()) * turns
        return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)
    mask = window_by_loops(T, S, window, n_sinks)
    out, _ = attention.scaled_dot_product_attention(rotate(query, turn[S - T:]),
                                                    rotate(keys, turn), values, attn_mask=mask)
    return out, evict_by_hand(keys, window, n_sinks), evict_by_hand(values, window, n_sinks)


# ---------------------------------------------------------------- a learned sink logit

def sink_by_an_extra_column(query, key, value, sink, attn_mask=None, scale=None):
    """gpt-oss's way: the sink as one more column of the scores, softmax, the column dropped."""
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, NEG_INF)
    column = sink.reshape(-1, 1, 1).expand(*scores.shape[:-1], 1)
    weights = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]
    return weights @ value, weights


def sink_by_logsumexp(query, key, value, sink, attn_mask=None, scale=None):
    """log of the denominator = logaddexp(logsumexp(scores), sink)."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.einsum("...td,...sd->...ts", query, key) * scale
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask.logical_not(), NEG_INF)
    log_total = torch.logaddexp(torch.logsumexp(scores, -1), sink[:, None])  # (..., H, T)
    weights = torch.exp(scores - log_total[..., None])
    return weights @ value, weights


def sink_in_float64_by_hand(query, key, value, sink, attn_mask=None, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    q, k, v = query.double(), key.double(), value.double()
    scores = q @ k.transpose(-2, -1) * scale
    if attn_mask is not None:
        scores = torch.where(attn_mask, scores, torch.tensor(NEG_INF, dtype=torch.float64))
    s = sink.double().view(-1, 1, 1)  # (H, 1, 1)
    m = torch.maximum(scores.max(dim=-1, keepdim=True).values, s)
    e = (scores - m).exp()
    weights = e / (e.sum(-1, keepdim=True) + (s - m).exp())
    return (weights @ v).to(query.dtype), weights.to(query.dtype)


CORRECT = {
    "sliding_window_mask": [window_by_comparisons, window_by_bands, window_by_loops],
    "rolling_cache_attention": [rolling_by_hand, rolling_with_the_course_attention,
                                rolling_by_einsum_in_float64],
    "rolling_rotary_attention": [rotary_calling_the_rolling_cache, rotary_with_rotate_pairs,
                                 rotary_by_complex_numbers],
    "streaming_llm_attention": [in_cache_by_hand, in_cache_with_rotate_pairs,
                                in_cache_by_complex_numbers],
    "sink_attention": [sink_by_an_extra_column, sink_by_logsumexp, sink_in_float64_by_hand],
}
REFERENCES = {
    "sliding_window_mask": streaming.sliding_window_mask,
    "rolling_cache_attention": streaming.rolling_cache_attention,
    "rolling_rotary_attention": streaming.rolling_rotary_attention,
    "streaming_llm_attention": streaming.streaming_llm_attention,
    "sink_attention": streaming.sink_attention,
}


# ---------------------------------------------------------------- shortcuts

def rolling_by_torch(query, key, value, past_key=None, past_value=None, *, window, n_sinks=0):
    if past_key is not None:
        key, value = torch.cat([past_key, key], -2), torch.cat([past_value, value], -2)
    mask = window_by_comparisons(query.shape[-2], key.shape[-2], window, n_sinks)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    return out, streaming.evict(key, window, n_sinks), streaming.evict(value, window, n_sinks)


def rolling_by_evict(query, key, value, past_key=None, past_value=None, *, window, n_sinks=0):
    """The course's evict: the half of the exercise that is new in this lesson."""
    out, keys, values = inference.cached_attention(query, key, value, past_key, past_value)
    keys = torch.cat([past_key, key], -2) if past_key is not None else key
    values = torch.cat([past_value, value], -2) if past_value is not None else value
    out, _ = attention.scaled_dot_product_attention(
        query, keys, values,
        attn_mask=window_by_comparisons(query.shape[-2], keys.shape[-2], window, n_sinks))
    return out, streaming.evict(keys, window, n_sinks), streaming.evict(values, window, n_sinks)


def sink_by_torch(query, key, value, sink, attn_mask=None, scale=None):
    """PyTorch's attention with the sink as an extra key of value 0."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    column = sink.reshape(-1, 1, 1).expand(*query.shape[:-1], 1)  # (..., H, T, 1)
    q = torch.cat([query, column / scale], dim=-1)
    ones = torch.ones(*key.shape[:-2], 1, 1, dtype=key.dtype)
    k = torch.cat([torch.cat([key, key.new_zeros(*key.shape[:-1], 1)], -1),
                   torch.cat([key.new_zeros(*key.shape[:-2], 1, key.shape[-1]), ones], -1)],
                  dim=-2)
    v = torch.cat([value, value.new_zeros(*value.shape[:-2], 1, value.shape[-1])], dim=-2)
    mask = None if attn_mask is None else F.pad(attn_mask, (0, 1), value=True)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out, out.new_zeros(*query.shape[:-1], key.shape[-2])


BUILT_INS = {
    "rolling_cache_attention": {"F.scaled_dot_product_attention": rolling_by_torch,
                                "streaming.evict": rolling_by_evict},
    "sink_attention": {"F.scaled_dot_product_attention": sink_by_torch},
}


# ---------------------------------------------------------------- answers with a mistake

def evict_by_hand(cache, window, n_sinks):
    S = cache.shape[-2]
    if S <= n_sinks + window - 1:
        return cache
    return torch.cat([cache[..., :n_sinks, :], cache[..., S - window + 1:, :]], dim=-2)


def window_not_counting_itself(T, S, window, n_sinks=0, device=None):
    """'A window of W tokens before me': W + 1 keys with the query's own."""
    p = torch.arange(S - T, S, device=device)[:, None]
    j = torch.arange(S, device=device)[None, :]
    return (j <= p) & ((j >= p - window) | (j < n_sinks))


def window_top_left(T, S, window, n_sinks=0, device=None):
    p = torch.arange(T, device=device)[:, None]
    j = torch.arange(S, device=device)[None, :]
    return (j <= p) & ((j > p - window) | (j < n_sinks))


def window_with_sinks_for_everyone(T, S, window, n_sinks=0, device=None):
    p = torch.arange(S - T, S, device=device)[:, None]
    j = torch.arange(S, device=device)[None, :]
    return ((j <= p) & (j > p - window)) | (j < n_sinks)


def window_from_the_course_causal_mask(T, S, window, n_sinks=0, device=None):
    """Lesson 03's causal mask (top-left) with a lower band cut off."""
    ones = torch.ones(T, S, dtype=torch.bool, device=device)
    mask = ones.tril() & ~ones.tril(-window)
    mask[:, :n_sinks] = ones.tril()[:, :n_sinks]
    return mask


def rolling_evicting_the_sinks(query, key, value, past_key=None, past_value=None, *, window,
                               n_sinks=0):
    """'Keep the last n_sinks + W - 1 tokens': a plain first-in first-out queue."""
    out, keys, values = rolling_by_hand(query, key, value, past_key, past_value,
                                        window=window + n_sinks, n_sinks=0)
    out, _, _ = rolling_by_hand(query, key, value, past_key, past_value, window=window,
                                n_sinks=n_sinks)
    return out, keys, values


def rolling_keeping_w(query, key, value, past_key=None, past_value=None, *, window,
                      n_sinks=0):
    out, _, _ = rolling_by_hand(query, key, value, past_key, past_value, window=window,
                                n_sinks=n_sinks)
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    if keys.shape[-2] > n_sinks + window:
        keys = torch.cat([keys[..., :n_sinks, :], keys[..., -window:, :]], -2)
        values = torch.cat([values[..., :n_sinks, :], values[..., -window:, :]], -2)
    return out, keys, values


def rolling_evicting_heads(query, key, value, past_key=None, past_value=None, *, window,
                           n_sinks=0):
    """The eviction slices the wrong axis: key[:, :, :n] is fine, key[:, :n] is the heads."""
    out, _, _ = rolling_by_hand(query, key, value, past_key, past_value, window=window,
                                n_sinks=n_sinks)
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    S, keep = keys.shape[-2], window - 1
    if S > n_sinks + keep:
        keys = torch.cat([keys[..., :n_sinks, :, :], keys[..., -keep:, :, :]], dim=-3)
        values = torch.cat([values[..., :n_sinks, :, :], values[..., -keep:, :, :]], dim=-3)
    return out, keys, values


def rolling_by_negative_slices(query, key, value, past_key=None, past_value=None, *, window,
                               n_sinks=0):
    """The recent tokens as the last -(window - 1): window 1 keeps the whole cache."""
    out, _, _ = rolling_by_hand(query, key, value, past_key, past_value, window=window,
                                n_sinks=n_sinks)
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    if keys.shape[-2] > n_sinks + window - 1:
        keys = torch.cat([keys[..., :n_sinks, :], keys[..., -(window - 1):, :]], -2)
        values = torch.cat([values[..., :n_sinks, :], values[..., -(window - 1):, :]], -2)
    return out, keys, values


def rolling_evicting_first(query, key, value, past_key=None, past_value=None, *, window,
                           n_sinks=0):
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    keys, values = evict_by_hand(keys, window, n_sinks), evict_by_hand(values, window, n_sinks)
    mask = window_by_comparisons(query.shape[-2], keys.shape[-2], window, n_sinks)
    out, _ = attention.scaled_dot_product_attention(query, keys, values, attn_mask=mask)
    return out, keys, values


def rolling_top_left(query, key, value, past_key=None, past_value=None, *, window, n_sinks=0):
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    mask = window_top_left(query.shape[-2], keys.shape[-2], window, n_sinks)
    out, _ = attention.scaled_dot_product_attention(query, keys, values, attn_mask=mask)
    return out, evict_by_hand(keys, window, n_sinks), evict_by_hand(values, window, n_sinks)


def rotary_at_the_cache_length(query, key, value, past_key=None, past_value=None, *, start,
                               window, n_sinks=0, base=10000.0):
    """The position of the new token read from the cache, as in lesson 07."""
    P = 0 if past_key is None else past_key.shape[-2]
    return rotary_calling_the_rolling_cache(query, key, value, past_key, past_value, start=P,
                                            window=window, n_sinks=n_sinks, base=base)


def rotary_whole_cache_each_step(query, key, value, past_key=None, past_value=None, *, start,
                                 window, n_sinks=0, base=10000.0):
    """Positions within the cache, StreamingLLM-like, on a cache of already rotated keys."""
    T, D = query.shape[-2], query.shape[-1]
    angles = rotary_angles(torch.arange(start, start + T), D, base=base, dtype=query.dtype)
    k, q = apply_rotary(key, angles), apply_rotary(query, angles)
    if past_key is not None:
        past_key = apply_rotary(past_key, rotary_angles(past_key.shape[-2], D, base=base,
                                                        dtype=query.dtype))
    return rolling_by_hand(q, k, value, past_key, past_value, window=window, n_sinks=n_sinks)


def rotary_from_zero(query, key, value, past_key=None, past_value=None, *, start, window,
                     n_sinks=0, base=10000.0):
    return rotary_calling_the_rolling_cache(query, key, value, past_key, past_value, start=0,
                                            window=window, n_sinks=n_sinks, base=base)


def rotary_values_too(query, key, value, past_key=None, past_value=None, *, start, window,
                      n_sinks=0, base=10000.0):
    at = torch.arange(start, start + query.shape[-2])
    q, k, v = (rotate_pairs(x, at, base=base) for x in (query, key, value))
    return rolling_by_hand(q, k, v, past_key, past_value, window=window, n_sinks=n_sinks)


def in_cache_keeping_rotated_keys(query, key, value, past_key=None, past_value=None, *,
                                  window, n_sinks=0, base=10000.0):
    """The keys rotated at their places and cached so, like lesson 07's cache."""
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    T, S = query.shape[-2], keys.shape[-2]
    angles = rotary_angles(S, query.shape[-1], base=base, dtype=query.dtype)
    keys = apply_rotary(keys, angles)
    return rolling_by_hand(apply_rotary(query, angles[S - T:]), keys[..., S - T:, :], value,
                           keys[..., :S - T, :] if past_key is not None else None, past_value,
                           window=window, n_sinks=n_sinks)


def in_cache_queries_from_zero(query, key, value, past_key=None, past_value=None, *, window,
                               n_sinks=0, base=10000.0):
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    T, S = query.shape[-2], keys.shape[-2]
    angles = rotary_angles(S, query.shape[-1], base=base, dtype=query.dtype)
    out, _, _ = rolling_by_hand(apply_rotary(query, angles[:T]), apply_rotary(keys, angles),
                                values, window=window, n_sinks=n_sinks)
    return out, evict_by_hand(keys, window, n_sinks), evict_by_hand(values, window, n_sinks)


def sink_added_to_the_scores(query, key, value, sink, attn_mask=None, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale + sink[:, None, None]
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, NEG_INF)
    weights = scores.softmax(-1)
    return weights @ value, weights


def sink_max_without_the_sink(query, key, value, sink, attn_mask=None, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, NEG_INF)
    m = scores.amax(-1, keepdim=True)
    e = torch.exp(scores - m)
    weights = e / (e.sum(-1, keepdim=True) + torch.exp(sink[:, None, None] - m))
    return weights @ value, weights


def sink_without_a_maximum(query, key, value, sink, attn_mask=None, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, NEG_INF)
    e = torch.exp(scores)
    weights = e / (e.sum(-1, keepdim=True) + torch.exp(sink).view(-1, 1, 1))
    return weights @ value, weights


def sink_keeping_its_column(query, key, value, sink, attn_mask=None, scale=None):
    """The extra column's softmax, the values padded with a zero row: out is right."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, NEG_INF)
    column = sink.reshape(-1, 1, 1).expand(*scores.shape[:-1], 1)
    weights = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)
    padded = torch.cat([value, value.new_zeros(*value.shape[:-2], 1, value.shape[-1])], -2)
    return weights @ padded, weights


def sink_by_query(query, key, value, sink, attn_mask=None, scale=None):
    """sink[:, None]: one logit per row of the (T, S) scores, not per head."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, NEG_INF)
    s = sink[:, None]
    m = torch.maximum(scores.amax(-1, keepdim=True), s)
    e = torch.exp(scores - m)
    weights = e / (e.sum(-1, keepdim=True) + torch.exp(s - m))
    return weights @ value, weights


def rotary_in_float32(query, key, value, past_key=None, past_value=None, *, start, window,
                      n_sinks=0, base=10000.0):
    """rotary_angles' default dtype, float32, whatever the inputs."""
    angles = rotary_angles(torch.arange(start, start + query.shape[-2]), query.shape[-1],
                           base=base)
    return rolling_by_hand(apply_rotary(query, angles), apply_rotary(key, angles), value,
                           past_key, past_value, window=window, n_sinks=n_sinks)


def window_one_sink_too_many(T, S, window, n_sinks=0, device=None):
    """j <= n_sinks: the first n_sinks + 1 keys are sinks, key 0 one even with no sinks."""
    p = torch.arange(S - T, S, device=device)[:, None]
    j = torch.arange(S, device=device)[None, :]
    return (j <= p) & ((j > p - window) | (j <= n_sinks))


def evict_testing_the_window_alone(cache, window, n_sinks):
    """The eviction test forgets the sinks: from W to n_sinks + W - 1 tokens the recent part
    overlaps them."""
    S = cache.shape[-2]
    if S <= window - 1:
        return cache
    return torch.cat([cache[..., :n_sinks, :], cache[..., S - (window - 1):, :]], dim=-2)


def rolling_testing_the_window_alone(query, key, value, past_key=None, past_value=None, *,
                                     window, n_sinks=0):
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    mask = window_by_comparisons(query.shape[-2], keys.shape[-2], window, n_sinks)
    out, _ = attention.scaled_dot_product_attention(query, keys, values, attn_mask=mask)
    return (out, evict_testing_the_window_alone(keys, window, n_sinks),
            evict_testing_the_window_alone(values, window, n_sinks))


def rolling_evicting_past_n_sinks_plus_w(query, key, value, past_key=None, past_value=None, *,
                                         window, n_sinks=0):
    """'Evict when the cache is longer than n_sinks + W': one token late."""
    out, _, _ = rolling_by_hand(query, key, value, past_key, past_value, window=window,
                                n_sinks=n_sinks)
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    S = keys.shape[-2]
    if S > n_sinks + window:
        keys = torch.cat([keys[..., :n_sinks, :], keys[..., S - window + 1:, :]], dim=-2)
        values = torch.cat([values[..., :n_sinks, :], values[..., S - window + 1:, :]], dim=-2)
    return out, keys, values


def rolling_slicing_the_heads(query, key, value, past_key=None, past_value=None, *, window,
                              n_sinks=0):
    """key[:, :n] on a (B, H, S, D) cache: the heads' axis, not the tokens'."""
    out, _, _ = rolling_by_hand(query, key, value, past_key, past_value, window=window,
                                n_sinks=n_sinks)
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    S = keys.shape[-2]
    if S > n_sinks + window - 1:
        keys = torch.cat([keys[:, :n_sinks], keys[:, S - (window - 1):]], dim=1)
        values = torch.cat([values[:, :n_sinks], values[:, S - (window - 1):]], dim=1)
    return out, keys, values


def rolling_slicing_the_width(query, key, value, past_key=None, past_value=None, *, window,
                              n_sinks=0):
    """key[..., :n]: the last axis is the head width D."""
    out, _, _ = rolling_by_hand(query, key, value, past_key, past_value, window=window,
                                n_sinks=n_sinks)
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    S = keys.shape[-2]
    if S > n_sinks + window - 1:
        keys = torch.cat([keys[..., :n_sinks], keys[..., S - (window - 1):]], dim=-1)
        values = torch.cat([values[..., :n_sinks], values[..., S - (window - 1):]], dim=-1)
    return out, keys, values


def rolling_with_a_plain_causal_mask(query, key, value, past_key=None, past_value=None, *,
                                     window, n_sinks=0):
    """The cache evicts, but the mask is lesson 07's: the window forgotten."""
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    T, S = query.shape[-2], keys.shape[-2]
    mask = torch.ones(T, S, dtype=torch.bool).tril(S - T)
    out, _ = attention.scaled_dot_product_attention(query, keys, values, attn_mask=mask)
    return out, evict_by_hand(keys, window, n_sinks), evict_by_hand(values, window, n_sinks)


def rotary_testing_the_window_alone(query, key, value, past_key=None, past_value=None, *,
                                    start, window, n_sinks=0, base=10000.0):
    at = torch.arange(start, start + query.shape[-2])
    q, k = rotate_pairs(query, at, base=base), rotate_pairs(key, at, base=base)
    return rolling_testing_the_window_alone(q, k, value, past_key, past_value, window=window,
                                            n_sinks=n_sinks)


def rotary_with_the_default_base(query, key, value, past_key=None, past_value=None, *, start,
                                 window, n_sinks=0, base=10000.0):
    at = torch.arange(start, start + query.shape[-2])
    angles = rotary_angles(at, query.shape[-1], dtype=query.dtype)
    return rolling_by_hand(apply_rotary(query, angles), apply_rotary(key, angles), value,
                           past_key, past_value, window=window, n_sinks=n_sinks)


def in_cache_testing_the_window_alone(query, key, value, past_key=None, past_value=None, *,
                                      window, n_sinks=0, base=10000.0):
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    T, S = query.shape[-2], keys.shape[-2]
    angles = rotary_angles(S, query.shape[-1], base=base, dtype=query.dtype)
    out, _, _ = rolling_by_hand(apply_rotary(query, angles[S - T:]), apply_rotary(keys, angles),
                                values, window=window, n_sinks=n_sinks)
    return (out, evict_testing_the_window_alone(keys, window, n_sinks),
            evict_testing_the_window_alone(values, window, n_sinks))


def in_cache_rotating_the_values(query, key, value, past_key=None, past_value=None, *, window,
                                 n_sinks=0, base=10000.0):
    """Every value turned at its place, like the keys (and cached as it came, like them)."""
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    T, S = query.shape[-2], keys.shape[-2]
    angles = rotary_angles(S, query.shape[-1], base=base, dtype=query.dtype)
    out, _, _ = rolling_by_hand(apply_rotary(query, angles[S - T:]), apply_rotary(keys, angles),
                                apply_rotary(values, angles), window=window, n_sinks=n_sinks)
    return out, evict_by_hand(keys, window, n_sinks), evict_by_hand(values, window, n_sinks)


def in_cache_evicting_first(query, key, value, past_key=None, past_value=None, *, window,
                            n_sinks=0, base=10000.0):
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    keys, values = evict_by_hand(keys, window, n_sinks), evict_by_hand(values, window, n_sinks)
    T, S = query.shape[-2], keys.shape[-2]
    angles = rotary_angles(S, query.shape[-1], base=base, dtype=query.dtype)
    mask = window_by_comparisons(T, S, window, n_sinks)
    out, _ = attention.scaled_dot_product_attention(
        apply_rotary(query, angles[S - T:]), apply_rotary(keys, angles), values, attn_mask=mask)
    return out, keys, values


def in_cache_in_float32(query, key, value, past_key=None, past_value=None, *, window,
                        n_sinks=0, base=10000.0):
    """rotary_angles' default dtype, float32, whatever the inputs."""
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    T, S = query.shape[-2], keys.shape[-2]
    angles = rotary_angles(S, query.shape[-1], base=base)
    out, _, _ = rolling_by_hand(apply_rotary(query, angles[S - T:]), apply_rotary(keys, angles),
                                values, window=window, n_sinks=n_sinks)
    return out, evict_by_hand(keys, window, n_sinks), evict_by_hand(values, window, n_sinks)


def in_cache_like_the_stream_positions(query, key, value, past_key=None, past_value=None, *,
                                       window, n_sinks=0, base=10000.0):
    """The previous exercise again, the new tokens placed at the cache's length."""
    P = 0 if past_key is None else past_key.shape[-2]
    return rotary_calling_the_rolling_cache(query, key, value, past_key, past_value, start=P,
                                            window=window, n_sinks=n_sinks, base=base)


def in_cache_with_the_default_base(query, key, value, past_key=None, past_value=None, *,
                                   window, n_sinks=0, base=10000.0):
    return in_cache_by_hand(query, key, value, past_key, past_value, window=window,
                            n_sinks=n_sinks)


def sink_not_shifted(query, key, value, sink, attn_mask=None, scale=None):
    """The keys' exponentials shifted by their maximum, the sink's not."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, NEG_INF)
    m = scores.max(dim=-1, keepdim=True).values
    e = torch.exp(scores - m)
    weights = e / (e.sum(-1, keepdim=True) + torch.exp(sink).view(-1, 1, 1))
    return weights @ value, weights


MISTAKES = {  # student's answer: (exercise, the mistakes the check must name)
    window_not_counting_itself: ("sliding_window_mask", [lesson09.WINDOW_SELF_OUT.name]),
    window_top_left: ("sliding_window_mask", [lesson09.WINDOW_TOP_LEFT.name]),
    window_with_sinks_for_everyone: ("sliding_window_mask",
                                     [lesson09.SINKS_IN_THE_FUTURE.name]),
    window_from_the_course_causal_mask: ("sliding_window_mask",
                                         [lesson09.WINDOW_TOP_LEFT.name]),
    rolling_evicting_the_sinks: ("rolling_cache_attention", [lesson09.ROLLING_MISTAKES[0].name]),
    rolling_keeping_w: ("rolling_cache_attention", [lesson09.ROLLING_MISTAKES[1].name]),
    rolling_evicting_heads: ("rolling_cache_attention", [lesson09.ROLLING_MISTAKES[3].name]),
    rolling_by_negative_slices: ("rolling_cache_attention",
                                 [lesson09.ROLLING_MISTAKES[6].name]),
    rolling_evicting_first: ("rolling_cache_attention", [lesson09.ROLLING_MISTAKES[5].name]),
    rolling_top_left: ("rolling_cache_attention", [lesson09.WINDOW_TOP_LEFT.name]),
    rotary_at_the_cache_length: ("rolling_rotary_attention",
                                 [lesson09.ROTARY_MISTAKES[0].name]),
    rotary_whole_cache_each_step: ("rolling_rotary_attention",
                                   [lesson09.ROTARY_MISTAKES[2].name]),
    rotary_from_zero: ("rolling_rotary_attention", [lesson09.ROTARY_MISTAKES[1].name]),
    rotary_values_too: ("rolling_rotary_attention", [lesson09.ROTARY_MISTAKES[3].name]),
    rotary_in_float32: ("rolling_rotary_attention", [lesson09.ROTARY_MISTAKES[5].name]),
    in_cache_keeping_rotated_keys: ("streaming_llm_attention",
                                    [lesson09.STREAMING_LLM_MISTAKES[0].name]),
    in_cache_queries_from_zero: ("streaming_llm_attention",
                                 [lesson09.STREAMING_LLM_MISTAKES[1].name]),
    sink_added_to_the_scores: ("sink_attention", [lesson09.SINK_MISTAKES[0].name]),
    sink_max_without_the_sink: ("sink_attention", [lesson09.SINK_MISTAKES[1].name]),
    sink_without_a_maximum: ("sink_attention", [lesson09.SINK_MISTAKES[2].name]),
    sink_by_query: ("sink_attention", [lesson09.SINK_MISTAKES[3].name]),
    sink_keeping_its_column: ("sink_attention", [lesson09.SINK_MISTAKES[4].name]),
    window_one_sink_too_many: ("sliding_window_mask", [lesson09.SINKS_ONE_TOO_MANY.name]),
    rolling_testing_the_window_alone: ("rolling_cache_attention",
                                       [lesson09.EVICTION_TEST_WITHOUT_SINKS.name]),
    rolling_evicting_past_n_sinks_plus_w: ("rolling_cache_attention",
                                           [lesson09.EVICTION_TEST_OFF_BY_ONE.name]),
    rolling_slicing_the_heads: ("rolling_cache_attention", [lesson09.ROLLING_MISTAKES[3].name]),
    rolling_slicing_the_width: ("rolling_cache_attention", [lesson09.ROLLING_MISTAKES[4].name]),
    rolling_with_a_plain_causal_mask: ("rolling_cache_attention",
                                       [lesson09.WINDOW_IGNORED.name]),
    rotary_testing_the_window_alone: ("rolling_rotary_attention",
                                      [lesson09.EVICTION_TEST_WITHOUT_SINKS.name]),
    rotary_with_the_default_base: ("rolling_rotary_attention", [lesson09.BASE_IGNORED.name]),
    in_cache_testing_the_window_alone: ("streaming_llm_attention",
                                        [lesson09.EVICTION_TEST_WITHOUT_SINKS.name]),
    in_cache_rotating_the_values: ("streaming_llm_attention",
                                   [lesson09.STREAMING_LLM_MISTAKES[2].name]),
    in_cache_evicting_first: ("streaming_llm_attention", [lesson09.ROLLING_MISTAKES[5].name]),
    in_cache_in_float32: ("streaming_llm_attention", [lesson09.ROTARY_MISTAKES[5].name]),
    in_cache_like_the_stream_positions: ("streaming_llm_attention",
                                         [lesson09.STREAMING_LLM_MISTAKES[4].name]),
    in_cache_with_the_default_base: ("streaming_llm_attention", [lesson09.BASE_IGNORED.name]),
    sink_not_shifted: ("sink_attention", [lesson09.SINK_MISTAKES[5].name]),
}

SLIPS = []
