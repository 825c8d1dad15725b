"""Attention over long streams: sliding windows, a rolling key/value cache with attention
sinks, rotary positions in that cache, and a softmax with a learned sink logit.

Lesson: 09_sliding_windows

Lesson 07's cache grows by one token per step, without end. A sliding window of W tokens lets
a query see only the W most recent positions (itself included); a decoder then needs to keep
only the last W - 1 keys and values, and its cache stays the same size however long the stream
runs. StreamingLLM keeps the first few tokens as well (the "sinks"), which the model is used to
seeing. gpt-oss goes another way: every head has a learned sink logit, a column of the softmax
that belongs to no key, so a query may give part of its weight to nothing at all.
"""

import torch
from torch import Tensor

from .attention import compute_dtype, scaled_dot_product_attention
from .rope import apply_rotary, rotary_angles

NEG_INF = float("-inf")


def sliding_window_mask(T: int, S: int, window: int, n_sinks: int = 0, device=None) -> Tensor:
    """Bool mask of causal attention within a sliding window, plus sinks (True = may attend).

    The T queries are the LAST T of the S positions (bottom-right aligned, as after a cache of
    S - T tokens): query t sits at position p = S - T + t. It may attend to key j when
    p - window < j <= p (the ``window`` most recent positions, itself included), and to the
    first ``n_sinks`` keys (j < n_sinks) as long as they are not in its future (j <= p).

    Args:
        T: number of queries; S: number of keys (S >= T).
        window: W >= 1, the number of positions a query sees in its window, its own included.
        n_sinks: how many of the first keys every query may attend to as well.
        device: where to build the mask.
    Returns:
        (T, S) bool tensor.
    Lesson: 09_sliding_windows
    """
    query_at = torch.arange(S - T, S, device=device)[:, None]  # (T, 1) positions p
    key_at = torch.arange(S, device=device)[None, :]  # (1, S) positions j
    causal = key_at <= query_at
    recent = key_at > query_at - window  # within the window of W positions
    sink = key_at < n_sinks
    return causal & (recent | sink)  # (T, S)


def evict(cache: Tensor, window: int, n_sinks: int = 0) -> Tensor:
    """What a rolling cache keeps of (..., S, D) keys or values in position order: the first
    ``n_sinks`` tokens and the last ``window - 1`` ones; all of them when S <= n_sinks +
    window - 1. Lesson: 09_sliding_windows"""
    S, keep = cache.shape[-2], window - 1
    if S <= n_sinks + keep:
        return cache
    sinks = cache[..., :n_sinks, :]  # (..., n_sinks, D)
    recent = cache[..., S - keep:, :]  # (..., W - 1, D): never cache[..., -0:, :]
    return torch.cat([sinks, recent], dim=-2)  # (..., n_sinks + W - 1, D)


def rolling_cache_attention(query: Tensor, key: Tensor, value: Tensor,
                            past_key: Tensor | None = None, past_value: Tensor | None = None,
                            *, window: int, n_sinks: int = 0):
    """Attention of T new tokens through a rolling key/value cache of fixed size.

    The cache holds, in position order, the first ``n_sinks`` tokens of the stream and the
    ``window - 1`` tokens just before the new ones (fewer while the stream is shorter):
    everything a new token may see under ``sliding_window_mask`` besides the new tokens.

    Args:
        query: (B, H, T, D) queries of the new tokens (any leading dims that broadcast).
        key: (B, H, T, D) keys of the new tokens.
        value: (B, H, T, Dv) values of the new tokens.
        past_key: (B, H, P, D) the cache's keys as returned by the previous call, or None for
            an empty cache; P <= n_sinks + window - 1.
        past_value: (B, H, P, Dv) the cache's values, or None.
        window: W >= 1, the positions a query sees in its window, its own included.
        n_sinks: the first tokens of the stream that every query sees and the cache keeps.
    Returns:
        out: (B, H, T, Dv), equal to attention over the whole stream under
            ``sliding_window_mask`` (the new tokens are the last T).
        keys: (B, H, P', D) the cache after appending the new keys and evicting: the first
            n_sinks tokens and the last W - 1 (P' = min(P + T, n_sinks + W - 1)).
        values: (B, H, P', Dv) the same for the values.
    Lesson: 09_sliding_windows
    """
    if past_key is not None:
        key = torch.cat([past_key, key], dim=-2)  # (B,H,P,D) + (B,H,T,D) -> (B,H,P+T,D)
        value = torch.cat([past_value, value], dim=-2)
    T, S = query.shape[-2], key.shape[-2]
    # in the cache, the window's keys are consecutive positions ending just before the new
    # tokens, and the sinks are positions 0 .. n_sinks-1: the mask over cache indices is the
    # mask over positions
    allowed = sliding_window_mask(T, S, window, n_sinks, device=query.device)  # (T, S)
    out, _ = scaled_dot_product_attention(query, key, value, attn_mask=allowed)
    return out, evict(key, window, n_sinks), evict(value, window, n_sinks)


