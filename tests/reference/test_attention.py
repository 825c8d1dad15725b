"""Lesson 02: softmax, scores and scaled dot-product attention vs PyTorch and a loop oracle."""

import math

import pytest
import torch
import torch.nn.functional as F

from attention_course.attention import (
    attention_scores,
    packed_attention,
    scaled_dot_product_attention,
    softmax,
)
from attention_course.masks import to_additive_mask
from attention_course.multihead import MultiHeadAttention
from helpers.oracles import assert_close, loop_attention

B, H, T, S, D, Dv = 2, 3, 5, 7, 4, 6


def random_qkv(gen, batch=(B, H), T=T, S=S, D=D, Dv=Dv, dtype=torch.float32):
    """Seeded query (*batch, T, D), key (*batch, S, D) and value (*batch, S, Dv)."""
    return (torch.randn(*batch, T, D, generator=gen, dtype=dtype),
            torch.randn(*batch, S, D, generator=gen, dtype=dtype),
            torch.randn(*batch, S, Dv, generator=gen, dtype=dtype))


def tril(T, S):
    """Causal mask built independently: query t sees keys s <= t."""
    return torch.tensor([[s <= t for s in range(S)] for t in range(T)])


def random_bool_mask(gen, shape, fully_masked_row=None):
    """Bool mask (True = may attend) with every row allowed at least one key, except one row."""
    mask = torch.rand(shape, generator=gen) > 0.4
    mask[..., 0] = True
    if fully_masked_row is not None:
        mask[..., fully_masked_row, :] = False
    return mask


# ---------------------------------------------------------------- softmax and scores


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_softmax_matches_torch(gen, dtype, dim):
    x = 5 * torch.randn(3, 4, 5, generator=gen, dtype=dtype)
    assert_close(softmax(x, dim=dim), torch.softmax(x, dim=dim))


def test_softmax_of_large_logits_stays_finite():
    x = torch.tensor([[1e4, 0.0, -1e4], [1e4, 1e4, 1e4], [-1e4, -1e4, 1e4]])
    expected = torch.tensor([[1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3], [0.0, 0.0, 1.0]])
    result = softmax(x)
    assert result.isfinite().all()
    assert_close(result, expected)


@pytest.mark.parametrize("scale", [None, 0.3])
def test_attention_scores_are_scaled_dot_products(gen, scale):
    q, k, _ = random_qkv(gen, dtype=torch.float64)
    factor = 1 / math.sqrt(D) if scale is None else scale
    expected = torch.einsum("bhtd,bhsd->bhts", q, k) * factor
    assert_close(attention_scores(q, k, scale=scale), expected)


# ---------------------------------------------------------------- parity with PyTorch

PARITY_CASES = {
    "no mask": {},
    "bool mask": {"mask": "bool"},
    "float mask": {"mask": "float"},
    "causal T == S": {"is_causal": True, "S": T},
    "causal T != S": {"is_causal": True},
    "causal and bool mask": {"is_causal": True, "mask": "bool"},
    "extra batch dims": {"batch": (2, 3, 4)},
    "float64": {"dtype": torch.float64},
    "Dv != D": {"Dv": 9},
    "custom scale": {"scale": 0.3},
    "fully masked row": {"mask": "fully masked"},
}


def parity_inputs(gen, batch=(B, H), S=S, Dv=Dv, dtype=torch.float32, mask=None, **_):
    q, k, v = random_qkv(gen, batch=batch, S=S, Dv=Dv, dtype=dtype)
    masks = {
        None: lambda: None,
        "bool": lambda: random_bool_mask(gen, (B, 1, T, S)),
        "float": lambda: torch.randn(T, S, generator=gen, dtype=dtype),
        "fully masked": lambda: random_bool_mask(gen, (B, 1, T, S), fully_masked_row=2),
    }
    return q, k, v, masks[mask]()


@pytest.mark.parametrize("case", PARITY_CASES.values(), ids=PARITY_CASES.keys())
def test_matches_torch_scaled_dot_product_attention(gen, case):
    q, k, v, mask = parity_inputs(gen, **case)
    is_causal, scale = case.get("is_causal", False), case.get("scale")
    out, weights = scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal, scale=scale)
    # torch 2.13 refuses some masks together with is_causal (this (B, 1, T, S) one; a (T, S)
    # mask it ANDs): give it the AND of both instead.
    if is_causal and mask is not None:
        mask, is_causal = mask & tril(q.shape[-2], k.shape[-2]), False
    expected = F.scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal, scale=scale)
    assert out.shape == expected.shape and out.dtype == expected.dtype
    assert_close(out, expected)
    assert weights.shape == (*q.shape[:-1], k.shape[-2])


