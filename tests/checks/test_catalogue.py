"""Every catalogued mistake of every lesson is named by its check, and real student mistakes are
diagnosed.

Knob mistakes are reproduced from the exercise's own variant; mistakes recognised by a sign,
and the student mistakes further down, are written by hand the way a student would, in
helpers/answers/.
"""

import functools
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_course.checks import (
    MODULES,
    lesson01,
    lesson04,
    lesson05,
    lesson06,
    lesson07,
    lesson08,
    lesson10,
)
from attention_course.checks.framework import Exercise
from helpers.answers import MISTAKES, REFERENCES, SIGN_EXAMPLES
from helpers.answers.lesson01 import EmbeddingByIndexing
from helpers.answers.lesson04 import MHAByEinsum, MHAHandWritten
from helpers.answers.lesson05 import (
    ModelLikeTheLesson,
    RMSNormLikeTheLesson,
    StudentBlock,
)
from helpers.answers.lesson06 import StudentRotaryMHA
from helpers.answers.lesson07 import StubRotary, StudentGQALayer
from helpers.answers.lesson10 import StubLatentAttention
from helpers.checking import CHECK_NAMES, check_of, code_lines, failure, named_mistakes

# exercises judged against a reference (not by a rule such as lesson 05's held-out accuracy)
EXERCISES = {value.name: value for module in MODULES for value in vars(module).values()
             if isinstance(value, Exercise) and value.assess is None}
CATALOGUE = {name: exercise.mistakes for name, exercise in EXERCISES.items()}
CATALOGUE["embedding_layer"] = lesson01.EMBEDDING_MISTAKES
CATALOGUE["multi_head_attention"] = lesson04.MHA_MISTAKES + lesson04.TRAINING_MISTAKES
# checks that build their exercise around a seeded model: the catalogue, and the wrong
# variant with the student's signature
CATALOGUE["mlp"] = lesson05.MLP_MISTAKES + lesson05.SWIGLU_MISTAKES
CATALOGUE["decoder_block"] = lesson05.ATTENTION_LAYER_MISTAKES + lesson05.BLOCK_MISTAKES
CATALOGUE["copy_task_loss"] = lesson05.LOSS_MISTAKES
CATALOGUE["decoder_only_transformer"] = lesson05.MODEL_MISTAKES
CATALOGUE["train_step"] = lesson05.TRAIN_STEP_MISTAKES
CATALOGUE["rms_norm"] = lesson05.RMS_NORM_MISTAKES
STUDENT_VARIANTS = {"copy_task_loss": lesson05.loss_variant,
                    "train_step": lesson05.step_variant,
                    "flash_attention": lesson08.function_variant}  # a Function applied
CATALOGUE["rotary_multi_head_attention"] = lesson06.ROTARY_MHA_MISTAKES
CATALOGUE["cached_rotary_attention"] = lesson07.ROTARY_MISTAKES
CATALOGUE["grouped_query_attention_layer"] = lesson07.GQA_LAYER_MISTAKES
CATALOGUE["latent_attention"] = lesson10.LAYER_MISTAKES


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
    if name == "latent_attention":
        return latent_layer_with(knobs)
    if name in ("cached_rotary_attention", "grouped_query_attention_layer"):
        return lesson07_layer_with(name, knobs)
    if name == "embedding_layer":
        class WrongEmbedding(EmbeddingByIndexing):
            def forward(self, token_ids, offset=0):
                return lesson01.embedding_variant(self, token_ids, offset, **knobs)
        return WrongEmbedding
    if name != "multi_head_attention":
        return functools.partial(as_student(EXERCISES[name].variant), **knobs)

    class Buggy(MHAByEinsum):
        def forward(self, query, key, value, attn_mask=None, is_causal=False):
            return lesson04.mha_variant(self, query, key, value, attn_mask, is_causal, **knobs)
    return Buggy


def as_student(variant):
    """A copy of ``variant`` under another code object: a check may refuse its own variant
    as a shortcut (lesson 09's do), which it recognises by its code."""
    code = variant.__code__.replace(co_name=f"{variant.__code__.co_name}_as_student")
    copy = types.FunctionType(code, variant.__globals__, code.co_name, variant.__defaults__,
                              variant.__closure__)
    copy.__kwdefaults__ = variant.__kwdefaults__
    return copy


def mlp_with(knobs: dict):
    """An MLP built and run as ``lesson05.mlp_variant`` describes, classic or gated, written
    as a student's."""
    activation, where = knobs.get("activation", "gelu"), knobs.get("where", "between")
    act = {"gelu": F.gelu, "none": lambda h: h, "relu": F.relu,
           "tanh": lambda h: F.gelu(h, approximate="tanh")}[activation]
    gate = {"silu": F.silu, "gelu": F.gelu, "sigmoid": torch.sigmoid,
            "none": lambda h: h}[knobs.get("gate", "silu")]
    gating = knobs.get("gating", "gate")

    class Buggy(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.0, gated=False):
            super().__init__()
            hidden = {"d_ff": d_ff, "4C": 4 * d_model, "C": d_model}[knobs.get("width", "d_ff")]
            self.gated = gated
            if gated:
                self.gate = nn.Linear(d_model, hidden, bias=False)
                self.up = nn.Linear(d_model, hidden, bias=False)
                self.down = nn.Linear(hidden, d_model, bias=False)
            else:
                self.fc = nn.Linear(d_model, hidden)
                self.proj = nn.Linear(hidden, d_model)

        def forward(self, x):
            if not self.gated:
                return act(self.proj(self.fc(x))) if where == "after" else \
                    self.proj(act(self.fc(x)))
            a, b = (self.up(x), self.gate(x)) if knobs.get("swapped") else \
                (self.gate(x), self.up(x))
            if gating == "product":
                return self.down(gate(a * b))
            return self.down(gate(a)) if gating == "ungated" else self.down(gate(a) * b)
    return Buggy


