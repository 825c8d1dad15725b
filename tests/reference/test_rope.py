"""Rotary position embeddings (lesson 06, attention_course.rope): the angles, the rotation and its
properties, parity with the conventions of widely used implementations, and the rotary layer."""

import math

import pytest
import torch

from attention_course import attention, multihead
from attention_course.rope import RotaryMultiHeadAttention, apply_rotary, rotary_angles


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- the angles

def test_angles_are_position_times_speed():
    T, D, base = 7, 12, 500.0
    angles = rotary_angles(T, D, base=base, dtype=torch.float64)
    expected = torch.tensor([[t * base ** (-2 * i / D) for i in range(D // 2)] for t in range(T)],
                            dtype=torch.float64)
    assert angles.shape == (T, D // 2)
    torch.testing.assert_close(angles, expected, rtol=1e-12, atol=0)


def test_angles_follow_the_dtype_asked_for():
    assert rotary_angles(3, 4).dtype == torch.float32
    assert rotary_angles(3, 4, dtype=torch.float64).dtype == torch.float64


def test_angles_of_given_positions_are_the_rows_of_those_positions():
    table = rotary_angles(21, 8, dtype=torch.float64)
    positions = torch.tensor([5, 6, 7, 19, 0, 3])  # after a cache, or in any order
    torch.testing.assert_close(rotary_angles(positions, 8, dtype=torch.float64), table[positions])
    torch.testing.assert_close(rotary_angles(torch.arange(21), 8, dtype=torch.float64), table)
    batched = rotary_angles(torch.stack([positions, positions + 1]), 8, dtype=torch.float64)
    assert batched.shape == (2, 6, 4)
    torch.testing.assert_close(batched[1], table[positions + 1])
    assert rotary_angles(positions.double() + 0.5, 8).dtype == torch.float32


def test_the_layer_at_given_positions_scores_as_at_every_offset_alike():
    """Queries and keys moved by the same P: every score, so every output, stays the same
    (rotary scores see offsets only); queries moved alone change them."""
    torch.manual_seed(0)
    layer = RotaryMultiHeadAttention(16, 2).eval()
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    at_zero = layer(x, memory, memory)
    shifted = layer(x, memory, memory, query_positions=torch.arange(40, 45),
                    key_positions=torch.arange(40, 47))
    torch.testing.assert_close(shifted, at_zero)
    explicit = layer(x, memory, memory, query_positions=torch.arange(5),
                     key_positions=torch.arange(7))
    torch.testing.assert_close(explicit, at_zero)
    moved, _ = layer(x, memory, memory, query_positions=torch.arange(3, 8))
    assert not torch.allclose(moved, at_zero[0], atol=1e-3)


def test_cached_rotary_decoding_equals_attention_over_the_whole_sequence():
    """Keys rotated once at their positions and kept; new queries at P .. P+T-1."""
    torch.manual_seed(0)
    layer = RotaryMultiHeadAttention(16, 2).eval()
    x = torch.randn(1, 9, 16)
    whole, _ = layer(x, x, x, is_causal=True)
    last, _ = layer(x[:, 6:], x, x, query_positions=torch.arange(6, 9),
                    attn_mask=torch.ones(3, 9, dtype=torch.bool).tril(6))
    torch.testing.assert_close(last, whole[:, 6:])


def test_an_odd_head_width_is_refused():
    with pytest.raises(ValueError, match="even"):
        rotary_angles(4, 5)


# ---------------------------------------------------------------- parity with other implementations

def hugging_face_llama(x, angles):
    """The documented formula of Hugging Face's LLaMA (apply_rotary_pos_emb): the angle table
    concatenated with itself to width D, and x * cos + rotate_half(x) * sin, where rotate_half
    moves the second half, negated, in front of the first."""
    table = torch.cat([angles, angles], dim=-1)  # (T, D)
    half = x.shape[-1] // 2
    rotate_half = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * table.cos() + rotate_half * table.sin()


def test_parity_with_hugging_face_llamas_rotate_half_convention():
    x = torch.randn(2, 3, 9, 16, generator=seeded(), dtype=torch.float64)
    angles = rotary_angles(9, 16, dtype=torch.float64)
    torch.testing.assert_close(apply_rotary(x, angles), hugging_face_llama(x, angles))


def test_parity_with_pytorchs_onnx_rotary_embedding_and_the_interleaved_convention():
    onnx = pytest.importorskip("torch.onnx.ops")
    B, H, T, D = 2, 3, 9, 8
    x = torch.randn(B, H, T, D, generator=seeded(1))
    angles = rotary_angles(T, D, base=100.0)
    positions = torch.arange(T).expand(B, T)

    def theirs(inputs, interleaved):
        return onnx.rotary_embedding(inputs, angles.cos(), angles.sin(), positions,
                                     interleaved=interleaved)

    torch.testing.assert_close(apply_rotary(x, angles), theirs(x, False))
    # interleaved pairs (2i, 2i+1) are half-split pairs (i, i + D/2) after a permutation
    to_halves = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])  # 0 2 4 6 1 3 5 7
    back = torch.argsort(to_halves)
    torch.testing.assert_close(apply_rotary(x[..., to_halves], angles)[..., back],
                               theirs(x, True))
    assert not torch.allclose(apply_rotary(x, angles), theirs(x, True), atol=1e-3)


# ---------------------------------------------------------------- what a rotation keeps

@pytest.fixture
def pairs():
    g = seeded(2)
    T, D = 11, 8
    return (torch.randn(2, T, D, generator=g, dtype=torch.float64),
            torch.randn(2, T, D, generator=g, dtype=torch.float64),
            rotary_angles(T, D, dtype=torch.float64))


def test_lengths_are_kept(pairs):
    q, _, angles = pairs
    torch.testing.assert_close(apply_rotary(q, angles).norm(dim=-1), q.norm(dim=-1))


def test_position_zero_is_not_turned_and_turning_back_undoes_it(pairs):
    q, _, angles = pairs
    rotated = apply_rotary(q, angles)
    assert torch.equal(rotated[:, 0], q[:, 0])
    torch.testing.assert_close(apply_rotary(rotated, -angles), q)


def test_scores_depend_only_on_the_offset():
    g = seeded(3)
    D, shift = 8, 37
    q, k = torch.randn(D, generator=g, dtype=torch.float64), torch.randn(D, generator=g,
                                                                         dtype=torch.float64)
    angles = rotary_angles(60, D, dtype=torch.float64)

    def score(t, s):
        return apply_rotary(q, angles[t]) @ apply_rotary(k, angles[s])

    for t, s in [(5, 3), (3, 5), (9, 0), (4, 4)]:
        torch.testing.assert_close(score(t, s), score(t + shift, s + shift))
    assert not torch.isclose(score(5, 3), score(3, 5))  # the order of the two still counts


def test_offset_zero_is_unrotated_attention(pairs):
    q, k, angles = pairs
    rotated = apply_rotary(q, angles) @ apply_rotary(k, angles).mT  # (2, T, T)
    plain = q @ k.mT
    torch.testing.assert_close(rotated.diagonal(dim1=-2, dim2=-1),
                               plain.diagonal(dim1=-2, dim2=-1))
    off_diagonal = ~torch.eye(q.shape[-2], dtype=torch.bool)
    assert not torch.allclose(rotated[:, off_diagonal], plain[:, off_diagonal])


# ---------------------------------------------------------------- the rotary layer

def rotary_layer(dtype=torch.float32, **kwargs):
    torch.manual_seed(0)
    layer = RotaryMultiHeadAttention(16, 2, **kwargs).to(dtype).eval()
    plain = multihead.MultiHeadAttention(16, 2).to(dtype).eval()
    plain.load_state_dict(layer.state_dict())  # no parameter of its own: the same keys
    return layer, plain


def test_the_layer_has_lesson_04s_parameters_only():
    layer, plain = rotary_layer()
    assert layer.state_dict().keys() == plain.state_dict().keys()


def test_one_token_is_plain_attention():
    layer, plain = rotary_layer(torch.float64)
    x = torch.randn(3, 1, 16, generator=seeded(4), dtype=torch.float64)
    for ours, theirs in zip(layer(x, x, x), plain(x, x, x), strict=True):
        torch.testing.assert_close(ours, theirs)


def test_values_are_not_rotated():
    """With identical keys every query spreads its weight evenly, rotated or not; only the
    values could then change the output, and they must not."""
    layer, plain = rotary_layer(torch.float64)
    with torch.no_grad():
        layer.k_proj.weight.zero_()
        layer.k_proj.bias.zero_()  # every key is 0: every score is 0
    plain.load_state_dict(layer.state_dict())
    x = torch.randn(2, 6, 16, generator=seeded(5), dtype=torch.float64)
    torch.testing.assert_close(layer(x, x, x)[0], plain(x, x, x)[0])


def test_a_repeated_token_is_told_apart_by_offset():
    """One token at every position: lesson 04's layer sees identical keys (even weights); the
    rotary layer's causal weights are exp(f(t - s)) / Z_t, so within a row the log weights of
    two keys differ by what their offsets give, on every row alike."""
    layer, plain = rotary_layer(torch.float64, base=10.0)
    x = 3 * torch.randn(1, 1, 16, generator=seeded(6), dtype=torch.float64).expand(1, 8, 16)
    with torch.no_grad():
        rotary_weights = layer(x, x, x, is_causal=True)[1][0]  # (H, T, T)
        plain_weights = plain(x, x, x, is_causal=True)[1][0]
    even = torch.tril(torch.ones(8, 8, dtype=torch.float64)) / torch.arange(1, 9)[:, None]
    torch.testing.assert_close(plain_weights, even.expand_as(plain_weights))
    log_weights = rotary_weights.log()  # (H, T, T), -inf above the diagonal
    for t in range(2, 8):
        torch.testing.assert_close(log_weights[:, t, t - 2:t + 1] - log_weights[:, t, t, None],
                                   log_weights[:, 2, 0:3] - log_weights[:, 2, 2, None])
    assert not torch.allclose(rotary_weights, plain_weights, atol=1e-2)


def test_keys_count_their_own_positions_when_there_are_more_of_them():
    layer, _ = rotary_layer(torch.float64, base=100.0)
    x = torch.randn(2, 4, 16, generator=seeded(7), dtype=torch.float64)
    memory = torch.randn(2, 6, 16, generator=seeded(8), dtype=torch.float64)
    q = multihead.split_heads(layer.q_proj(x), 2)
    k = multihead.split_heads(layer.k_proj(memory), 2)
    expected = (apply_rotary(q, rotary_angles(4, 8, base=100.0, dtype=torch.float64))
                @ apply_rotary(k, rotary_angles(6, 8, base=100.0, dtype=torch.float64)).mT
                / math.sqrt(8)).softmax(-1)
    torch.testing.assert_close(layer(x, memory, memory)[1], expected)


# ---------------------------------------------------------------- dtypes and edges

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16],
                         ids=str)
