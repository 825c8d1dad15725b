"""Shortcuts are refused in every lesson: calling the exercise's own reference, or the PyTorch
built-in it re-implements (or, for lesson 07, the course's attention in one piece). Functions of
earlier lessons (and earlier exercises) stay allowed."""

import importlib
from dataclasses import replace

import pytest
import torch

from attention_course import attention, lessons
from attention_course.checks.student import observing
from grader.course import read_lesson
from grader.grading import verdicts
from helpers.answers import BUILT_INS, CALLING_THE_REFERENCE, REFERENCES
from helpers.answers.lesson02 import NEG_INF, additive
from helpers.answers.lesson04 import MHAFromEarlierLessons
from helpers.answers.lesson05 import BlockByLoop
from helpers.checking import CHECK_NAMES, check_of, failure

SHORTCUT = "Shortcut refused"


def calling(reference):
    def student(*args, **kwargs):
        return reference(*args, **kwargs)
    return student


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_calling_the_reference_is_refused(name):
    student = CALLING_THE_REFERENCE.get(name) or calling(REFERENCES[name])
    message = failure(check_of(name), student)
    assert SHORTCUT in message
    assert REFERENCES[name].__qualname__ in message


# ---------------------------------------------------------------- built-ins, whole matrices

@pytest.mark.parametrize(("name", "student"), [
    pytest.param(name, student, id=f"{name}-{label}")
    for name, students in BUILT_INS.items() for label, student in students.items()])
def test_calling_the_built_in_is_refused(name, student):
    assert SHORTCUT in failure(check_of(name), student)


# ---------------------------------------------------------------- earlier lessons are allowed

def masked_attention_from_lesson_02(query, key, value, attn_mask=None, is_causal=False,
                                    scale=None):
    scores = attention.attention_scores(query, key, scale)
    T, S = scores.shape[-2:]
    if is_causal:
        scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), NEG_INF)
    if attn_mask is not None:
        scores = scores + additive(attn_mask, scores.dtype)
    empty = scores.isneginf().all(dim=-1, keepdim=True)
    weights = attention.softmax(scores.masked_fill(empty, 0.0)).masked_fill(empty, 0.0)
    return weights @ value, weights


@pytest.mark.parametrize(("name", "student"), [
    ("masked_attention", masked_attention_from_lesson_02),
    ("multi_head_attention", MHAFromEarlierLessons),
    ("decoder_block", BlockByLoop),  # lessons 03 and 04
])
def test_earlier_lessons_are_allowed(name, student, capsys):
    check_of(name)(student)
    assert capsys.readouterr().out.startswith("ok:")


# ---------------------------------------------------------------- the reference, graded

def references_by_their_names(lesson_id: str) -> dict:
    """{the student's name for it: the course's reference} of every practice of a lesson."""
    found = {}
    for practice in lessons.lesson(lesson_id).practice:
        if practice.written and practice.reference:
            module, name = practice.reference.rsplit(".", 1)
            found[name] = getattr(importlib.import_module(f"attention_course.{module}"), name)
    return found


@pytest.mark.parametrize("lesson_id", lessons.ids())
def test_the_reference_under_the_exercises_name_earns_nothing_from_the_grader(lesson_id):
    """The "Stuck?" import, graded: each check, judged here against the student's side in this
    process (a harness around the student's object included), refuses the course's reference."""
    namespace = references_by_their_names(lesson_id)
    for cell in read_lesson(lesson_id).cells:
        if all(target in namespace for call in cell.calls for target in call.targets):
            result = verdicts.judge_cell(cell, lambda request: observing.answer(request,
                                                                                namespace))
            assert (result.points, result.mistake) == (0.0, "shortcut"), (cell.grade_id,
                                                                          result.message)


# ---------------------------------------------------------------- the check's own variant

def variants_of_functions() -> list:
    """(check, variant) of every exercise written as a function whose check has a variant."""
    from attention_course.checks import MODULES
    from attention_course.checks.framework import Exercise

    exercises = [value for module in MODULES for value in vars(module).values()
                 if isinstance(value, Exercise) and value.variant is not None]
    return [(e.name, e.variant) for e in exercises if e.name in CHECK_NAMES
            and not isinstance(REFERENCES.get(e.name), type)
            and e.name != "flash_attention"]  # its variant is of the harness's call (dout too)


@pytest.mark.parametrize(("name", "variant"), [
    pytest.param(name, variant, id=name) for name, variant in variants_of_functions()])
def test_the_checks_own_variant_is_refused(name, variant):
    """With no knob set a wrong variant is the reference: calling it is a shortcut, in every
    lesson (the grader's student process has no checks to call)."""
    message = failure(check_of(name), lambda *args, **kwargs: variant(*args, **kwargs))
    assert SHORTCUT in message and variant.__name__ in message, message


# ---------------------------------------------------------------- the watch itself

def calls_of_a_student(forbidden_name: str) -> None:
    """Forbidden and allowed built-ins, each reached several ways and more than once, and a
    Python function whose name is forbidden."""
    import functools
    x = torch.randn(3, 4)
    for _ in range(2):
        torch.softmax(x, -1)
        x.softmax(dim=0)
        list(map(functools.partial(torch.softmax, dim=-1), [x]))
        torch.exp(x).sum()
        x.log_softmax(-1)
        globals()[forbidden_name]()


def a_function_whose_name_is_forbidden():
    return torch.zeros(1)


@pytest.mark.parametrize("names", [frozenset(), frozenset({f"{__name__}.a_function_whose_name_"
                                                           f"is_forbidden"})])
def test_the_watch_records_every_forbidden_call_each_time(names, monkeypatch):
    """The watch keeps each built-in name's answer (a speed-up): it records the same calls, in
    the same order, as asking ``Forbidden.forbids_builtin`` every time."""
    from attention_course.checks.student import shortcuts

    forbidden = replace(shortcuts.forbid((), ("softmax",)), function_names=names)

    def recorded():
        called = []
        with shortcuts.watch_calls(forbidden, called):
            calls_of_a_student("a_function_whose_name_is_forbidden")
        return called

    remembered = recorded()
    monkeypatch.setattr(shortcuts, "_remembered", lambda forbidden: forbidden.forbids_builtin)
    assert remembered == recorded()
    assert remembered.count("torch's built-in softmax") >= 6
    assert "torch's built-in log_softmax" in remembered
    assert not [name for name in remembered if "exp" in name or "sum" in name]
    assert remembered.count(next(iter(names), None)) == (2 if names else 0)