def block_with(knobs: dict):
    class Buggy(StudentBlock):
        def forward(self, x):
            return lesson05.block_variant(self, x, **knobs)
    return Buggy


def lesson07_layer_with(name: str, knobs: dict):
    """Lesson 07's layers (the rotary decoding step, the grouped-query layer) as the wrong
    variant with ``knobs``."""
    if name == "cached_rotary_attention":
        class BuggyRotary(StubRotary):
            def forward(self, x, past_key=None, past_value=None):
                return lesson07.cached_rotary_variant(self, x, past_key, past_value, **knobs)
        return BuggyRotary

    class BuggyGQA(StudentGQALayer):
        def forward(self, query, key, value, is_causal=False):
            return lesson07.gqa_layer_variant(self, query, key, value, is_causal, **knobs)
    return BuggyGQA


def latent_layer_with(knobs: dict):
    """Lesson 10's layer as the wrong variant with ``knobs``."""
    class BuggyLatent(StubLatentAttention):
        def forward(self, x, cache=None):
            return as_student(lesson10.layer_variant)(self, x, cache, **knobs)
    return BuggyLatent


def rotary_mha_with(knobs: dict):
    """A student's class whose forward is the check's wrong variant with ``knobs`` set."""
    class Buggy(StudentRotaryMHA):
        def forward(self, query, key, value, attn_mask=None, is_causal=False,
                    query_positions=None, key_positions=None):
            return lesson06.rotary_mha_variant(self, query, key, value, attn_mask, is_causal,
                                               query_positions, key_positions, **knobs)
    return Buggy


def model_with(knobs: dict):
    class Buggy(ModelLikeTheLesson):
        def forward(self, tokens, return_attention=False):
            out = lesson05.model_variant(self, tokens, None, return_attention, **knobs)
            return out[0] if not return_attention else out
    return Buggy


def rms_norm_with(knobs: dict):
    class Buggy(RMSNormLikeTheLesson):
        def forward(self, x):
            return lesson05.rms_norm_variant(self, x, **knobs)
    return Buggy


LESSON05_CLASSES = {"mlp": mlp_with,
                    "decoder_block": block_with, "decoder_only_transformer": model_with,
                    "rms_norm": rms_norm_with}


KNOB_MISTAKES = [pytest.param(name, mistake, id=f"{name}-{mistake.name}")
                 for name, mistakes in CATALOGUE.items() for mistake in mistakes if mistake.knobs]


@pytest.mark.parametrize(("name", "mistake"), KNOB_MISTAKES)
def test_variant_mistake_is_named(name, mistake):
    message = failure(check_of(name), from_variant(name, mistake.knobs))
    assert named_mistakes(message) == [mistake.name], message


# ---------------------------------------------------------------- sign mistakes, by hand

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

STUDENTS = [pytest.param(student, name, expected, id=f"{name}-{student.__name__}")
            for student, (name, expected) in MISTAKES.items()]


def test_hand_written_mha_without_its_mistakes_passes(capsys):
    check_of("multi_head_attention")(MHAHandWritten)
    assert capsys.readouterr().out.startswith("ok:")


@functools.cache
def failure_of(student, name: str, seed: int) -> str:
    """The message of ``name``'s check for ``student`` on ``seed``: a check is seeded, so its
    message is the same each time; the tests below read the same messages, computed once."""
    return failure(check_of(name), student, seed)


@pytest.mark.parametrize(("student", "name", "expected"), STUDENTS)
def test_student_mistake_is_diagnosed(student, name, expected):
    assert all(m in {c.name for c in CATALOGUE[name]} for m in expected), "not catalogued"
    for seed in (0, 1):
        message = failure_of(student, name, seed)
        assert sorted(named_mistakes(message)) == sorted(expected), message


def test_every_catalogued_mistake_of_lesson_06_has_an_answer_written_by_hand():
    by_hand = {(name, mistake) for name, mistakes in MISTAKES.values() for mistake in mistakes}
    by_hand |= set(SIGN_EXAMPLES)
    for name in ("rotate_pairs", "rotary_multi_head_attention"):
        for mistake in CATALOGUE[name]:
            written = (name, mistake.name) in by_hand
            inherited = mistake.name in ("missing output projection", "is_causal not passed on",
                                         "attn_mask not passed on")  # lesson 04's, tested there
            assert written or inherited, f"{name}: no hand-written answer for {mistake.name!r}"


# ---------------------------------------------------------------- failures never show the solution

@pytest.mark.parametrize(("student", "name", "expected"), STUDENTS)
def test_message_never_shows_the_solution(student, name, expected):
    message = failure_of(student, name, 0)  # the seed as above: the same cache entry
    assert "### BEGIN SOLUTION" not in message
    leaked = [line for line in code_lines(REFERENCES[name]) if len(line) > 20 and line in message]
    assert not leaked, message