def test_the_rotation_returns_the_dtype_of_x_with_float32_angles(dtype):
    x = torch.randn(2, 7, 8, generator=seeded(9)).to(dtype)
    rotated = apply_rotary(x, rotary_angles(7, 8))
    assert rotated.dtype == dtype
    if dtype in (torch.bfloat16, torch.float16):  # rotated in float32, rounded once
        torch.testing.assert_close(rotated, apply_rotary(x.float(), rotary_angles(7, 8)).to(dtype),
                                   rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16_bit_layer_rotates_with_float32_angles(dtype):
    """Its output is the one of the layer whose projections give the same 16-bit q and k,
    rotated with float32 angles: bfloat16 angles would be off by up to T / 256 radians."""
    layer, _ = rotary_layer(dtype, base=500000.0)
    x = torch.randn(1, 300, 16, generator=seeded(10)).to(dtype)
    out, weights = layer(x, x, x, is_causal=True)
    assert out.dtype == weights.dtype == dtype
    q, k, v = (multihead.split_heads(proj(x), 2) for proj in layer.input_projections())
    angles = rotary_angles(300, 8, base=500000.0)  # float32
    expected, _ = attention.scaled_dot_product_attention(apply_rotary(q, angles),
                                                         apply_rotary(k, angles), v,
                                                         is_causal=True)
    torch.testing.assert_close(out, layer.out_proj(multihead.merge_heads(expected)),
                               rtol=0, atol=0)


def test_the_layer_with_no_keys_gives_the_output_bias():
    layer, plain = rotary_layer(torch.float64)
    x = torch.randn(2, 5, 16, generator=seeded(11), dtype=torch.float64)
    nothing = torch.zeros(2, 0, 16, dtype=torch.float64)
    out, weights = layer(x, nothing, nothing)
    assert weights.shape == (2, 2, 5, 0)
    torch.testing.assert_close(out, layer.out_proj.bias.detach().expand(2, 5, 16))
    torch.testing.assert_close(out, plain(x, nothing, nothing)[0])
