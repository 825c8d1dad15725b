"""Lesson 01: token embeddings and positional encodings."""

import math

import pytest
import torch
from torch import nn

from attention_course.embeddings import (
    TokenAndPositionEmbedding,
    offset_matrix,
    one_hot_embedding,
    sinusoidal_positional_encoding,
    token_and_position_embedding,
)
from helpers.oracles import assert_close

V, C = 11, 6


def loop_positional_encoding(T, d_model, base=10000.0):
    """PE[t, 2i] = sin(t / base^(2i/C)), PE[t, 2i+1] = cos(t / base^(2i/C)), one entry at a time."""
    pe = torch.zeros(T, d_model, dtype=torch.float64)
    for t in range(T):
        for j in range(d_model):
            angle = t / base ** (2 * (j // 2) / d_model)
            pe[t, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


@pytest.mark.parametrize("shape", [(2, 5), (7,), (2, 3, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_one_hot_embedding_is_a_row_lookup(gen, shape, dtype):
    weight = torch.randn(V, C, generator=gen, dtype=dtype)
    ids = torch.randint(V, shape, generator=gen)
    result = one_hot_embedding(ids, weight)
    assert result.dtype == dtype and result.shape == (*shape, C)
    assert_close(result, weight[ids])
    embedding = nn.Embedding.from_pretrained(weight)
    assert_close(result, embedding(ids))


@pytest.mark.parametrize(("T", "d_model"), [(9, 8), (7, 5), (50, 16)])
def test_sinusoidal_encoding_follows_the_formula(T, d_model):
    pe = sinusoidal_positional_encoding(T, d_model, dtype=torch.float64)
    assert pe.shape == (T, d_model) and pe.dtype == torch.float64
    assert_close(pe, loop_positional_encoding(T, d_model))


def test_sinusoidal_encoding_range_and_position_zero():
    pe = sinusoidal_positional_encoding(200, 12)
    assert pe.dtype == torch.float32
    assert (pe.abs() <= 1).all()
    assert torch.equal(pe[0], torch.tensor([0.0, 1.0] * 6))
    assert_close(pe, loop_positional_encoding(200, 12).float())


@pytest.mark.parametrize("k", [0, 1, 3, -2, 40])
@pytest.mark.parametrize("d_model", [2, 6, 16])
def test_offset_matrix_moves_every_position_by_k(k, d_model):
    pe = loop_positional_encoding(60, d_model)
    m = offset_matrix(k, d_model, dtype=torch.float64)
    start, stop = max(0, -k), 60 - max(0, k)  # positions t with t and t + k both in 0..59
    assert_close(pe[start:stop] @ m, pe[start + k:stop + k])
    assert m.shape == (d_model, d_model) and offset_matrix(k, d_model).dtype == torch.float32


def test_offset_matrix_is_a_rotation_composing_offsets():
    m3, m4 = offset_matrix(3, 8, dtype=torch.float64), offset_matrix(4, 8, dtype=torch.float64)
    assert_close(m3 @ m4, offset_matrix(7, 8, dtype=torch.float64))
    assert_close(m3 @ m3.T, torch.eye(8, dtype=torch.float64))
    assert_close(offset_matrix(-3, 8, dtype=torch.float64), m3.T)
    off_blocks = torch.ones(8, 8, dtype=torch.bool)
    for pair in range(4):
        off_blocks[2 * pair:2 * pair + 2, 2 * pair:2 * pair + 2] = False
    assert m3[off_blocks].eq(0).all()


def test_token_and_position_embedding_scales_tokens_and_adds_positions(gen):
    weight = torch.randn(V, C, generator=gen, dtype=torch.float64)
    pe = torch.randn(9, C, generator=gen, dtype=torch.float64)
    ids = torch.randint(V, (2, 5), generator=gen)
    expected = torch.stack([torch.stack([weight[ids[b, t]] * math.sqrt(C) + pe[t]
                                         for t in range(5)]) for b in range(2)])
    assert_close(token_and_position_embedding(ids, weight, pe), expected)


@pytest.mark.parametrize("learned", [False, True])
def test_token_and_position_module(gen, learned):
    module = TokenAndPositionEmbedding(V, C, max_len=9, learned_positions=learned)
    ids = torch.randint(V, (2, 5), generator=gen)
    positions = module.position[:5]
    expected = module.token(ids) * math.sqrt(C) + positions
    assert_close(module(ids), expected)
    is_parameter = any(p is module.position for p in module.parameters())
    assert is_parameter == learned
    if not learned:
        assert_close(positions, sinusoidal_positional_encoding(5, C))


@pytest.mark.parametrize("learned", [False, True])
def test_offset_gives_the_positions_after_a_cache(gen, learned):
    """Embedding a whole sequence equals embedding its head, then its tail at offset = len(head)."""
    module = TokenAndPositionEmbedding(V, C, max_len=9, learned_positions=learned)
    ids = torch.randint(V, (2, 7), generator=gen)
    pieces = torch.cat([module(ids[:, :3]), module(ids[:, 3:], offset=3)], dim=1)
    assert_close(pieces, module(ids))
    assert_close(module(ids[:, 2:], offset=2)[:, 0], module.token(ids[:, 2]) * math.sqrt(C)
                 + module.position[2])
    with pytest.raises(ValueError, match="longer than max_len=9"):
        module(ids[:, :3], offset=7)


def test_too_long_input_raises(gen):
    module = TokenAndPositionEmbedding(V, C, max_len=4)
    with pytest.raises(ValueError, match="longer than max_len=4"):
        module(torch.randint(V, (2, 5), generator=gen))
    with pytest.raises(ValueError, match="pe must have shape"):
        token_and_position_embedding(torch.zeros(2, 5, dtype=torch.long), module.token.weight,
                                     module.position)
