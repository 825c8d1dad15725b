"""Lesson 03: causal and padding masks, applying them, and converting between conventions."""

import pytest
import torch
import torch.nn.functional as F

from attention_course.attention import scaled_dot_product_attention
from attention_course.masks import (
    apply_mask,
    causal_mask,
    combine_masks,
    from_hf_mask,
    padding_mask,
    to_additive_mask,
    to_mha_mask,
)
from helpers.oracles import assert_close

NEG_INF = float("-inf")


def loop_causal(T, S):
    return torch.tensor([[s <= t for s in range(S)] for t in range(T)])


def loop_padding(lengths, S):
    return torch.tensor([[[[s < n for s in range(S)]]] for n in lengths])


@pytest.mark.parametrize(("T", "S"), [(5, None), (5, 7), (7, 5), (1, 4)])
def test_causal_mask_lets_query_t_see_keys_up_to_t(T, S):
    mask = causal_mask(T, S)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, loop_causal(T, T if S is None else S))


@pytest.mark.parametrize(("T", "S"), [(5, 7), (7, 5)])
def test_causal_mask_matches_is_causal_when_lengths_differ(gen, T, S):
    q, k, v = (torch.randn(2, 3, n, 4, generator=gen) for n in (T, S, S))
    out, _ = scaled_dot_product_attention(q, k, v, causal_mask(T, S))
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("lengths", [[3, 0, 7], torch.tensor([7, 1])])
def test_padding_mask_hides_keys_beyond_each_length(lengths):
    mask = padding_mask(lengths, 7)
    assert mask.dtype == torch.bool and mask.shape == (len(lengths), 1, 1, 7)
    assert torch.equal(mask, loop_padding(list(lengths), 7))


def test_apply_bool_mask_sets_hidden_scores_to_minus_inf(gen):
    scores = torch.randn(2, 3, 5, 7, generator=gen)
    mask = torch.rand(5, 7, generator=gen) > 0.5
    before = scores.clone()
    masked = apply_mask(scores, mask)
    assert torch.equal(masked, torch.where(mask, scores, NEG_INF))
    assert torch.equal(scores, before)  # not modified in place


def test_apply_float_mask_adds_it(gen):
    scores = torch.randn(2, 3, 5, 7, generator=gen)
    mask = torch.randn(2, 1, 1, 7, generator=gen)
    assert_close(apply_mask(scores, mask), scores + mask)
    assert apply_mask(scores, None) is scores


@pytest.mark.parametrize(("scores_dtype", "mask_dtype"),
                         [(torch.float32, torch.float64), (torch.float64, torch.float32)],
                         ids=["float32 scores", "float64 scores"])
def test_float_mask_keeps_the_dtype_of_the_scores(gen, scores_dtype, mask_dtype):
    q, k, v = (torch.randn(2, 5, 4, generator=gen, dtype=scores_dtype) for _ in range(3))
    mask = torch.randn(5, 5, generator=gen, dtype=mask_dtype)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.dtype == weights.dtype == scores_dtype


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_to_additive_mask_gives_zero_or_minus_inf_and_the_same_attention(gen, dtype):
    mask = torch.rand(2, 1, 5, 7, generator=gen) > 0.5
    mask[..., 0] = True
    additive = to_additive_mask(mask, dtype)
    assert additive.dtype == dtype
    assert torch.equal(additive, torch.where(mask, 0.0, NEG_INF).to(dtype))
    q, k, v = (torch.randn(2, 3, n, 4, generator=gen, dtype=dtype) for n in (5, 7, 7))
    for ours, bool_version in zip(scaled_dot_product_attention(q, k, v, additive),
                                  scaled_dot_product_attention(q, k, v, mask), strict=True):
        assert_close(ours, bool_version)


def test_to_additive_mask_casts_a_float_mask(gen):
    mask = torch.randn(5, 7, generator=gen)
    assert torch.equal(to_additive_mask(mask, torch.float64), mask.double())


def test_to_mha_mask_flips_bool_and_keeps_float(gen):
    mask = torch.rand(5, 7, generator=gen) > 0.5
    assert torch.equal(to_mha_mask(mask), torch.logical_not(mask))
    float_mask = torch.randn(5, 7, generator=gen)
    assert torch.equal(to_mha_mask(float_mask), float_mask)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32], ids=str)
def test_from_hf_mask_turns_ones_into_may_attend(dtype):
    hf = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=dtype)
    assert torch.equal(from_hf_mask(hf), loop_padding([3, 1], 4))


def test_combine_two_bool_masks_is_and(gen):
    first, second = (torch.rand(5, 7, generator=gen) > 0.5 for _ in range(2))
    expected = torch.tensor([[a and b for a, b in zip(r1, r2, strict=True)]
                             for r1, r2 in zip(first.tolist(), second.tolist(), strict=True)])
    assert torch.equal(combine_masks(first, second), expected)


@pytest.mark.parametrize("bool_first", [True, False])
def test_combine_bool_and_float_masks_hides_and_adds(gen, bool_first):
    bool_mask = torch.rand(5, 7, generator=gen) > 0.5
    float_mask = torch.randn(5, 7, generator=gen, dtype=torch.float64)
    pair = (bool_mask, float_mask) if bool_first else (float_mask, bool_mask)
    combined = combine_masks(*pair)
    assert combined.dtype == torch.float64
    assert torch.equal(combined, float_mask.masked_fill(~bool_mask, NEG_INF))


def test_combine_with_none_returns_the_other_mask(gen):
    mask = torch.rand(5, 7, generator=gen) > 0.5
    assert combine_masks(None, mask) is mask
    assert combine_masks(mask, None) is mask
    assert combine_masks(None, None) is None