def test_fully_masked_row_gives_zero_output_and_weights(gen):
    q, k, v, mask = parity_inputs(gen, mask="fully masked")
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert (out[..., 2, :] == 0).all() and (weights[..., 2, :] == 0).all()
    assert out.isfinite().all() and weights.isfinite().all()


LOOP_CASES = {
    "no mask": {},
    "bool mask with a fully masked row": {"mask": True},
    "causal": {"is_causal": True},
    "custom scale": {"scale": 0.7},
}


@pytest.mark.parametrize("case", LOOP_CASES.values(), ids=LOOP_CASES.keys())
def test_matches_loop_oracle(gen, case):
    q, k, v = random_qkv(gen, batch=(B,), dtype=torch.float64)
    mask = random_bool_mask(gen, (B, T, S), fully_masked_row=3) if case.get("mask") else None
    is_causal, scale = case.get("is_causal", False), case.get("scale")
    oracle_mask = tril(T, S).expand(B, T, S) if is_causal else mask
    expected_out, expected_weights = loop_attention(q, k, v, oracle_mask, scale=scale)
    out, weights = scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal, scale=scale)
    assert_close(out, expected_out)
    assert_close(weights, expected_weights)


# ---------------------------------------------------------------- properties


def test_weight_rows_sum_to_one_or_zero_when_fully_masked(gen):
    q, k, v, mask = parity_inputs(gen, mask="fully masked", dtype=torch.float64)
    _, weights = scaled_dot_product_attention(q, k, v, mask)
    expected = mask.any(dim=-1).to(weights.dtype).expand(B, H, T)
    assert_close(weights.sum(dim=-1), expected)
    assert (weights >= 0).all()


@pytest.mark.parametrize("t", range(T - 1))
def test_causal_output_ignores_the_future(gen, t):
    x = torch.randn(B, H, T, D, generator=gen, dtype=torch.float64)
    changed = x.clone()
    changed[..., t + 1:, :] = torch.randn(B, H, T - t - 1, D, generator=gen, dtype=torch.float64)
    out, _ = scaled_dot_product_attention(x, x, x, is_causal=True)
    out_changed, _ = scaled_dot_product_attention(changed, changed, changed, is_causal=True)
    assert_close(out_changed[..., : t + 1, :], out[..., : t + 1, :])
    assert not torch.allclose(out_changed[..., t + 1:, :], out[..., t + 1:, :])


def sdpa_self_attention(x):
    return scaled_dot_product_attention(x, x, x)


def mha_self_attention(x):
    torch.manual_seed(0)
    mha = MultiHeadAttention(x.shape[-1], 3, dtype=x.dtype)
    return mha(x, x, x)


@pytest.mark.parametrize("attend", [sdpa_self_attention, mha_self_attention])
def test_self_attention_without_positions_is_permutation_equivariant(gen, attend):
    x = torch.randn(B, T, 12, generator=gen, dtype=torch.float64)
    perm = torch.randperm(T, generator=gen)
    out, weights = attend(x)
    out_perm, weights_perm = attend(x[:, perm])
    assert_close(out_perm, out[:, perm])
    assert_close(weights_perm, weights[..., perm, :][..., perm])


GRAD_MASKS = {
    "bool mask with a fully masked row": lambda gen: random_bool_mask(gen, (T, S), 1),
    "float mask": lambda gen: torch.randn(T, S, generator=gen, dtype=torch.float64),
    "additive mask with a -inf row": lambda gen: to_additive_mask(
        random_bool_mask(gen, (T, S), 1), torch.float64),
}


@pytest.mark.parametrize("make_mask", GRAD_MASKS.values(), ids=GRAD_MASKS.keys())
def test_gradients_are_correct_and_finite(gen, make_mask):
    q, k, v = (x.requires_grad_() for x in random_qkv(gen, batch=(B,), dtype=torch.float64))
    mask = make_mask(gen)
    assert torch.autograd.gradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, mask), (q, k, v))
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    (out.sum() + weights.square().sum()).backward()
    assert all(x.grad.isfinite().all() for x in (q, k, v))


