"""FlashAttention's backward pass (lesson 08): the hand-written gradients equal autograd's
through attention in one piece, in float64 to rounding and in float32 within tolerance, causal
and not, for blocks that do not divide T or S and T != S; the Function keeps Q, K, V, O and the
logsumexps only, and its memory in training grows like T."""

import pytest
import torch
import torch.nn.functional as F

from attention_course import flash
from attention_course.attention import scaled_dot_product_attention
from attention_course.tiled import peak_memory

SIZES = [(20, 30, 4), (8, 8, 3), (4, 11, 3), (7, 7, 16), (13, 29, 5), (1, 1, 2)]


def inputs(T, S, dtype, seed, D=4, Dv=5, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    return (spread * torch.randn(2, 3, T, D, generator=g, dtype=dtype),
            spread * torch.randn(2, 3, S, D, generator=g, dtype=dtype),
            torch.randn(2, 3, S, Dv, generator=g, dtype=dtype),
            torch.randn(2, 3, T, Dv, generator=g, dtype=dtype))


def by_autograd(q, k, v, dout, is_causal=False, scale=None):
    """Autograd through lesson 03's attention (float64), the bottom-right causal mask."""
    q, k, v = (x.double().requires_grad_() for x in (q, k, v))
    T, S = q.shape[-2], k.shape[-2]
    mask = torch.ones(T, S, dtype=torch.bool).tril(S - T) if is_causal else None
    out, _ = scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out, torch.autograd.grad(out, (q, k, v), dout.double())


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_attention_backward_equals_autograd(seed, scale):
    q, k, v, dout = inputs(5, 7, torch.float64, seed)
    _, expected = by_autograd(q, k, v, dout, scale=scale)
    for got, want in zip(flash.attention_backward(q, k, v, dout, scale), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize(("T", "S", "block"), SIZES)
def test_function_gradients_equal_autograd_in_float64(T, S, block, is_causal, seed):
    q, k, v, dout = inputs(T, S, torch.float64, seed)
    expected_out, expected = by_autograd(q, k, v, dout, is_causal)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out, lse = flash.flash_attention(q, k, v, is_causal, None, block)
    assert not lse.requires_grad and lse.shape == (2, 3, T)
    torch.testing.assert_close(out, expected_out, rtol=1e-12, atol=1e-12)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), dout), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("is_causal", [False, True])
def test_function_gradients_in_float32_and_with_large_scores(is_causal):
    q, k, v, dout = inputs(37, 53, torch.float32, 3, D=16, spread=6.0)  # scores near 100
    _, expected = by_autograd(q, k, v, dout, is_causal)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out, lse = flash.flash_attention(q, k, v, is_causal, None, 8)
    assert lse.isfinite().all() and lse.amax() > 88  # exp(lse) would overflow in float32
    for got, want in zip(torch.autograd.grad(out, (q, k, v), dout), expected, strict=True):
        torch.testing.assert_close(got, want.float(), rtol=1e-4, atol=1e-4)


def test_forward_equals_pytorch_and_the_logsumexp_is_exact():
    q, k, v, _ = inputs(9, 9, torch.float64, 4)
    out, lse = flash.flash_forward(q, k, v, is_causal=True, block_size=4)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    scores = (q @ k.transpose(-2, -1) * 0.5).masked_fill(torch.ones(9, 9).triu(1).bool(),
                                                         float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(scores, -1))


def test_bfloat16_inputs_give_float32_logsumexps_and_their_own_gradients():
    q, k, v, dout = inputs(6, 10, torch.bfloat16, 5)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out, lse = flash.flash_attention(q, k, v, True, None, 4)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    grads = torch.autograd.grad(out, (q, k, v), dout)
    assert [g.dtype for g in grads] == [torch.bfloat16] * 3


def test_saved_weights_function_is_right_too():
    q, k, v, dout = inputs(13, 29, torch.float64, 6)
    _, expected = by_autograd(q, k, v, dout, True)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out, _ = flash.SavedWeightsAttention.apply(q, k, v, True, None, 5)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), dout), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-11, atol=1e-12)


def test_the_function_saves_q_k_v_o_and_the_logsumexps_only():
    q, k, v, _ = inputs(20, 20, torch.float32, 7)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t,
                                                  lambda t: t):
        flash.flash_attention(*(x.requires_grad_() for x in (q, k, v)), True, None, 4)
    assert saved == [q.shape, k.shape, v.shape, (2, 3, 20, 5), (2, 3, 20)]


def training_memory(attend, T):
    q, k, v = (torch.randn(1, 2, T, 16, requires_grad=True) for _ in range(3))

    def step(q, k, v):
        out = attend(q, k, v)
        out.backward(torch.ones_like(out))
    return peak_memory(step, q, k, v)[1]


def test_training_memory_grows_like_t_not_t_squared():
    flash_memory = [training_memory(lambda q, k, v: flash.flash_attention(q, k, v, True)[0], T)
                    for T in (512, 1024)]
    saved = [training_memory(lambda q, k, v: flash.SavedWeightsAttention.apply(
        q, k, v, True, None, 64)[0], T) for T in (512, 1024)]
    assert flash_memory[1] / flash_memory[0] < 2.5
    assert saved[1] / saved[0] > 3.0 and saved[1] > 3 * flash_memory[1]
