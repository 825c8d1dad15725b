"""Correct answers written in many styles pass every check of every lesson; how the checks
report the rest."""

import re

import pytest
import torch
import torch.nn.functional as F

from attention_course import multihead
from attention_course.checks import check_apply_mask, check_merge_heads, check_softmax
from helpers.answers import CORRECT, PRINTED_NAME, STUBS
from helpers.answers.lesson02 import softmax_by_max
from helpers.answers.lesson03 import apply_by_masked_fill, masked_attention_additive
from helpers.answers.lesson04 import MHAByEinsum, StudentMHA, merge_by_transpose, split_by_view
from helpers.checking import CHECK_NAMES, check_of, failure


def test_every_check_has_three_correct_styles():
    assert set(CORRECT) == set(CHECK_NAMES)
    assert all(len(set(students)) >= 3 for students in CORRECT.values())


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("name", "student"), [
    pytest.param(name, student, id=f"{name}-{student.__name__}")
    for name, students in CORRECT.items() for student in students])
def test_correct_answer_passes(name, student, seed, capsys):
    check_of(name)(student, seed=seed)
    printed = capsys.readouterr().out
    assert re.fullmatch(rf"ok: {re.escape(PRINTED_NAME.get(name, name))} passed \d+ checks?\n",
                        printed), printed


# ---------------------------------------------------------------- what a failure reports

def not_written_yet(*args, **kwargs):
    raise NotImplementedError()


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_stub_is_not_implemented_yet(name):
    assert "not implemented yet" in failure(check_of(name), STUBS.get(name, not_written_yet))


def test_error_is_reported_with_the_case():
    def softmax_on_last_axis_only(x, dim=-1):
        if dim != -1:
            raise TypeError("only dim=-1 is supported")
        return softmax_by_max(x)
    message = failure(check_softmax, softmax_on_last_axis_only)
    assert "raised TypeError: only dim=-1 is supported" in message
    assert "dim=1" in message.partition("tested: ")[2]


def test_every_argument_is_described():
    def masked_attention_ignoring_the_mask(query, key, value, attn_mask=None, is_causal=False,
                                           scale=None):
        return masked_attention_additive(query, key, value, None, is_causal, scale)
    message = failure(check_of("masked_attention"), masked_attention_ignoring_the_mask)
    assert "attn_mask=<bool" in message.partition("called with: ")[2]


def softmax_in_place(x, dim=-1):
    x -= x.amax(dim=dim, keepdim=True)
    return x.exp() / x.exp().sum(dim=dim, keepdim=True)


def apply_mask_in_place(scores, attn_mask):
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        return scores.masked_fill_(~attn_mask, float("-inf"))
    return apply_by_masked_fill(scores, attn_mask)


@pytest.mark.parametrize(("check", "student", "argument"), [
    (check_softmax, softmax_in_place, "x"), (check_apply_mask, apply_mask_in_place, "scores")])
def test_in_place_modification_is_reported(check, student, argument):
    assert f"modified its input `{argument}` in place" in failure(check, student)


def test_wrong_dtype_is_reported():
    message = failure(check_softmax, lambda x, dim=-1: softmax_by_max(x, dim).float())
    assert "dtype torch.float32, expected torch.float64" in message


def test_cut_gradient_is_reported():
    def softmax_from_values(x, dim=-1):
        return softmax_by_max(torch.tensor(x.tolist(), dtype=x.dtype), dim)
    assert "no gradient reaches `x`" in failure(check_softmax, softmax_from_values)


def test_cut_gradient_to_a_parameter_is_reported():
    class DetachedOutputWeight(StudentMHA):
        def forward(self, query, key, value, attn_mask=None, is_causal=False):
            q, k, v = (split_by_view(projection(x), self.n_heads) for projection, x in
                       ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
            out, weights = masked_attention_additive(q, k, v, attn_mask, is_causal)
            out = F.linear(merge_by_transpose(out), self.out_proj.weight.detach(),
                           self.out_proj.bias)
            return out, weights
    message = failure(check_of("multi_head_attention"), DetachedOutputWeight)
    assert "no gradient reaches `out_proj.weight`" in message


def test_wrong_shape_reports_both_shapes():
    seen = []

    def merge_keeping_heads(x):
        seen.append(x)
        return x.flatten(-2)  # (B, H, T * D) instead of (B, T, H * D)
    message = failure(check_merge_heads, merge_keeping_heads)
    assert f"shape {tuple(seen[0].flatten(-2).shape)}" in message
    assert f"expected {tuple(multihead.merge_heads(seen[0]).shape)}" in message


def test_failure_in_the_last_case_prints_nothing(capsys):
    check_softmax(softmax_by_max)
    n_cases = int(re.search(r"passed (\d+) checks?", capsys.readouterr().out).group(1))
    calls = []

    def wrong_in_the_last_case(x, dim=-1):
        calls.append(x)
        return softmax_by_max(x, dim) * (2.0 if len(calls) == n_cases else 1.0)
    with pytest.raises(AssertionError):
        check_softmax(wrong_in_the_last_case)
    assert len(calls) == n_cases
    assert capsys.readouterr().out == ""


# ---------------------------------------------------------------- the seed

def first_input(name: str, seed: int) -> torch.Tensor:
    """What the check gives a correct answer first: an input tensor, or for the module check
    the query projection's weight."""
    seen = []
    if name == "multi_head_attention":
        class Recording(MHAByEinsum):
            def forward(self, *args, **kwargs):
                seen.append(self.q_proj.weight.detach().clone())
                return super().forward(*args, **kwargs)
        check_of(name)(Recording, seed=seed)
    else:
        def recording(*args, **kwargs):
            first = args[1] if name == "copy_task_loss" else args[0]  # the sequences, not the model
            seen.append(first.detach().clone())
            return CORRECT[name][0](*args, **kwargs)
        check_of(name)(recording, seed=seed)
    return seen[0]


@pytest.mark.parametrize("name", ["softmax", "scaled_dot_product_attention",
                                  "apply_mask", "masked_attention", "split_heads",
                                  "multi_head_attention", "copy_task_loss"])
def test_seed_changes_the_inputs(name):
    assert torch.equal(first_input(name, 0), first_input(name, 0))
    assert not torch.equal(first_input(name, 0), first_input(name, 1))
