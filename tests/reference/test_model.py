"""Lesson 05's model (attention_course.model): the decoder takes the block class it is given, is
causal, and embeds tokens and positions as lesson 01 does."""

import math

import pytest
import torch

from attention_course.model import DecoderBlock, DecoderOnlyTransformer, RMSNorm, SwiGLU
from helpers.copy_task import lesson_model
from helpers.oracles import assert_close


def test_the_model_takes_its_block_class_and_has_no_default():
    with pytest.raises(TypeError, match="block"):
        DecoderOnlyTransformer(11, 20)
    built = []

    class Counting(DecoderBlock):
        def __init__(self, *args):
            built.append(args)
            super().__init__(*args)

    model = DecoderOnlyTransformer(11, 20, block=Counting, d_model=16, n_heads=4, n_layers=2)
    assert built == [(16, 4, 64, 0.0)] * 2
    logits, attention = model(torch.zeros(3, 7, dtype=torch.long), return_attention=True)
    assert logits.shape == (3, 7, 11) and [a.shape for a in attention] == [(3, 4, 7, 7)] * 2


def test_the_model_is_causal(gen):
    model = lesson_model().eval()
    tokens = torch.randint(11, (2, 12), generator=gen)
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 11
    with torch.no_grad():
        moved = (model(changed) - model(tokens)).abs().amax(dim=-1)  # (2, 12)
    assert (moved[:, :-1] == 0).all() and (moved[:, -1] > 0).all()


def test_token_and_position_rows_start_at_the_same_scale():
    """Lesson 01's balance: sqrt(C) times a token row is about as long as a position row."""
    torch.manual_seed(0)
    embed = DecoderOnlyTransformer(1000, 200, block=DecoderBlock, d_model=64).embed
    tokens = math.sqrt(64) * embed.token.weight.norm(dim=-1).mean()
    positions = embed.position.norm(dim=-1).mean()
    assert 0.8 < tokens / positions < 1.25 and 0.8 < positions / math.sqrt(64) < 1.25


@pytest.mark.parametrize(("positions", "learned", "zero"), [
    ("learned", True, False), ("sinusoidal", False, False), ("none", False, True)])
def test_the_three_kinds_of_positions(positions, learned, zero):
    embed = lesson_model(positions=positions).embed
    assert any(p is embed.position for p in embed.parameters()) == learned
    assert bool((embed.position == 0).all()) == zero
    with pytest.raises(ValueError, match="positions must be one of"):
        lesson_model(positions="rotary")


def test_without_the_scale_tokens_are_added_as_they_are(gen):
    embed = lesson_model(scale_tokens=False).embed
    ids = torch.randint(11, (2, 5), generator=gen)
    assert_close(embed(ids), embed.token(ids) + embed.position[:5])


def test_every_layer_is_a_block_of_its_own_and_the_final_norm_is_the_class_given():
    model = DecoderOnlyTransformer(11, 20, block=DecoderBlock, n_layers=3, norm=RMSNorm)
    assert len({id(block) for block in model.blocks}) == 3
    assert isinstance(model.norm, RMSNorm)
    assert lesson_model().norm.__class__ is torch.nn.LayerNorm


def test_the_block_builds_its_parts_from_the_classes_given(gen):
    """Two norms of their own, lesson 04's attention, the MLP class given; causal."""
    block = DecoderBlock(16, 4, 24, 0.1, norm=RMSNorm, mlp=SwiGLU).eval()
    assert isinstance(block.attn_norm, RMSNorm) and isinstance(block.mlp_norm, RMSNorm)
    assert block.attn_norm is not block.mlp_norm
    assert isinstance(block.mlp, SwiGLU) and block.mlp.up.out_features == 24
    assert block.attn.n_heads == 4 and block.dropout == 0.1
    x = torch.randn(2, 6, 16, generator=gen)
    changed = x.clone()
    changed[:, -1] += 1
    with torch.no_grad():
        out, weights = block(x)
        moved = (block(changed)[0] - out).abs().amax(dim=-1)  # (2, 6)
    assert weights.shape == (2, 4, 6, 6) and (weights.triu(1) == 0).all()
    assert (moved[:, :-1] == 0).all() and (moved[:, -1] > 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rms_norm_is_torchs(dtype, gen):
    ours = RMSNorm(12, eps=1e-3).to(dtype)
    theirs = torch.nn.RMSNorm(12, eps=1e-3, dtype=dtype)
    with torch.no_grad():
        ours.weight.normal_(generator=gen)
        theirs.weight.copy_(ours.weight)
    x = torch.randn(2, 5, 12, generator=gen, dtype=dtype)
    assert_close(ours(x), theirs(x))
    assert_close(ours(x), x / (x.pow(2).mean(-1, keepdim=True) + 1e-3).sqrt() * ours.weight)


def test_rms_norm_of_16_bit_inputs_is_computed_in_float32(gen):
    x = (300 * torch.randn(3, 12, generator=gen)).half()  # squares above float16's 65504
    out = RMSNorm(12)(x)
    assert out.dtype == torch.float16 and out.isfinite().all()
    assert_close(out.float(), RMSNorm(12)(x.float()), rtol=1e-3, atol=1e-3)


def test_swiglu_is_its_definition(gen):
    layer = SwiGLU(8, 20).eval()
    x = torch.randn(2, 3, 8, generator=gen)
    gate, up, down = layer.gate.weight, layer.up.weight, layer.down.weight
    expected = (torch.nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down.T
    assert_close(layer(x), expected)
    assert all(module.bias is None for module in (layer.gate, layer.up, layer.down))
