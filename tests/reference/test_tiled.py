"""Lesson 07's tiled attention (attention_course.tiled): attention in one piece, computed block
by block in a fraction of the memory, and the peak-memory meter that shows it."""

import pytest
import torch
import torch.nn.functional as F

from attention_course import attention, tiled
from helpers.inputs import bottom_right, qkv

# ---------------------------------------------------------------- tiled attention

@pytest.mark.parametrize(("T", "S"), [(7, 7), (5, 11), (1, 9), (64, 200)])
@pytest.mark.parametrize("block_size", [1, 3, 64, 500])
@pytest.mark.parametrize("is_causal", [False, True])
def test_tiled_attention_is_attention_in_one_piece(T, S, block_size, is_causal):
    q, k, v = qkv(2, 3, T, 4, S=S, Dv=6)
    mask = bottom_right(T, S) if is_causal else None
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    hidden = ~bottom_right(T, S) if is_causal else torch.zeros(T, S, dtype=torch.bool)
    scores = (q @ k.transpose(-2, -1) * 0.5).masked_fill(hidden, float("-inf"))
    for tiling in (tiled.tiled_attention, tiled.flash_attention):
        out, lse = tiling(q, k, v, is_causal, block_size=block_size)
        assert torch.allclose(out, expected)
        assert lse.shape == (2, 3, T) and torch.allclose(lse, torch.logsumexp(scores, dim=-1))


def test_tiled_attention_takes_an_explicit_scale_and_huge_scores():
    q, k, v = qkv(2, 3, 9, 4, dtype=torch.float32)
    expected = F.scaled_dot_product_attention(1000 * q, k, v, scale=0.5)
    out, lse = tiled.tiled_attention(1000 * q, k, v, scale=0.5, block_size=2)
    assert out.isfinite().all() and torch.allclose(out, expected, atol=1e-5)
    scores = 1000 * q @ k.transpose(-2, -1) * 0.5  # in the thousands: e^score overflows
    assert torch.allclose(lse, torch.logsumexp(scores, dim=-1))


def test_tiled_attention_needs_as_many_keys_as_causal_queries():
    with pytest.raises(ValueError, match="T <= S"):
        tiled.tiled_attention(*qkv(1, 1, 5, 4, S=3), is_causal=True)


def test_peak_memory_counts_new_tensors_until_they_are_freed_and_views_as_nothing():
    x = torch.zeros(1000, 250)  # 1 MB, made before: not counted

    def two_in_turn(x):
        y = x + 1  # 1 MB
        del y
        return (x * 2)[:10].clone()  # 1 MB, a view of it, and a copy of its first 10 rows

    def two_at_once(x):
        y = x + 1
        return y.T.reshape(-1)[:5] + (x - 1).sum()  # y, a copy by reshape, x - 1: 3 MB

    assert tiled.peak_memory(two_in_turn, x)[1] == 1_000_000 + 10_000
    assert 3_000_000 <= tiled.peak_memory(two_at_once, x)[1] < 3_000_100
    assert tiled.peak_memory(lambda x: x.view(-1)[::2], x)[1] == 0


def memory(way, T: int) -> int:
    q, k, v = qkv(1, 4, T, 32, dtype=torch.float32)
    with torch.no_grad():
        return tiled.peak_memory(way, q, k, v)[1]


def test_tiled_memory_grows_like_t_and_the_naive_one_like_t_squared():
    def naive(q, k, v):
        return attention.scaled_dot_product_attention(q, k, v, is_causal=True)[0]

    def tiling(q, k, v):
        return tiled.tiled_attention(q, k, v, is_causal=True)[0]

    def in_query_blocks(q, k, v):
        return tiled.flash_attention(q, k, v, is_causal=True)[0]

    assert 3.5 < memory(naive, 512) / memory(naive, 256) < 4.5
    assert 1.8 < memory(tiling, 512) / memory(tiling, 256) < 2.2
    assert memory(tiling, 512) < memory(naive, 512) / 5
    assert memory(in_query_blocks, 512) < 3 * memory(F.scaled_dot_product_attention, 512)


# ---------------------------------------------------------------- edges and dtypes

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16],
                         ids=str)
@pytest.mark.parametrize(("T", "S", "is_causal"), [(5, 0, False), (0, 7, False), (0, 7, True),
                                                   (0, 0, True)])
