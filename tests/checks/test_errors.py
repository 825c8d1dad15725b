"""Common slips that raise, in every lesson: the check names the mistake behind the error text.

Each slip (helpers/answers/, SLIPS) is a real wrong answer that raises inside the student's
code. The check reports the error's text and, from that text alone (``explain_error``), the
mistake and a hint.
"""

import re

import pytest

from attention_course.checks.errors import KNOWN_ERRORS, explain_error
from attention_course.checks.framework import CheckFailed
from helpers.answers import GRADIENT_SLIPS, RAISED_AS_NOT_IMPLEMENTED, REFERENCES, SLIPS
from helpers.checking import check_of, code_lines, failure

pytestmark = pytest.mark.filterwarnings("ignore:The use of `x.T`:UserWarning")  # the .T slip
EXERCISE = {"multi_head_attention": "MultiHeadAttention",  # check -> exercise name
            "embedding_layer": "TokenAndPositionEmbedding",
            "grouped_query_attention_layer": "GroupedQueryAttention",
            "latent_attention": "LatentAttention"}
PARAMS = [pytest.param(name, slip, mistake, id=f"{name}-{slip.__name__}")
          for name, slip, mistake in SLIPS]


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
    named = {mistake for _, _, mistake in SLIPS + RAISED_AS_NOT_IMPLEMENTED + GRADIENT_SLIPS}
    assert {row.mistake for row in KNOWN_ERRORS} <= named


@pytest.mark.parametrize("text", [
    "NotImplementedError",
    "TypeError: only dim=-1 is supported",
    "RuntimeError: CUDA out of memory",
    "ValueError: the student's own message",
])
def test_other_errors_are_left_as_they_are(text):
    assert all(explain_error(name, text) is None
               for name in ["softmax", "masked_attention", "MultiHeadAttention"])


def test_a_pattern_means_its_mistake_only_in_its_exercises():
    mismatch = ("RuntimeError: The size of tensor a (7) must match the size of tensor b (5) at "
                "non-singleton dimension 3")
    assert explain_error("softmax", mismatch)[0] == "reduction without keepdim=True"
    assert explain_error("causal_mask", mismatch)[0] == "two tensors whose axes do not line up"


def test_the_generic_shape_error_names_the_axis_and_the_sizes():
    mismatch = ("RuntimeError: The size of tensor a (7) must match the size of tensor b (5) at "
                "non-singleton dimension 3")
    _, hint = explain_error("apply_mask", mismatch)
    assert "axis 3" in hint and "holds 7 in one and 5 in the other" in hint


def test_hints_never_show_the_solution():
    lines = {line for reference in REFERENCES.values() for line in code_lines(reference)
             if len(line) > 20}
    for row in KNOWN_ERRORS:
        assert row.hint.strip() and not any(line in row.hint for line in lines), row
        re.compile(row.pattern)