def test_dropout_zeroes_weights_and_rescales_the_survivors(gen):
    q, k, v = random_qkv(gen, dtype=torch.float64)
    p = 0.4
    _, weights = scaled_dot_product_attention(q, k, v)
    torch.manual_seed(0)
    out, dropped = scaled_dot_product_attention(q, k, v, dropout_p=p)
    kept = dropped != 0
    assert kept.any() and not kept.all()
    assert_close(dropped[kept], weights[kept] / (1 - p))
    assert_close(out, dropped @ v)


# ---------------------------------------------------------------- no keys (S = 0)

ALL_DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_softmax_of_an_empty_axis_is_empty_as_in_torch(dtype):
    x = torch.randn(3, 0).to(dtype)
    result = softmax(x)
    assert result.shape == (3, 0) and result.dtype == dtype
    assert torch.softmax(x, dim=-1).shape == (3, 0)


NO_KEYS = {
    "no mask": {},
    "a (T, 0) bool mask": {"attn_mask": torch.ones(T, 0, dtype=torch.bool)},
    "a (T, 0) float mask": {"attn_mask": torch.zeros(T, 0)},
    "is_causal": {"is_causal": True},
    "dropout": {"dropout_p": 0.5},
}


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("options", NO_KEYS.values(), ids=NO_KEYS.keys())
def test_no_keys_give_zeros_and_empty_weights_as_in_pytorch(gen, options, dtype):
    q, k, v = (x.to(dtype) for x in random_qkv(gen, S=0))
    options = {name: x.to(dtype) if name == "attn_mask" and x.is_floating_point() else x
               for name, x in options.items()}
    out, weights = scaled_dot_product_attention(q, k, v, **options)
    expected = F.scaled_dot_product_attention(q, k, v, **options)
    assert out.dtype == weights.dtype == dtype
    assert torch.equal(out, expected) and (out == 0).all()
    assert weights.shape == (B, H, T, 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16_bit_attention_is_float32_attention_rounded_once(gen, dtype):
    q, k, v, mask = parity_inputs(gen, mask="fully masked")
    q, k, v = (x.to(dtype) for x in (q, k, v))
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    wide_out, wide_weights = scaled_dot_product_attention(q.float(), k.float(), v.float(), mask)
    assert out.dtype == weights.dtype == dtype
    assert torch.equal(out, wide_out.to(dtype)) and torch.equal(weights, wide_weights.to(dtype))
    assert torch.equal(attention_scores(q, k), attention_scores(q.float(), k.float()).to(dtype))
    x = 4 * torch.randn(3, 5, 7, generator=gen)
    assert torch.equal(softmax(x.to(dtype)), softmax(x.to(dtype).float()).to(dtype))


# ---------------------------------------------------------------- packed sequences

@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("lengths", [[5, 2, 4], [3, 0, 6], [7], [4, 4]])
def test_packed_attention_attends_each_sequence_alone(gen, lengths, is_causal):
    N = sum(lengths)
    q, k, v = (torch.randn(N, d, generator=gen, dtype=torch.float64) for d in (4, 4, 3))
    out = packed_attention(q, k, v, torch.tensor(lengths), is_causal=is_causal)
    alone = [F.scaled_dot_product_attention(*parts, is_causal=is_causal) for parts in zip(
        *(x.split(lengths) for x in (q, k, v)), strict=True) if len(parts[0])]
    assert_close(out, torch.cat(alone) if alone else torch.zeros(0, 3, dtype=torch.float64))


def test_packed_attention_gradients_stay_within_each_sequence(gen):
    q, k, v = (torch.randn(6, 4, generator=gen, requires_grad=True) for _ in range(3))
    out = packed_attention(q, k, v, torch.tensor([2, 4]))
    out[:2].sum().backward()  # the first sequence's rows only
    assert k.grad[2:].eq(0).all() and v.grad[2:].eq(0).all() and k.grad[:2].abs().sum() > 0
    with pytest.raises(ValueError, match="add up to"):
        packed_attention(q, k, v, torch.tensor([2, 3]))
