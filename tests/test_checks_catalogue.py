"""Every catalogued mistake is named by its check, and real student mistakes are diagnosed.

Knob mistakes are reproduced from the exercise's own variant; mistakes recognised by a sign,
and the student mistakes further down, are written by hand the way a student would.
"""

import ast
import functools
import inspect
import math
import textwrap

import pytest
import torch
import torch.nn.functional as F
from check_solutions import (
    CHECK_NAMES,
    REFERENCES,
    MHAByEinsum,
    MLPByFunctional,
    StudentBlock,
    StudentCausalSelfAttention,
    StudentMHA,
    check_of,
    failure,
    masked_attention_additive,
    merge_by_transpose,
    named_mistakes,
    split_by_view,
)
from test_lesson06_answers import SIGN_EXAMPLES as LESSON06_SIGN_EXAMPLES
from test_lesson06_answers import rotary_mha_with
from torch import nn

from attention_course import attention
from attention_course.checks import MODULES, lesson03, lesson04, lesson05, lesson06
from attention_course.checks.framework import Exercise

# exercises judged against a reference (not by a rule such as lesson 05's held-out accuracy)
EXERCISES = {value.name: value for module in MODULES for value in vars(module).values()
             if isinstance(value, Exercise) and value.assess is None}
CATALOGUE = {name: exercise.mistakes for name, exercise in EXERCISES.items()}
CATALOGUE["multi_head_attention"] = lesson04.MHA_MISTAKES
# checks that build their exercise around a seeded model: the catalogue, and the wrong
# variant with the student's signature
CATALOGUE["causal_self_attention"] = lesson05.ATTENTION_LAYER_MISTAKES
CATALOGUE["mlp"] = lesson05.MLP_MISTAKES
CATALOGUE["decoder_block"] = lesson05.BLOCK_MISTAKES
CATALOGUE["copy_task_loss"] = lesson05.LOSS_MISTAKES
STUDENT_VARIANTS = {"copy_task_loss": lesson05.loss_variant}
CATALOGUE["rotary_multi_head_attention"] = lesson06.ROTARY_MHA_MISTAKES


def test_every_check_has_its_catalogue_here():
    assert set(CATALOGUE) == set(CHECK_NAMES)


def test_catalogue_is_rich_and_every_mistake_has_a_hint():
    mistakes = [mistake for entries in CATALOGUE.values() for mistake in entries]
    assert len({mistake.name for mistake in mistakes}) >= 15
    assert all(mistake.hint.strip() for mistake in mistakes)
    assert all(mistake.knobs or mistake.sign for mistake in mistakes), "unrecognisable mistake"


# ---------------------------------------------------------------- knob mistakes, from the variant

def from_variant(name: str, knobs: dict):
    """The exercise's wrong variant with ``knobs`` set, shaped like a student's answer."""
    if name in STUDENT_VARIANTS:
        return functools.partial(STUDENT_VARIANTS[name], **knobs)
    if name in LESSON05_CLASSES:
        return LESSON05_CLASSES[name](knobs)
    if name == "rotary_multi_head_attention":
        return rotary_mha_with(knobs)
    if name != "multi_head_attention":
        return functools.partial(EXERCISES[name].variant, **knobs)

    class Buggy(MHAByEinsum):
        def forward(self, query, key, value, attn_mask=None, is_causal=False):
            return lesson04.mha_variant(self, query, key, value, attn_mask, is_causal, **knobs)
    return Buggy


def attention_layer_with(knobs: dict):
    class Buggy(StudentCausalSelfAttention):
        def forward(self, x):
            return lesson05.attention_layer_variant(self, x, **knobs)
    return Buggy


def mlp_with(knobs: dict):
    """An MLP built and run as ``lesson05.mlp_variant`` describes, written as a student's."""
    activation, where = knobs.get("activation", "gelu"), knobs.get("where", "between")
    act = {"gelu": F.gelu, "none": lambda h: h, "relu": F.relu,
           "tanh": lambda h: F.gelu(h, approximate="tanh")}[activation]

    class Buggy(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.0):
            super().__init__()
            hidden = {"d_ff": d_ff, "4C": 4 * d_model, "C": d_model}[knobs.get("width", "d_ff")]
            self.fc = nn.Linear(d_model, hidden)
            self.proj = nn.Linear(hidden, d_model)

        def forward(self, x):
            return act(self.proj(self.fc(x))) if where == "after" else self.proj(act(self.fc(x)))
    return Buggy