def test_no_keys_give_zeros_and_no_queries_nothing_as_in_pytorch(T, S, is_causal, dtype):
    q, k, v = (x.to(dtype) for x in qkv(2, 3, T, 4, S=7, Dv=6))
    k, v = k[..., :S, :], v[..., :S, :]  # (qkv reads S = 0 as S = T)
    mask = bottom_right(T, S) if is_causal else None
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    for tiling in (tiled.tiled_attention, tiled.flash_attention):
        out, lse = tiling(q, k, v, is_causal, block_size=3)
        assert out.shape == expected.shape == (2, 3, T, 6) and out.dtype == dtype
        assert torch.equal(out, expected)
        assert lse.shape == (2, 3, T) and lse.dtype == wide
        assert (lse == float("-inf")).all() if S == 0 else lse.isfinite().all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16_bit_tiles_keep_float32_statistics_and_round_once(dtype):
    """Running max, sum and accumulator in float32, as FlashAttention keeps them: the output is
    the float32 tiled attention of the same inputs, rounded to 16 bits once; the logsumexp
    stays float32, as merge_attention takes it."""
    q, k, v = (x.to(dtype) for x in qkv(2, 3, 9, 4, S=20))
    for tiling in (tiled.tiled_attention, tiled.flash_attention):
        out, lse = tiling(q, k, v, block_size=4)
        wide_out, wide_lse = tiling(q.float(), k.float(), v.float(), block_size=4)
        assert out.dtype == dtype and lse.dtype == torch.float32
        assert torch.equal(out, wide_out.to(dtype)) and torch.equal(lse, wide_lse)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=str)
def test_merging_two_tiled_parts_is_tiled_attention_over_their_union(dtype):
    """tiled_attention's (out, lse) are what merge_attention takes, 16-bit outputs included."""
    q, k, v = (x.to(dtype) for x in qkv(2, 3, 5, 4, S=12))
    out, lse = tiled.merge_attention(*tiled.tiled_attention(q, k[..., :5, :], v[..., :5, :]),
                                     *tiled.tiled_attention(q, k[..., 5:, :], v[..., 5:, :]))
    whole_out, whole_lse = tiled.tiled_attention(q, k, v, block_size=5)
    assert out.dtype == dtype and lse.dtype == whole_lse.dtype
    rounded_twice = {"rtol": 1e-2, "atol": 1e-3} if dtype == torch.bfloat16 else {}  # one ulp
    torch.testing.assert_close(out, whole_out, **rounded_twice)
    torch.testing.assert_close(lse, whole_lse)


def test_query_key_value_that_do_not_fit_are_named():
    q, k, v = qkv(2, 3, 5, 4, S=7)
    with pytest.raises(ValueError, match="same dtype"):
        tiled.tiled_attention(q.float(), k, v)
    with pytest.raises(ValueError, match="same length S"):
        tiled.flash_attention(q, k, v[..., :6, :])


# ---------------------------------------------------------------- merging partial attentions

def _part(query, key, value, allowed):
    """Attention over the keys ``allowed`` (bool (T, S)) and its logsumexp, by PyTorch."""
    scores = (query @ key.transpose(-2, -1) * query.shape[-1] ** -0.5).masked_fill(
        ~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=allowed), lse


@pytest.mark.parametrize("seed", range(4))
def test_merging_two_parts_is_attention_over_their_union(seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    allowed = torch.ones(6, 6, dtype=torch.bool).tril()  # row 0 has no key in one part
    part_a = torch.rand(6, generator=g) < 0.5
    out, lse = tiled.merge_attention(*_part(q, k, v, allowed & part_a),
                                     *_part(q, k, v, allowed & ~part_a))
    scores = (q @ k.transpose(-2, -1) * 0.5).masked_fill(~allowed, float("-inf"))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1))


def test_merging_keeps_empty_rows_zero_huge_scores_finite_and_16_bits_in_float32():
    lse_a = torch.tensor([float("-inf"), 900.0, -900.0])
    lse_b = torch.tensor([float("-inf"), 890.0, -905.0])
    out_a, out_b = torch.zeros(3, 2), torch.ones(3, 2)
    out_a[1:] = 2.0
    out, lse = tiled.merge_attention(out_a, lse_a, out_b, lse_b)
    assert out[0].eq(0).all() and lse[0] == float("-inf")
    share = torch.sigmoid(torch.tensor([10.0, 5.0]))  # part a's share: 1 / (1 + e^(lse_b - lse_a))
    torch.testing.assert_close(out[1:, 0], 2 * share + (1 - share), rtol=1e-4, atol=0)  # ulp(900)
    half, lse_half = tiled.merge_attention(out_a.bfloat16(), lse_a, out_b.bfloat16(), lse_b)
    assert half.dtype == torch.bfloat16 and lse_half.dtype == torch.float32
    torch.testing.assert_close(half, out.bfloat16())
