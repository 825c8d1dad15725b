"""Common slips that raise: the check names the mistake behind the error text.

Each slip below is a real wrong answer that raises inside the student's code. The check reports
the error's text and, from that text alone (``explain_error``), the mistake and a hint.
"""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from check_solutions import (
    REFERENCES,
    StudentMHA,
    check_of,
    failure,
    masked_attention_additive,
    merge_by_transpose,
    split_by_view,
)
from test_checks_catalogue import code_lines
from test_lesson07_answers import SLIPS as LESSON07_SLIPS

from attention_course.checks.errors import KNOWN_ERRORS, explain_error
from attention_course.checks.framework import CheckFailed

pytestmark = pytest.mark.filterwarnings("ignore:The use of `x.T`:UserWarning")  # the .T slip
EXERCISE = {"multi_head_attention": "MultiHeadAttention.forward"}  # check -> exercise name
NEG_INF = float("-inf")


# ---------------------------------------------------------------- lesson 01

def one_hot_without_num_classes(token_ids, weight):
    return F.one_hot(token_ids).to(weight.dtype) @ weight


def one_hot_in_float32(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]).float() @ weight


def positions_with_an_angle_per_dimension(seq_len, d_model):
    angles = torch.arange(seq_len)[:, None] / 10000 ** (torch.arange(d_model) / d_model)
    pe = torch.zeros(seq_len, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe


def embedding_with_positions_for_the_batch(token_ids, weight, pe):
    return weight[token_ids] * math.sqrt(weight.shape[1]) + pe[: token_ids.shape[0]]


# ---------------------------------------------------------------- lesson 02

def softmax_sum_without_keepdim(x, dim=-1):
    exps = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return exps / exps.sum(dim=dim)


def softmax_max_without_keepdim(x, dim=-1):
    exps = torch.exp(x - x.amax(dim=dim))
    return exps / exps.sum(dim=dim, keepdim=True)


def softmax_max_with_its_indices(x, dim=-1):
    exps = torch.exp(x - x.max(dim=dim, keepdim=True))
    return exps / exps.sum(dim=dim, keepdim=True)


def softmax_for_matrices(x, dim=-1):
    rows, columns = x.shape
    exps = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return exps / exps.sum(dim=dim, keepdim=True)


def scores_by_dot_T(query, key, scale=None):
    return query @ key.T / math.sqrt(query.shape[-1])


def scores_by_dot_t(query, key, scale=None):
    return query @ key.t() / math.sqrt(query.shape[-1])


def scores_without_transpose(query, key, scale=None):
    return query @ key / math.sqrt(query.shape[-1])


def scores_by_torch_sqrt(query, key, scale=None):
    return query @ key.transpose(-2, -1) / torch.sqrt(query.shape[-1])


def scores_by_fixed_axes(query, key, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    return query @ key.transpose(2, 3) * scale


def scores_by_permute(query, key, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    return query @ key.permute(0, 1, 3, 2) * scale


def scores_by_einsum_for_4_axes(query, key, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    return torch.einsum("bhtd,bhsd->bhts", query, key) * scale


def scores_by_einsum_with_one_letter(query, key, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    return torch.einsum("bhtd,bhtd->bhtt", query, key) * scale


def scores_by_unpacking(query, key, scale=None):
    B, H, T, D = query.shape
    return query @ key.transpose(-2, -1) * (D ** -0.5 if scale is None else scale)


def scores_scaled_by_none(query, key, scale=None):
    return query @ key.transpose(-2, -1) * scale


def attention_with_a_sum_without_keepdim(query, key, value, scale=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    exps = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    weights = exps / exps.sum(dim=-1)
    return weights @ value, weights


def attention_with_values_transposed(query, key, value, scale=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    return weights @ value.transpose(-2, -1), weights


# ---------------------------------------------------------------- lesson 03

def causal_by_tril_of_sizes(T, S=None, device=None):
    return torch.tril(T, T if S is None else S).bool()


def padding_without_a_column(lengths, S):
    return (torch.arange(S) < lengths)[:, None, None, :]


def apply_mask_without_none(scores, attn_mask):
    if attn_mask.dtype == torch.bool:
        return scores.masked_fill(~attn_mask, NEG_INF)
    return scores + attn_mask


def apply_mask_inverting_every_mask(scores, attn_mask):
    return scores if attn_mask is None else scores.masked_fill(~attn_mask, NEG_INF)


def apply_mask_if_mask(scores, attn_mask):
    if attn_mask:
        return scores.masked_fill(~attn_mask, NEG_INF)
    return scores


def masked_attention_with_a_square_causal_mask(query, key, value, attn_mask=None,
                                               is_causal=False, scale=None):
    T = query.shape[-2]
    if is_causal:
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        attn_mask = causal if attn_mask is None else causal & attn_mask
    return masked_attention_additive(query, key, value, attn_mask, scale=scale)


def masked_attention_combining_with_and(query, key, value, attn_mask=None, is_causal=False,
                                        scale=None):
    if is_causal:
        causal = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool).tril()
        attn_mask = causal if attn_mask is None else causal & attn_mask
    return masked_attention_additive(query, key, value, attn_mask, scale=scale)


def masked_attention_filling_float_masks(query, key, value, attn_mask=None, is_causal=False,
                                         scale=None):
    scores = query @ key.transpose(-2, -1) * (query.shape[-1] ** -0.5 if scale is None
                                              else scale)
    if is_causal:
        scores = scores.masked_fill(torch.ones(*scores.shape[-2:]).tril() == 0, NEG_INF)
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask.logical_not() if attn_mask.dtype == torch.bool
                                    else attn_mask, NEG_INF)
    empty = scores.isneginf().all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    return weights @ value, weights


def to_mha_inverting_every_mask(attn_mask):
    return ~attn_mask


# ---------------------------------------------------------------- lesson 04

def split_with_the_width_for_each_head(x, n_heads):
    B, T, C = x.shape
    return x.view(B, T, n_heads, C).transpose(1, 2)


def split_unpacking_four_sizes(x, n_heads):
    B, T, H, D = x.shape
    return x.view(B, T, n_heads, -1).transpose(1, 2)


def merge_by_view(x):
    B, H, T, D = x.shape
    return x.transpose(1, 2).view(B, T, H * D)


def project(module, query, key, value):
    return (split_by_view(projection(x), module.n_heads) for projection, x in
            ((module.q_proj, query), (module.k_proj, key), (module.v_proj, value)))


class MHAProjectingBeforeMerging(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        out, weights = masked_attention_additive(*project(self, query, key, value), attn_mask,
                                                 is_causal)
        return merge_by_transpose(self.out_proj(out)), weights


class MHAEinsumBeforeSplitting(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(self.d_head)
        weights = torch.softmax(scores, dim=-1)
        return self.out_proj(torch.einsum("bhts,bhsd->bthd", weights, v).flatten(-2)), weights


class MHAMergingByView(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        out, weights = masked_attention_additive(*project(self, query, key, value), attn_mask,
                                                 is_causal)
        B, H, T, D = out.shape
        return self.out_proj(out.transpose(1, 2).view(B, T, H * D)), weights


class MHAKeysNotTransposed(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = project(self, query, key, value)
        weights = torch.softmax(q @ k / math.sqrt(self.d_head), dim=-1)
        return self.out_proj(merge_by_transpose(weights @ v)), weights


class MHAKeysByDotT(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = project(self, query, key, value)
        weights = torch.softmax(q @ k.T / math.sqrt(self.d_head), dim=-1)
        return self.out_proj(merge_by_transpose(weights @ v)), weights


# (check, slip, the mistake explain_error names from the error the slip raises)
SLIPS = [
    ("one_hot_embedding", one_hot_without_num_classes,
     "one-hot width taken from the ids instead of the vocabulary"),
    ("one_hot_embedding", one_hot_in_float32, "float32 tensor mixed with float64 inputs"),
    ("sinusoidal_positional_encoding", positions_with_an_angle_per_dimension,
     "one angle per dimension instead of one per pair"),
    ("token_and_position_embedding", embedding_with_positions_for_the_batch,
     "positional rows that do not line up with the tokens"),
    ("softmax", softmax_sum_without_keepdim, "reduction without keepdim=True"),
    ("softmax", softmax_max_without_keepdim, "reduction without keepdim=True"),
    ("softmax", softmax_max_with_its_indices, "max(dim=...) used as a tensor"),
    ("softmax", softmax_for_matrices, "code written for one number of axes"),
    ("attention_scores", scores_by_dot_T,
     "every axis of key reversed (.T) instead of the last two swapped"),
    ("attention_scores", scores_by_dot_t, ".t() on a tensor with batch axes"),
    ("attention_scores", scores_without_transpose, "matrix product of shapes that do not line up"),
    ("attention_scores", scores_by_torch_sqrt, "torch function given a Python number"),
    ("attention_scores", scores_by_fixed_axes, "code written for one number of axes"),
    ("attention_scores", scores_by_permute, "code written for one number of axes"),
    ("attention_scores", scores_by_einsum_for_4_axes, "code written for one number of axes"),
    ("attention_scores", scores_by_einsum_with_one_letter,
     "one einsum letter for two different axes"),
    ("attention_scores", scores_by_unpacking, "code written for one number of axes"),
    ("attention_scores", scores_scaled_by_none, "scale=None used as a number"),
    ("scaled_dot_product_attention", attention_with_a_sum_without_keepdim,
     "reduction without keepdim=True"),
    ("scaled_dot_product_attention", attention_with_values_transposed,
     "matrix product of shapes that do not line up"),
    ("causal_mask", causal_by_tril_of_sizes, "torch function given a Python number"),
    ("padding_mask", padding_without_a_column,
     "lengths compared with the positions without lining up their axes"),
    ("apply_mask", apply_mask_without_none, "attn_mask=None not handled"),
    ("apply_mask", apply_mask_inverting_every_mask, "float mask used as a bool mask"),
    ("apply_mask", apply_mask_if_mask, "a tensor used as a single True/False"),
    ("masked_attention", masked_attention_with_a_square_causal_mask,
     "shapes that differ along the keys' axis"),
    ("masked_attention", masked_attention_filling_float_masks, "float mask used as a bool mask"),
    ("to_mha_mask", to_mha_inverting_every_mask, "float mask used as a bool mask"),
    ("split_heads", split_with_the_width_for_each_head,
     "view or reshape sizes that do not multiply to the tensor's size"),
    ("split_heads", split_unpacking_four_sizes, "shape unpacked into the wrong number of names"),
    ("merge_heads", merge_by_view, "view on a transposed tensor"),
    ("multi_head_attention", MHAProjectingBeforeMerging,
     "a projection applied to a tensor whose last axis is not d_model"),
    ("multi_head_attention", MHAEinsumBeforeSplitting,
     "einsum letters that do not match the tensor's axes"),
    ("multi_head_attention", MHAMergingByView, "view on a transposed tensor"),
    ("multi_head_attention", MHAKeysNotTransposed, "matrix product of shapes that do not line up"),
    ("multi_head_attention", MHAKeysByDotT,
     "every axis of key reversed (.T) instead of the last two swapped"),
]
SLIPS += LESSON07_SLIPS  # lesson 07's, kept with its answers
PARAMS = [pytest.param(name, slip, mistake, id=f"{name}-{slip.__name__}")
          for name, slip, mistake in SLIPS]

# Errors that a check cannot report yet: torch raises them as NotImplementedError, which a
# check takes for the exercise's unwritten stub. The text is torch's own.
RAISED_AS_NOT_IMPLEMENTED = [
    ("masked_attention", masked_attention_combining_with_and, "float mask used as a bool mask"),
]


def error_text(name: str, slip) -> str:
    """The error the check reports for ``slip``: "ErrorType: message"."""
    message = failure(check_of(name), slip)
    found = re.search(r" raised (.+?)\n  tested: ", message, re.S)
    assert found, message
    return found.group(1)


def exercise(name: str) -> str:
    return EXERCISE.get(name, name)


@pytest.mark.parametrize(("name", "slip", "mistake"), PARAMS)
def test_the_reported_error_is_explained(name, slip, mistake):
    explained = explain_error(exercise(name), error_text(name, slip))
    assert explained is not None and explained[0] == mistake, explained


@pytest.mark.parametrize(("name", "slip", "mistake"), PARAMS)
def test_the_check_names_the_slip(name, slip, mistake):
    with pytest.raises(CheckFailed) as info:
        check_of(name)(slip)
    message, (_, hint) = str(info.value), explain_error(exercise(name), error_text(name, slip))
    assert info.value.mistake == mistake, message
    assert re.search(rf' raised \w+: .*\n  tested: .*\n  This is a known mistake: '
                     rf'"{re.escape(mistake)}"\.\n  Hint: {re.escape(hint)}$', message, re.S), \
        message


@pytest.mark.parametrize(("name", "slip", "mistake"), RAISED_AS_NOT_IMPLEMENTED)
def test_torch_errors_raised_as_not_implemented_are_explained(name, slip, mistake):
    with pytest.raises(NotImplementedError) as info:
        for case in cases_of(name):
            slip(*case.args, **case.kwargs)
    text = f"{type(info.value).__name__}: {info.value}"
    assert explain_error(exercise(name), text)[0] == mistake


def cases_of(name: str) -> list:
    """The cases ``check_<name>`` runs, caught on their way to run_check."""
    from attention_course.checks import MODULES

    module = next(m for m in MODULES if hasattr(m, f"check_{name}"))
    caught = []
    original = module.run_check
    module.run_check = lambda exercise, student, cases, *args, **kwargs: caught.extend(cases)
    try:
        getattr(module, f"check_{name}")(None)
    finally:
        module.run_check = original
    return caught


def test_every_known_error_has_a_slip():
    named = {mistake for _, _, mistake in SLIPS + RAISED_AS_NOT_IMPLEMENTED}
    assert {row.mistake for row in KNOWN_ERRORS} <= named


@pytest.mark.parametrize("text", [
    "NotImplementedError",
    "TypeError: only dim=-1 is supported",
    "RuntimeError: CUDA out of memory",
    "ValueError: the student's own message",
])
def test_other_errors_are_left_as_they_are(text):
    assert all(explain_error(name, text) is None
               for name in ["softmax", "masked_attention", "MultiHeadAttention.forward"])


def test_a_pattern_means_its_mistake_only_in_its_exercises():
    mismatch = ("RuntimeError: The size of tensor a (7) must match the size of tensor b (5) at "
                "non-singleton dimension 3")
    assert explain_error("softmax", mismatch)[0] == "reduction without keepdim=True"
    assert explain_error("causal_mask", mismatch) is None  # could mean anything there


def test_hints_never_show_the_solution():
    lines = {line for reference in REFERENCES.values() for line in code_lines(reference)
             if len(line) > 20}
    for row in KNOWN_ERRORS:
        assert row.hint.strip() and not any(line in row.hint for line in lines), row
        re.compile(row.pattern)