def block_with(knobs: dict):
    class Buggy(StudentBlock):
        def forward(self, x):
            return lesson05.block_variant(self, x, **knobs)
    return Buggy


LESSON05_CLASSES = {"causal_self_attention": attention_layer_with, "mlp": mlp_with,
                    "decoder_block": block_with}


KNOB_MISTAKES = [pytest.param(name, mistake, id=f"{name}-{mistake.name}")
                 for name, mistakes in CATALOGUE.items() for mistake in mistakes if mistake.knobs]


@pytest.mark.parametrize(("name", "mistake"), KNOB_MISTAKES)
def test_variant_mistake_is_named(name, mistake):
    message = failure(check_of(name), from_variant(name, mistake.knobs))
    assert named_mistakes(message) == [mistake.name], message


# ---------------------------------------------------------------- sign mistakes, by hand

def apply_mask_filling(fill: float):
    def apply_mask(scores, attn_mask):
        if attn_mask is None:
            return scores
        if attn_mask.dtype == torch.bool:
            return scores.masked_fill(~attn_mask, fill)
        return scores + attn_mask
    return apply_mask


def masked_attention_filling(fill: float):
    def masked_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
        scores = query @ key.transpose(-2, -1) * (scale or 1 / math.sqrt(query.shape[-1]))
        T, S = scores.shape[-2:]
        if is_causal:
            scores = scores.masked_fill(torch.ones(T, S).tril() == 0, fill)
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, fill)
        elif attn_mask is not None:
            scores = scores + attn_mask
        weights = F.softmax(scores, dim=-1)
        return weights @ value, weights
    return masked_attention


