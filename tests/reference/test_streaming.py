"""Lesson 09's reference: the sliding-window mask, the rolling cache whose decoding equals
attention over the whole stream under the window-plus-sinks mask, token for token, rotary
positions in that cache, and attention with a learned sink logit."""

import pytest
import torch

from attention_course import attention, rope, streaming

NEG_INF = float("-inf")


def mask_by_loops(T, S, window, n_sinks):
    mask = torch.zeros(T, S, dtype=torch.bool)
    for t in range(T):
        p = S - T + t
        for j in range(S):
            mask[t, j] = j <= p and (p - window < j or j < n_sinks)
    return mask


@pytest.mark.parametrize(("T", "S", "window", "n_sinks"),
                         [(6, 6, 3, 0), (3, 9, 4, 2), (1, 12, 5, 1), (6, 6, 1, 2), (5, 5, 2, 3),
                          (4, 6, 10, 0), (8, 8, 8, 8)])
def test_mask_equals_the_rule_by_loops(T, S, window, n_sinks):
    assert torch.equal(streaming.sliding_window_mask(T, S, window, n_sinks),
                       mask_by_loops(T, S, window, n_sinks))


def test_mask_counts_the_query_itself_and_a_wide_window_is_causal():
    mask = streaming.sliding_window_mask(10, 10, 4)
    assert mask.sum(-1).tolist() == [1, 2, 3, 4, 4, 4, 4, 4, 4, 4]
    assert torch.equal(streaming.sliding_window_mask(5, 9, 100),
                       torch.ones(5, 9, dtype=torch.bool).tril(4))


def decode(step, q, k, v, chunk=1, **kw):
    """Run ``step`` over the stream chunk by chunk with its cache; the outputs, the cache
    sizes after every chunk and the last cache's keys."""
    outs, sizes, past_key, past_value = [], [], None, None
    rotary = step is streaming.rolling_rotary_attention
    for s in range(0, q.shape[-2], chunk):
        out, past_key, past_value = step(q[..., s:s + chunk, :], k[..., s:s + chunk, :],
                                         v[..., s:s + chunk, :], past_key, past_value,
                                         **({"start": s} if rotary else {}), **kw)
        outs.append(out)
        sizes.append(past_key.shape[-2])
    return torch.cat(outs, dim=-2), sizes, past_key


@pytest.mark.parametrize(("window", "n_sinks", "chunk"),
                         [(4, 2, 1), (5, 0, 1), (3, 1, 1), (4, 2, 3), (6, 4, 5), (1, 1, 1)])
def test_rolling_cache_decoding_equals_full_attention_under_the_mask(window, n_sinks, chunk):
    """A stream 10 times the cache's size, token by token (or in chunks): every output equals
    attention over the whole stream under the window-plus-sinks mask."""
    g = torch.Generator().manual_seed(window * 10 + n_sinks)
    N = 10 * (n_sinks + window)
    q, k, v = (torch.randn(2, 3, N, 4, generator=g, dtype=torch.float64) for _ in range(3))
    expected, _ = attention.scaled_dot_product_attention(
        q, k, v, attn_mask=streaming.sliding_window_mask(N, N, window, n_sinks))
    got, sizes, _ = decode(streaming.rolling_cache_attention, q, k, v, chunk, window=window,
                           n_sinks=n_sinks)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    assert max(sizes) == n_sinks + window - 1 == sizes[-1]  # flat once full


def test_the_cache_keeps_the_sinks_and_the_last_window_minus_one_in_order():
    positions = torch.arange(20.0)[None, :, None]  # (1, S, 1): each key holds its position
    _, _, keys = decode(streaming.rolling_cache_attention, positions, positions, positions,
                        window=4, n_sinks=2)
    assert keys.flatten().tolist() == [0.0, 1.0, 17.0, 18.0, 19.0]
    _, _, keys = decode(streaming.rolling_cache_attention, positions, positions, positions,
                        chunk=7, window=1, n_sinks=0)
    assert keys.numel() == 0  # window 1: the next token needs nothing of the past


def rotary_full(q, k, v, window, n_sinks, base=10000.0):
    N = q.shape[-2]
    angles = rope.rotary_angles(N, q.shape[-1], base=base, dtype=q.dtype)
    out, _ = attention.scaled_dot_product_attention(
        rope.apply_rotary(q, angles), rope.apply_rotary(k, angles), v,
        attn_mask=streaming.sliding_window_mask(N, N, window, n_sinks))
    return out


