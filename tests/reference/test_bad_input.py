"""Bad input gives an error that names the problem, not a shape error from deep inside torch."""

import pytest
import torch

from attention_course.attention import scaled_dot_product_attention
from attention_course.masks import padding_mask
from attention_course.multihead import MultiHeadAttention, split_heads
from attention_course.training import sequence_accuracy


def attend(q_shape, k_shape, v_shape, attn_mask=None):
    q, k, v = (torch.zeros(shape) for shape in (q_shape, k_shape, v_shape))
    return scaled_dot_product_attention(q, k, v, attn_mask)


@pytest.mark.parametrize(("shapes", "message"), [
    (((2, 5, 4), (2, 7, 3), (2, 7, 6)), r"query and key must share the head dim D.*D=4.*D=3"),
    (((2, 5, 4), (2, 7, 4), (2, 6, 6)), r"key and value must have the same length S"),
    (((2, 5, 4), (3, 7, 4), (3, 7, 6)), r"batch dims of query \(2,\) and key \(3,\)"),
    (((2, 5, 4), (2, 7, 4), (3, 7, 6)), r"batch dims of key \(2,\) and value \(3,\)"),
])
def test_query_key_value_that_do_not_fit(shapes, message):
    with pytest.raises(ValueError, match=message):
        attend(*shapes)


def test_d_model_not_divisible_by_heads():
    with pytest.raises(ValueError, match="d_model=10 is not divisible by n_heads=3"):
        MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match="C=10 is not divisible by n_heads=3"):
        split_heads(torch.zeros(2, 5, 10), 3)


def test_multihead_input_of_the_wrong_width():
    mha = MultiHeadAttention(12, 3)
    x, wrong = torch.zeros(2, 5, 12), torch.zeros(2, 7, 10)
    with pytest.raises(ValueError, match=r"key has width 10, expected d_model=12"):
        mha(x, wrong, x)


SHAPES = ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6))


@pytest.mark.parametrize(("mask", "error", "message"), [
    (torch.ones(7, 5, dtype=torch.bool), ValueError, r"\(7, 5\).*\(2, 3, 5, 7\)"),
    (torch.ones(3, 1, 1, 7, dtype=torch.bool), ValueError, r"\(3, 1, 1, 7\).*\(2, 3, 5, 7\)"),
    (torch.tensor(float("nan")).expand(5, 7), ValueError, "NaN"),
    (torch.ones(5, 7, dtype=torch.int64), TypeError, r"bool.*float.*int64"),
])
def test_unusable_masks(mask, error, message):
    with pytest.raises(error, match=message):
        attend(*SHAPES, attn_mask=mask)


@pytest.mark.parametrize("lengths", [[3, 8], [-1, 2]])
def test_padding_lengths_outside_zero_to_s(lengths):
    with pytest.raises(ValueError, match=r"lengths must lie in 0..S=7"):
        padding_mask(lengths, 7)


def test_padding_lengths_must_be_integers():
    with pytest.raises(ValueError, match="1-D integer"):
        padding_mask([2.5, 3.0], 7)


def test_sequence_accuracy_with_mismatched_shapes():
    with pytest.raises(ValueError, match=r"\(4, 10\).*\(4, 9\).*same shape"):
        sequence_accuracy(torch.zeros(4, 10), torch.zeros(4, 9))


@pytest.mark.parametrize(("dtypes", "message"), [
    ((torch.float32, torch.float64, torch.float64), r"query and key .* same dtype"),
    ((torch.bfloat16, torch.float32, torch.float32), r"query and key .* same dtype"),
    ((torch.float16, torch.float16, torch.float32), r"key and value .* same dtype"),
])
def test_query_key_value_of_different_dtypes(dtypes, message):
    """PyTorch refuses them too; a 16-bit input must not pass by being cast to float32."""
    q, k, v = (torch.zeros(shape, dtype=dtype) for shape, dtype in zip(SHAPES, dtypes,
                                                                         strict=True))
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(q, k, v)