class MHADroppingOutInEvalMode(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = (p(x).unflatten(-1, (self.n_heads, -1)).transpose(1, 2)
                   for p, x in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
        out, weights = attention.scaled_dot_product_attention(q, k, v, attn_mask, self.dropout,
                                                              is_causal)
        return self.out_proj(out.transpose(1, 2).flatten(-2)), weights


class MHAByEinsumFilling(StudentMHA):
    """Einsum over (B, T, H, D) heads; hidden scores filled with ``fill``, as in many tutorials.
    With ``float_masks_as_bool``, every mask is read as "0 = hidden" (masked_fill(mask == 0))."""

    fill = -1e9
    float_masks_as_bool = False

    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        H, D = self.n_heads, self.d_head
        q, k, v = (p(x).unflatten(-1, (H, D)) for p, x in
                   ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
        scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(D)
        T, S = scores.shape[-2:]
        if is_causal:
            scores = scores.masked_fill(torch.ones(T, S).tril() == 0, self.fill)
        if attn_mask is not None and (attn_mask.dtype == torch.bool or self.float_masks_as_bool):
            scores = scores.masked_fill(attn_mask == 0, self.fill)
        elif attn_mask is not None:
            scores = scores + attn_mask
        weights = torch.softmax(scores, dim=-1)
        return self.out_proj(torch.einsum("bhts,bshd->bthd", weights, v).flatten(-2)), weights


class MHAReadingEveryMaskAsBool(MHAByEinsumFilling):
    fill = -1e20
    float_masks_as_bool = True


class AttentionLayerDroppingOutInEvalMode(StudentCausalSelfAttention):
    def forward(self, x):
        out, weights = self.attn(x, x, x, is_causal=True)
        return F.dropout(out, self.dropout), weights


class MLPDroppingOutInEvalMode(MLPByFunctional):
    def forward(self, x):
        return F.dropout(self.proj(F.gelu(self.fc(x))), self.dropout)


SIGN_EXAMPLES = {  # (exercise, mistake) -> {what the student did: their function}
    ("apply_mask", lesson03.LARGE_NEGATIVE): {
        "fill -1e4": apply_mask_filling(-1e4), "fill -1e9": apply_mask_filling(-1e9)},
    ("masked_attention", lesson03.LARGE_NEGATIVE): {
        "fill -1e9": masked_attention_filling(-1e9), "fill -1e4": masked_attention_filling(-1e4)},
    ("multi_head_attention", lesson04.DROPOUT_IN_EVAL_MODE.name): {
        "dropout_p=self.dropout": MHADroppingOutInEvalMode},
    ("multi_head_attention", lesson03.LARGE_NEGATIVE): {"fill -1e9": MHAByEinsumFilling},
    ("causal_self_attention", "dropout applied in eval mode"): {
        "F.dropout(out, p)": AttentionLayerDroppingOutInEvalMode},
    ("mlp", "dropout applied in eval mode"): {"F.dropout(out, p)": MLPDroppingOutInEvalMode},
}
SIGN_EXAMPLES.update(LESSON06_SIGN_EXAMPLES)  # lesson 06's, kept with its answers
SIGN_MISTAKES = [
    pytest.param(name, mistake.name, student, id=f"{name}-{mistake.name}-{label}")
    for name, mistakes in CATALOGUE.items() for mistake in mistakes if not mistake.knobs
    for label, student in SIGN_EXAMPLES.get((name, mistake.name), {"no example": None}).items()]


@pytest.mark.parametrize(("name", "mistake", "student"), SIGN_MISTAKES)
def test_sign_mistake_is_named(name, mistake, student):
    assert student is not None, "write a hand-made example for this mistake in SIGN_EXAMPLES"
    message = failure(check_of(name), student)
    assert named_mistakes(message) == [mistake], message


# ---------------------------------------------------------------- real student mistakes, by hand

def scores_over_d_times_values(query, key, value, scale=None):
    scores = query @ key.transpose(-2, -1) / query.shape[-1]
    return scores @ value, torch.softmax(scores, dim=-1)


def attention_softmax_over_queries(query, key, value, scale=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    weights = F.softmax(scores, dim=-2)
    return weights @ value, weights


def softmax_without_max(x, dim=-1):
    exps = torch.exp(x)
    return exps / exps.sum(dim=dim, keepdim=True)


def softmax_on_the_last_axis(x, dim=-1):
    exps = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return exps / exps.sum(dim=-1, keepdim=True)


def softmax_max_on_the_last_axis(x, dim=-1):
    exps = torch.exp(x - x.amax(-1, keepdim=True))
    return exps / exps.sum(dim, keepdim=True)


def softmax_over_everything(x, dim=-1):
    exps = (x - x.max()).exp()
    return exps / exps.sum()


def scores_keys_times_queries(query, key, scale=None):
    return key @ query.transpose(-2, -1) / math.sqrt(query.shape[-1])


def positions_swapped(seq_len, d_model):
    pe = torch.zeros(seq_len, d_model)
    t = torch.arange(seq_len).unsqueeze(1)
    angles = t / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.cos(angles), torch.sin(angles)
    return pe


def positions_with_i(seq_len, d_model):
    pe = torch.zeros(seq_len, d_model)
    for t in range(seq_len):
        for i in range(d_model // 2):
            pe[t, 2 * i] = math.sin(t / 10000 ** (i / d_model))
            pe[t, 2 * i + 1] = math.cos(t / 10000 ** (i / d_model))
    return pe


def embedding_without_sqrt(token_ids, weight, pe):
    return weight[token_ids] + pe[: token_ids.shape[1]]


def causal_by_triu(T, S=None, device=None):
    return torch.triu(torch.ones(T, S or T, device=device)).bool()


def causal_without_diagonal(T, S=None, device=None):
    return torch.ones(T, S or T, dtype=torch.bool, device=device).tril(-1)


def causal_hiding_the_past(T, S=None, device=None):
    return torch.ones(T, S or T, dtype=torch.bool, device=device).triu(1)


def padding_inclusive(lengths, S):
    return (torch.arange(S)[None, :] <= lengths[:, None]).view(-1, 1, 1, S)


def padding_on_queries(lengths, S):
    return (torch.arange(S) < lengths[:, None])[:, None, :, None]


def apply_true_hides(scores, attn_mask):
    if attn_mask is None or attn_mask.is_floating_point():
        return scores if attn_mask is None else scores + attn_mask
    return scores.masked_fill(attn_mask, float("-inf"))


def apply_by_multiplying(scores, attn_mask):
    if attn_mask is None or attn_mask.is_floating_point():
        return scores if attn_mask is None else scores + attn_mask
    return scores * attn_mask


def allowed_keys(T, S, attn_mask, is_causal):
    """The bool mask a student builds first: causal and/or attn_mask (bool masks only)."""
    allowed = torch.ones(T, S, dtype=torch.bool).tril() if is_causal else torch.ones(T, S) > 0
    return allowed if attn_mask is None else allowed & attn_mask


def masked_attention_hiding_after_softmax(query, key, value, attn_mask=None, is_causal=False,
                                          scale=None):
    scores = query @ key.mT / math.sqrt(query.shape[-1])
    weights = torch.softmax(scores, dim=-1) * allowed_keys(*scores.shape[-2:], attn_mask,
                                                           is_causal)
    return weights @ value, weights


def masked_attention_multiplying(query, key, value, attn_mask=None, is_causal=False,
                                 scale=None):
    scores = query @ key.mT / math.sqrt(query.shape[-1])
    scores = scores * allowed_keys(*scores.shape[-2:], attn_mask, is_causal)
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def masked_attention_without_causal(query, key, value, attn_mask=None, is_causal=False,
                                    scale=None):
    return masked_attention_additive(query, key, value, attn_mask, scale=scale)


def apply_every_mask_as_bool(scores, attn_mask):
    return scores if attn_mask is None else scores.masked_fill(attn_mask == 0, float("-inf"))


def masked_attention_fixed_scale(query, key, value, attn_mask=None, is_causal=False, scale=None):
    return masked_attention_additive(query, key, value, attn_mask, is_causal)


def masked_attention_causal_or_mask(query, key, value, attn_mask=None, is_causal=False,
                                    scale=None):
    if attn_mask is None and is_causal:
        T, S = query.shape[-2], key.shape[-2]
        attn_mask = torch.ones(T, S, dtype=torch.bool).tril()
    return masked_attention_additive(query, key, value, attn_mask, scale=scale)


def masked_attention_float_as_bool(query, key, value, attn_mask=None, is_causal=False,
                                   scale=None):
    if attn_mask is not None and attn_mask.is_floating_point():
        attn_mask = attn_mask != 0
    return masked_attention_additive(query, key, value, attn_mask, is_causal, scale)


def mha_mask_unchanged(attn_mask):
    return attn_mask


def split_by_view_only(x, n_heads):
    B, T, C = x.shape
    return x.view(B, n_heads, T, C // n_heads)


def merge_by_reshape_only(x):
    B, H, T, D = x.shape
    return x.reshape(B, T, H * D)


class MHAHandWritten(StudentMHA):
    """A student's forward; the subclasses below each change one line of it."""

    def project(self, query, key, value):
        return self.q_proj(query), self.k_proj(key), self.v_proj(value)

    def split(self, x):
        return split_by_view(x, self.n_heads)

    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = (self.split(x) for x in self.project(query, key, value))
        out, weights = masked_attention_additive(q, k, v, attn_mask, is_causal, self.scale())
        return self.out_proj(merge_by_transpose(out)), weights

    def scale(self):
        return 1 / math.sqrt(self.d_head)


class MHAWithoutOutProj(MHAHandWritten):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = (self.split(x) for x in self.project(query, key, value))
        out, weights = masked_attention_additive(q, k, v, attn_mask, is_causal)
        return merge_by_transpose(out), weights


class MHAScaledByDModel(MHAHandWritten):
    def scale(self):
        return self.d_model ** -0.5


class MHASplitByView(MHAHandWritten):
    def split(self, x):
        return x.view(x.shape[0], self.n_heads, x.shape[1], self.d_head)


class MHASwappedKeyValue(MHAHandWritten):
    def project(self, query, key, value):
        return self.q_proj(query), self.v_proj(key), self.k_proj(value)


class MHAIgnoringCausal(MHAHandWritten):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        return super().forward(query, key, value, attn_mask)


class MHACausalOnlyWithoutMask(MHAHandWritten):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        if attn_mask is not None:
            return super().forward(query, key, value, attn_mask)
        return super().forward(query, key, value, None, is_causal)


class MHAIgnoringFloatMasks(MHAHandWritten):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        bool_mask = attn_mask if attn_mask is not None and attn_mask.dtype == torch.bool else None
        return super().forward(query, key, value, bool_mask, is_causal)


class MHAWithNaNRows(MHAByEinsumFilling):
    fill = float("-inf")


class AttentionLayerWithoutMask(StudentCausalSelfAttention):
    def forward(self, x):
        return self.attn(x, x, x)


class AttentionLayerWithTriu(StudentCausalSelfAttention):
    def forward(self, x):
        T = x.shape[1]
        return self.attn(x, x, x, attn_mask=torch.ones(T, T).triu().bool())


class MLPWithoutActivation(MLPByFunctional):
    def forward(self, x):
        return self.proj(self.fc(x))


class MLPWithReLU(MLPByFunctional):
    def forward(self, x):
        return self.proj(torch.relu(self.fc(x)))


class MLPFourTimesWide(MLPByFunctional):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, 4 * d_model, dropout)


class BlockPostNorm(StudentBlock):
    def forward(self, x):
        attended, weights = self.attn(x)
        x = self.attn_norm(x + attended)
        return self.mlp_norm(x + self.mlp(x)), weights


class BlockWithoutResiduals(StudentBlock):
    def forward(self, x):
        x, weights = self.attn(self.attn_norm(x))
        return self.mlp(self.mlp_norm(x)), weights


class BlockAddingToTheNorm(StudentBlock):
    def forward(self, x):
        x = self.attn_norm(x)
        attended, weights = self.attn(x)
        x = x + attended
        x = self.mlp_norm(x)
        return x + self.mlp(x), weights


def loss_without_shift(model, sequences, n):
    inputs = sequences[:, :-1]
    logits = model(inputs)
    return F.cross_entropy(logits[:, n:].flatten(0, 1), inputs[:, n:].flatten())


def loss_over_every_position(model, sequences, n):
    logits = model(sequences[:, :-1])
    return F.cross_entropy(logits.transpose(1, 2), sequences[:, 1:])


def loss_from_the_first_answer_digit(model, sequences, n):
    logits = model(sequences[:, :-1])
    return F.cross_entropy(logits[:, n + 1:].flatten(0, 1), sequences[:, n + 2:].flatten())


def loss_summed(model, sequences, n):
    logits = model(sequences[:, :-1])[:, n:]
    return F.cross_entropy(logits.flatten(0, 1), sequences[:, n + 1:].flatten(), reduction="sum")


STUDENT_MISTAKES = {  # student's answer: (exercise, the mistakes the check must name)
    scores_over_d_times_values: ("scaled_dot_product_attention",
                                 ["1/D instead of 1/sqrt(D)",
                                  "scores multiplied by V instead of the weights"]),
    attention_softmax_over_queries: ("scaled_dot_product_attention",
                                     ["softmax over the query axis"]),
    softmax_without_max: ("softmax", ["no max-subtraction (exp overflows on large logits)"]),
    softmax_on_the_last_axis: ("softmax", ["ignores the dim argument (always the last axis)"]),
    softmax_max_on_the_last_axis: ("softmax",
                                   ["max taken over the last axis instead of along dim"]),
    softmax_over_everything: ("softmax", ["max over the whole tensor instead of along dim",
                                          "sum over the whole tensor instead of along dim"]),
    scores_keys_times_queries: ("attention_scores", ["scores transposed (keys x queries)"]),
    positions_swapped: ("sinusoidal_positional_encoding", ["sin and cos swapped"]),
    positions_with_i: ("sinusoidal_positional_encoding",
                       ["positional exponent uses i instead of 2i"]),
    embedding_without_sqrt: ("token_and_position_embedding",
                             ["embedding not scaled by sqrt(d_model)"]),
    causal_by_triu: ("causal_mask", ["causal mask transposed (the future is visible)"]),
    causal_without_diagonal: ("causal_mask",
                              ["causal mask excludes the diagonal (a token cannot see itself)"]),
    causal_hiding_the_past: ("causal_mask", ["mask polarity inverted"]),
    padding_inclusive: ("padding_mask",
                        ["padding mask off by one (the first pad token is visible)"]),
    padding_on_queries: ("padding_mask", ["padding mask on the query axis"]),
    apply_true_hides: ("apply_mask", ["mask polarity inverted"]),
    apply_by_multiplying: ("apply_mask", ["masked positions filled with 0 instead of -inf"]),
    masked_attention_hiding_after_softmax: ("masked_attention",
                                            ["mask applied after the softmax"]),
    masked_attention_multiplying: ("masked_attention",
                                   ["masked positions filled with 0 instead of -inf"]),
    masked_attention_without_causal: ("masked_attention", ["is_causal ignored"]),
    masked_attention_fixed_scale: ("masked_attention", ["ignores the scale argument"]),
    masked_attention_causal_or_mask: ("masked_attention",
                                      ["is_causal ignored when attn_mask is given"]),
    masked_attention_float_as_bool: ("masked_attention", ["float mask treated as a bool mask"]),
    apply_every_mask_as_bool: ("apply_mask", ["float mask treated as a bool mask"]),
    mha_mask_unchanged: ("to_mha_mask", ["bool mask not inverted for nn.MultiheadAttention"]),
    split_by_view_only: ("split_heads", ["heads split with view and no transpose"]),
    merge_by_reshape_only: ("merge_heads", ["heads merged without the inverse transpose"]),
    MHAWithoutOutProj: ("multi_head_attention", ["missing output projection"]),
    MHAScaledByDModel: ("multi_head_attention", ["d_model instead of d_head in the scale"]),
    MHASplitByView: ("multi_head_attention", ["heads split with view and no transpose"]),
    MHASwappedKeyValue: ("multi_head_attention", ["key and value projections swapped"]),
    MHAIgnoringCausal: ("multi_head_attention", ["is_causal not passed on"]),
    MHACausalOnlyWithoutMask: ("multi_head_attention",
                               ["is_causal ignored when attn_mask is given"]),
    MHAIgnoringFloatMasks: ("multi_head_attention", ["float mask ignored"]),
    MHAReadingEveryMaskAsBool: ("multi_head_attention", ["float mask treated as a bool mask"]),
    MHAWithNaNRows: ("multi_head_attention", ["fully masked rows give NaN"]),
    AttentionLayerWithoutMask: ("causal_self_attention", ["no causal mask"]),
    AttentionLayerWithTriu: ("causal_self_attention",
                             ["causal mask transposed (the future is visible)"]),
    MLPWithoutActivation: ("mlp", ["MLP without its nonlinearity"]),
    MLPWithReLU: ("mlp", ["ReLU instead of GELU"]),
    MLPFourTimesWide: ("mlp", ["hidden width 4 * d_model instead of d_ff"]),
    BlockPostNorm: ("decoder_block", ["post-norm instead of pre-norm"]),
    BlockWithoutResiduals: ("decoder_block", ["attention residual missing",
                                              "MLP residual missing"]),
    BlockAddingToTheNorm: ("decoder_block", ["residual added to the normalised x"]),
    loss_without_shift: ("copy_task_loss", ["targets not shifted"]),
    loss_over_every_position: ("copy_task_loss", ["loss over the prompt half too"]),
    loss_from_the_first_answer_digit: ("copy_task_loss", ["first answer token left out"]),
    loss_summed: ("copy_task_loss", ["summed instead of averaged"]),
}
STUDENTS = [pytest.param(student, name, expected, id=f"{name}-{student.__name__}")
            for student, (name, expected) in STUDENT_MISTAKES.items()]


def test_hand_written_mha_without_its_mistakes_passes(capsys):
    check_of("multi_head_attention")(MHAHandWritten)
    assert capsys.readouterr().out.startswith("ok:")


@pytest.mark.parametrize(("student", "name", "expected"), STUDENTS)
def test_student_mistake_is_diagnosed(student, name, expected):
    assert all(m in {c.name for c in CATALOGUE[name]} for m in expected), "not catalogued"
    message = failure(check_of(name), student)
    assert sorted(named_mistakes(message)) == sorted(expected), message


# ---------------------------------------------------------------- failures never show the solution

def code_lines(function) -> list[str]:
    """The lines of ``function``'s body after its docstring, without comments."""
    source = textwrap.dedent(inspect.getsource(function))
    body = ast.parse(source).body[0].body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    lines = source.splitlines()[body[0].lineno - 1:]
    return [line.split("#")[0].strip() for line in lines]


@pytest.mark.parametrize(("student", "name", "expected"), STUDENTS)
def test_message_never_shows_the_solution(student, name, expected):
    message = failure(check_of(name), student)
    assert "### BEGIN SOLUTION" not in message
    leaked = [line for line in code_lines(REFERENCES[name]) if len(line) > 20 and line in message]
    assert not leaked, message