@pytest.mark.parametrize(("window", "n_sinks", "chunk"), [(4, 2, 1), (3, 0, 1), (5, 1, 3)])
def test_rolling_rotary_decoding_equals_rotary_attention_over_the_stream(window, n_sinks, chunk):
    """Keys rotated at their positions in the stream before caching: exact, however far the
    stream runs (here 12 times the cache), token by token and in chunks."""
    g = torch.Generator().manual_seed(window)
    N = 12 * (n_sinks + window)
    q, k, v = (torch.randn(2, 2, N, 8, generator=g, dtype=torch.float64) for _ in range(3))
    got, sizes, _ = decode(streaming.rolling_rotary_attention, q, k, v, chunk, window=window,
                           n_sinks=n_sinks)
    torch.testing.assert_close(got, rotary_full(q, k, v, window, n_sinks),
                               rtol=1e-10, atol=1e-12)
    assert sizes[-1] == n_sinks + window - 1


def test_renumbered_positions_break_the_equality_after_eviction():
    """The new token placed at the cache's length (not its position in the stream) agrees
    until the first eviction, then no longer: the mistake the lesson names."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 30, 8, generator=g, dtype=torch.float64) for _ in range(3))
    expected = rotary_full(q, k, v, 4, 1)
    past_key = past_value = None
    for s in range(30):
        P = 0 if past_key is None else past_key.shape[-2]
        out, past_key, past_value = streaming.rolling_rotary_attention(
            q[..., s:s + 1, :], k[..., s:s + 1, :], v[..., s:s + 1, :], past_key, past_value,
            start=P, window=4, n_sinks=1)
        assert torch.allclose(out, expected[..., s:s + 1, :]) == (s <= 4)


def test_streaming_llm_positions_equal_the_stream_until_the_first_eviction_then_stay_close():
    """Positions within the cache are the stream's positions while nothing is evicted; after
    that the window's keys keep their offsets from the query (rotary attention depends on
    offsets only) and only the sinks move closer: without sinks it is still exact."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 2, 40, 8, generator=g, dtype=torch.float64) for _ in range(3))
    for n_sinks, exact_until in ((0, 40), (2, 6)):
        expected = rotary_full(q, k, v, 4, n_sinks)
        past_key = past_value = None
        for s in range(40):
            out, past_key, past_value = streaming.streaming_llm_attention(
                q[..., s:s + 1, :], k[..., s:s + 1, :], v[..., s:s + 1, :], past_key,
                past_value, window=4, n_sinks=n_sinks)
            assert torch.allclose(out, expected[..., s:s + 1, :]) == (s < exact_until), s
        # the cache keeps the keys as they came: not rotated
        kept = streaming.evict(k[..., :40, :], 4, n_sinks)
        torch.testing.assert_close(past_key, kept)


def sink_by_an_extra_column(query, key, value, sink, attn_mask=None, scale=None):
    """gpt-oss's way: the sink as one more column of the scores, softmax, the column dropped."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, NEG_INF)
    column = sink[:, None, None].expand(*scores.shape[:-1], 1)
    weights = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]
    return weights @ value, weights


def test_sink_attention_equals_an_extra_column_and_rows_sum_below_one():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64) for _ in range(3))
    sink = torch.randn(3, generator=g, dtype=torch.float64)
    mask = streaming.sliding_window_mask(5, 5, 2, 1)
    got = streaming.sink_attention(q, k, v, sink, mask)
    for a, b in zip(got, sink_by_an_extra_column(q, k, v, sink, mask), strict=True):
        torch.testing.assert_close(a, b)
    assert (got[1].sum(-1) < 1).all()
    # a sink of -inf is plain attention
    plain = attention.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(
        streaming.sink_attention(q, k, v, torch.full((3,), NEG_INF, dtype=torch.float64),
                                 mask)[0], plain[0])


def test_sink_attention_is_stable_and_empty_rows_give_zero():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 2, 3, 4, generator=g) * 10  # scores in the tens to hundreds
    k = torch.randn(1, 2, 3, 4, generator=g) * 10
    v = torch.randn(1, 2, 3, 4, generator=g)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False
    out, weights = streaming.sink_attention(q, k, v, torch.tensor([1000.0, -1000.0]), mask)
    assert out.isfinite().all() and weights.isfinite().all()
    assert (weights[:, :, 1] == 0).all() and (out[:, :, 1] == 0).all()
    assert (weights[:, 0] < 1e-30).all()  # a sink of 1000 takes (nearly) everything


def test_sink_attention_gradients_reach_the_sink():
    g = torch.Generator().manual_seed(2)
    args = [torch.randn(2, 2, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
            for _ in range(3)] + [torch.randn(2, generator=g, dtype=torch.float64,
                                              requires_grad=True)]
    assert torch.autograd.gradcheck(lambda *a: streaming.sink_attention(*a)[0], args)
