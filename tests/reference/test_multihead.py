"""Lesson 04: splitting and merging heads, and MultiHeadAttention against nn.MultiheadAttention."""

import pytest
import torch
from torch import nn

from attention_course.masks import causal_mask, padding_mask, to_mha_mask
from attention_course.multihead import MultiHeadAttention, merge_heads, split_heads
from helpers.oracles import assert_close

B, H, T, S, D = 2, 3, 5, 7, 4
C = H * D


@pytest.mark.parametrize("batch", [(B,), (3, B)])
def test_split_heads_is_view_then_permute_and_merge_inverts_it(gen, batch):
    x = torch.randn(*batch, T, C, generator=gen)
    heads = split_heads(x, H)
    explicit = x.view(*batch, T, H, D).transpose(-3, -2)  # (..., T, H, D) -> (..., H, T, D)
    assert heads.shape == (*batch, H, T, D)
    assert torch.equal(heads, explicit)
    assert torch.equal(merge_heads(heads), x)
    assert torch.equal(split_heads(merge_heads(explicit), H), explicit)


def test_view_without_transpose_is_not_a_head_split(gen):
    x = torch.randn(B, T, C, generator=gen)
    assert not torch.equal(split_heads(x, H), x.view(B, H, T, D))


# ---------------------------------------------------------------- parity with nn.MultiheadAttention


def randomize(module: nn.Module) -> nn.Module:
    """Random weights everywhere, biases included (nn.MultiheadAttention starts them at 0)."""
    with torch.no_grad():
        for param in module.parameters():
            param.normal_(std=0.4)
    return module


def ours_and_torch(direction: str, bias: bool):
    """The same function as our module and as nn.MultiheadAttention, both in eval mode."""
    torch.manual_seed(0)
    if direction == "from_torch":
        theirs = randomize(nn.MultiheadAttention(C, H, bias=bias, batch_first=True,
                                                 dtype=torch.float64))
        ours = MultiHeadAttention.from_torch(theirs)
    else:
        ours = randomize(MultiHeadAttention(C, H, bias=bias, dtype=torch.float64))
        theirs = ours.to_torch()
    return ours.eval(), theirs.eval()


def masks_for_both(kind: str, gen, S: int):
    """(our attn_mask, nn.MultiheadAttention keyword arguments) meaning the same thing."""
    if kind == "none":
        return None, {}
    if kind == "causal":
        mask = causal_mask(T, S)
        return mask, {"attn_mask": to_mha_mask(mask)}
    if kind == "padding":
        mask = padding_mask([S, 3], S)  # (B, 1, 1, S)
        return mask, {"key_padding_mask": to_mha_mask(mask)[:, 0, 0, :]}  # (B, S)
    mask = torch.randn(T, S, generator=gen, dtype=torch.float64)
    return mask, {"attn_mask": mask}


def run_both(ours, theirs, query, key_value, mask, torch_kwargs):
    out, weights = ours(query, key_value, key_value, attn_mask=mask)
    expected_out, expected_weights = theirs(query, key_value, key_value, need_weights=True,
                                            average_attn_weights=False, **torch_kwargs)
    return out, weights, expected_out, expected_weights


@pytest.mark.parametrize("direction", ["from_torch", "to_torch"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("attention", ["self", "cross"])
@pytest.mark.parametrize("mask_kind", ["none", "causal", "padding", "float"])
def test_matches_nn_multihead_attention(gen, direction, bias, attention, mask_kind):
    ours, theirs = ours_and_torch(direction, bias)
    query = torch.randn(B, T, C, generator=gen, dtype=torch.float64)
    key_value = query if attention == "self" else torch.randn(B, S, C, generator=gen,
                                                              dtype=torch.float64)
    mask, torch_kwargs = masks_for_both(mask_kind, gen, key_value.shape[1])
    out, weights, expected_out, expected_weights = run_both(ours, theirs, query, key_value,
                                                            mask, torch_kwargs)
    assert weights.shape == (B, H, T, key_value.shape[1])
    assert_close(out, expected_out)
    assert_close(weights, expected_weights)


def test_fully_masked_row_gives_zeros_where_nn_multihead_attention_gives_nan(gen):
    ours, theirs = ours_and_torch("to_torch", bias=True)
    query, key_value = (torch.randn(B, n, C, generator=gen, dtype=torch.float64) for n in (T, S))
    mask = causal_mask(T, S)
    mask[2] = False
    out, weights, expected_out, expected_weights = run_both(
        ours, theirs, query, key_value, mask, {"attn_mask": to_mha_mask(mask)})
    # ours: zero weights, so the attended value is 0 and the output is the output bias
    assert (weights[:, :, 2] == 0).all()
    assert_close(out[:, 2], ours.out_proj.bias.detach().expand(B, C))
    # nn.MultiheadAttention: NaN in that row, the same numbers everywhere else
    assert expected_out[:, 2].isnan().all() and expected_weights[:, :, 2].isnan().all()
    others = [t for t in range(T) if t != 2]
    assert_close(out[:, others], expected_out[:, others])
    assert_close(weights[:, :, others], expected_weights[:, :, others])


def test_gradients_reach_every_parameter(gen):
    mha = MultiHeadAttention(C, H, dtype=torch.float64)
    query, key_value = (torch.randn(B, n, C, generator=gen, dtype=torch.float64) for n in (T, S))
    out, _ = mha(query, key_value, key_value, attn_mask=padding_mask([S, 3], S))
    (out * torch.randn(out.shape, generator=gen, dtype=torch.float64)).sum().backward()
    grads = {name: p.grad for name, p in mha.named_parameters()}
    assert len(grads) == 8 and all(g is not None and g.isfinite().all() for g in grads.values())
    # Adding the same k_proj.bias to every key shifts a query's scores by one constant, which
    # the softmax ignores: its gradient is zero. Every other parameter gets a real gradient.
    assert_close(grads.pop("k_proj.bias"), torch.zeros(C, dtype=torch.float64))
    assert all(g.abs().sum() > 1e-6 for g in grads.values())


def test_from_torch_refuses_modules_it_cannot_copy():
    with pytest.raises(ValueError, match="kdim = vdim = embed_dim"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(C, H, kdim=5, batch_first=True))


# ---------------------------------------------------------------- no keys, 16-bit floats

def test_no_keys_give_the_output_bias_as_nn_multihead_attention_does(gen):
    ours, theirs = ours_and_torch("to_torch", bias=True)
    query = torch.randn(B, T, C, generator=gen, dtype=torch.float64)
    nothing = torch.zeros(B, 0, C, dtype=torch.float64)
    out, weights, expected_out, expected_weights = run_both(ours, theirs, query, nothing,
                                                            None, {})
    assert weights.shape == expected_weights.shape == (B, H, T, 0)
    assert_close(out, expected_out)
    assert_close(out, ours.out_proj.bias.detach().expand(B, T, C))  # attention gave 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16_bit_module_returns_16_bit_output_and_weights(gen, dtype):
    mha = MultiHeadAttention(C, H, dtype=dtype)
    x = torch.randn(B, T, C, generator=gen).to(dtype)
    out, weights = mha(x, x, x, is_causal=True)
    assert out.dtype == weights.dtype == dtype