def rolling_rotary_attention(query: Tensor, key: Tensor, value: Tensor,
                             past_key: Tensor | None = None, past_value: Tensor | None = None,
                             *, start: int, window: int, n_sinks: int = 0,
                             base: float = 10000.0):
    """Rolling-cache attention with rotary positions, the keys rotated once, before caching.

    Args:
        query, key: (B, H, T, D) queries and keys of the new tokens, NOT rotated yet (D even).
        value: (B, H, T, Dv) values of the new tokens.
        past_key: (B, H, P, D) the rolling cache's keys, each already rotated at its own
            position in the stream, or None; past_value: (B, H, P, Dv) its values, or None.
        start: the position in the stream of the first new token (how many tokens came
            before it); once the cache has evicted tokens, start > P.
        window, n_sinks: as in ``rolling_cache_attention``.
        base: the rotary wavelength scale of lesson 06.
    Returns:
        out: (B, H, T, Dv), equal to lesson 06's rotary attention over the whole stream under
            ``sliding_window_mask``.
        keys: the cache after appending the new keys rotated at start .. start + T - 1, then
            evicting; values: the same for the values (never rotated).
    Lesson: 09_sliding_windows
    """
    T, D = query.shape[-2], query.shape[-1]
    positions = torch.arange(start, start + T, device=query.device)  # in the stream
    angles = rotary_angles(positions, D, base=base, dtype=compute_dtype(query.dtype))
    query, key = apply_rotary(query, angles), apply_rotary(key, angles)  # once, here
    return rolling_cache_attention(query, key, value, past_key, past_value, window=window,
                                   n_sinks=n_sinks)


def streaming_llm_attention(query: Tensor, key: Tensor, value: Tensor,
                            past_key: Tensor | None = None, past_value: Tensor | None = None,
                            *, window: int, n_sinks: int = 0, base: float = 10000.0):
    """Rolling-cache attention with rotary positions assigned within the cache, as StreamingLLM
    does: the cache keeps keys NOT rotated, and at every step the keys are rotated at their
    places in the cache, 0 .. S-1, and the new queries at S - T .. S - 1.

    A query then never sees a key farther than n_sinks + W - 1 places away, however long the
    stream: the sinks stay at distances the model saw in training. The price: once tokens are
    evicted, a sink's distance is its place in the cache, not its distance in the stream, so
    the result is no longer attention over the stream under any mask.

    Args:
        query, key: (B, H, T, D) queries and keys of the new tokens, not rotated (D even).
        value: (B, H, T, Dv) values of the new tokens.
        past_key: (B, H, P, D) the cache's keys, NOT rotated, or None; past_value: its values.
        window, n_sinks: as in ``rolling_cache_attention``; base: as in lesson 06.
    Returns:
        out: (B, H, T, Dv).
        keys, values: the cache after appending and evicting, keys not rotated.
    Lesson: 09_sliding_windows
    """
    if past_key is not None:
        key = torch.cat([past_key, key], dim=-2)  # (B, H, S, D), not rotated
        value = torch.cat([past_value, value], dim=-2)
    T, S, D = query.shape[-2], key.shape[-2], query.shape[-1]
    angles = rotary_angles(S, D, base=base, device=query.device,
                           dtype=compute_dtype(query.dtype))  # places 0 .. S-1 in the cache
    rotated_query = apply_rotary(query, angles[S - T:])  # the new tokens are the last T places
    rotated_key = apply_rotary(key, angles)  # every key, at this step's places
    allowed = sliding_window_mask(T, S, window, n_sinks, device=query.device)
    out, _ = scaled_dot_product_attention(rotated_query, rotated_key, value, attn_mask=allowed)
    return out, evict(key, window, n_sinks), evict(value, window, n_sinks)


def sink_attention(query: Tensor, key: Tensor, value: Tensor, sink: Tensor,
                   attn_mask: Tensor | None = None, scale: float | None = None):
    """Attention whose softmax has one more logit per head, the sink, that belongs to no key.

    weights[s] = exp(score_s - m) / (exp(sink - m) + sum over keys of exp(score - m)), with m the
    largest of the row's scores and the sink: a row's weights sum to less than 1, and a row
    whose every key is masked gives weights 0 (the sink takes everything), never NaN.

    Args:
        query: (..., H, T, D); key: (..., H, S, D); value: (..., H, S, Dv).
        sink: (H,) one logit per head.
        attn_mask: None or a bool mask (True = may attend) that broadcasts to (..., H, T, S).
        scale: factor for the scores; None means 1/sqrt(D).
    Returns:
        out: (..., H, T, Dv) the weighted sums of the values.
        weights: (..., H, T, S) the weights of the keys (the sink's share left out).
    Lesson: 09_sliding_windows
    """
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale  # (..., H, T, S)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, NEG_INF)
    sink = sink.to(scores.dtype)[:, None, None].expand(*scores.shape[:-1], 1)  # (..., H, T, 1)
    top = torch.maximum(scores.amax(dim=-1, keepdim=True), sink)  # finite: the sink is
    numerators = torch.exp(scores - top)  # (..., H, T, S)
    denominator = numerators.sum(dim=-1, keepdim=True) + torch.exp(sink - top)
    weights = numerators / denominator
    return weights @ value, weights
