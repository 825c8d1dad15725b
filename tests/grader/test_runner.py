"""The grading protocol without a sandbox in between: the trusted side's checks against the
student's side (``observing.answer``) in this process, and what the trusted side does with
replies it did not expect."""

import importlib
import json
import os
import sys

import pytest
import torch
import torch.nn.functional as F

from attention_course.checks.student import observing, wire
from grader.course import CheckCall, GradedCell
from grader.grading import verdicts
from helpers.answers import CORRECT

SOFTMAX_CELL = GradedCell("check_softmax", 2.0, (CheckCall("check_softmax", ("softmax",), 0),
                                                 CheckCall("check_softmax", ("softmax",), 1)), "")


def right_softmax(x, dim=-1):
    exps = (x - x.amax(dim=dim, keepdim=True)).exp()
    return exps / exps.sum(dim=dim, keepdim=True)


def judged(namespace: dict, cell: GradedCell = SOFTMAX_CELL):
    """The verdict on ``cell`` when the student's side holds ``namespace``."""
    return verdicts.judge_cell(cell, lambda request: observing.answer(request, namespace))


def test_importing_the_runner_changes_nothing():
    environment, arguments, path = dict(os.environ), list(sys.argv), list(sys.path)
    runner = importlib.import_module("grader.sandbox.runner")
    assert (dict(os.environ), sys.argv, sys.path) == (environment, arguments, path)
    options = runner.arguments().parse_args(["--scratch", "s", "--package-root", "p"])
    assert (str(options.scratch), options.own_pid_namespace) == ("s", False)


def test_a_right_answer_earns_the_points():
    result = judged({"softmax": right_softmax})
    assert (result.passed, result.points) == (True, 2.0), result.message


def test_a_mistake_is_named_and_earns_nothing():
    def no_max(x, dim=-1):
        return x.exp() / x.exp().sum(dim=dim, keepdim=True)

    result = judged({"softmax": no_max})
    assert (result.passed, result.points) == (False, 0.0)
    assert result.mistake.startswith("no max-subtraction"), result.message


def test_a_builtin_the_exercise_forbids_is_a_refused_shortcut():
    result = judged({"softmax": lambda x, dim=-1: torch.softmax(x, dim)})
    assert (result.passed, result.mistake) == (False, "shortcut")


def sdpa_as_softmax(x, dim=-1):
    """A softmax computed by F.scaled_dot_product_attention: zero scores plus x as the mask."""
    y = x.movedim(dim, -1)
    n = y.shape[-1]
    q, k = y.new_zeros(*y.shape[:-1], 1, 1), y.new_zeros(*y.shape[:-1], n, 1)
    eye = torch.eye(n, dtype=y.dtype).expand(*y.shape[:-1], n, n)
    out = getattr(F, "scaled_dot" + "_product_attention")(q, k, eye, attn_mask=y.unsqueeze(-2))
    return out.squeeze(-2).movedim(-1, dim)


@pytest.mark.parametrize("route", ["safe", "masked", "attention"])
def test_a_private_softmax_or_attention_used_as_softmax_is_a_refused_shortcut(route):
    calls = {"safe": lambda x, dim=-1: getattr(torch, "_safe" + "_softmax")(x, dim),
             "masked": lambda x, dim=-1: getattr(torch, "_masked" + "_softmax")(
                 x, torch.zeros_like(x, dtype=torch.bool), dim),
             "attention": sdpa_as_softmax}
    result = judged({"softmax": calls[route]})
    assert (result.passed, result.mistake) == (False, "shortcut"), result.message


@pytest.mark.parametrize("route", ["methodcaller", "map"])
def test_a_built_in_called_for_python_by_c_code_is_still_a_refused_shortcut(route):
    import operator

    calls = {"methodcaller": lambda x, dim=-1: operator.methodcaller("softmax", dim)(x),
             "map": lambda x, dim=-1: next(map(getattr(torch, "soft" + "max"), [x], [dim]))}
    result = judged({"softmax": calls[route]})
    assert (result.passed, result.mistake) == (False, "shortcut"), result.message


def test_a_forbidden_python_function_is_caught_by_its_name_where_only_names_travel():
    import copy

    from torch import nn

    def mha_forward(self, query, key, value, attn_mask=None, is_causal=False):
        builtin = nn.MultiheadAttention(self.d_model, self.n_heads, batch_first=True).double()
        builtin.forward(query.double(), key.double(), value.double())
        return copy.deepcopy(REFERENCE_MHA).to(query.dtype)(query, key, value, attn_mask,
                                                              is_causal=is_causal)

    from attention_course import multihead
    REFERENCE_MHA = multihead.MultiHeadAttention(12, 3).eval()
    student = type("MultiHeadAttention", (multihead.MultiHeadAttention,), {"forward": mha_forward})
    cell = GradedCell("check_multi_head_attention", 5.0, (CheckCall(
        "check_multi_head_attention", ("MultiHeadAttention",), 0),), "")
    result = judged({"MultiHeadAttention": student}, cell)
    assert (result.passed, result.mistake) == (False, "shortcut"), result.message
    assert "MultiheadAttention.forward" in result.message


def test_a_missing_name_is_reported_not_graded():
    result = judged({})
    assert not result.passed and "`softmax` is not defined" in result.message


def test_the_student_side_sees_the_cases_only_when_asked():
    asked = []

    def spy(request: bytes) -> list[bytes]:
        asked.append(wire.loads(request))
        return observing.answer(request, {"softmax": right_softmax})

    verdicts.judge_cell(SOFTMAX_CELL, spy)
    assert len(asked) == 2  # one request per check call, seeds 0 and 1: different inputs
    first, second = (a["cases"][0]["args"][0] for a in asked)
    assert first.shape == second.shape and not torch.equal(first, second)
    assert set(asked[0]) == {"inputs", "forbidden", "student", "cases"}  # no seed, no reference


def test_a_default_dtype_changed_by_the_student_does_not_cost_points():
    def positions(seq_len, d_model):  # a right answer, in the default dtype
        j = torch.arange(d_model)
        angles = torch.arange(seq_len)[:, None] / torch.pow(10000.0, (j - j % 2) / d_model)
        return torch.where(j % 2 == 0, torch.sin(angles), torch.cos(angles))

    cell = GradedCell("check_sinusoidal_positional_encoding", 2.0, (CheckCall(
        "check_sinusoidal_positional_encoding", ("pe",), 0),), "")
    torch.set_default_dtype(torch.float64)
    try:
        result = judged({"pe": positions}, cell)
    finally:
        torch.set_default_dtype(torch.float32)
    assert result.passed, result.message


SETTINGS = {"float64 by default": (lambda: torch.set_default_dtype(torch.float64),
                                   lambda: torch.set_default_dtype(torch.float32)),
            "gradients off": (lambda: torch.set_grad_enabled(False),
                              lambda: torch.set_grad_enabled(True))}
GRADED_CLASSES = {"check_multi_head_attention": ("multi_head_attention", 3.0),
                  "check_tiled_attention": ("tiled_attention", 3.0),
                  "check_rotary_multi_head_attention": ("rotary_multi_head_attention", 3.0)}


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("check", GRADED_CLASSES)
def test_torch_settings_a_demo_cell_changed_do_not_cost_points(setting, check):
    """The student's objects are built and called under a fresh kernel's torch settings, where
    the reference is computed, whatever the student's cells set (the harness builds a student's
    class in the student's process: before this, in its default dtype)."""
    exercise, points = GRADED_CLASSES[check]
    cell = GradedCell(check, points, (CheckCall(check, ("answer",), 0),), "")
    change, restore = SETTINGS[setting]

    def answered_after_the_change(request: bytes) -> list[bytes]:  # the student's process
        change()
        try:
            return observing.answer(request, {"answer": CORRECT[exercise][0]})
        finally:
            restore()

    result = verdicts.judge_cell(cell, answered_after_the_change)
    assert result.passed, result.message


# ---------------------------------------------------------------- replies nobody honest sends

def reply_with(*replies: bytes):
    return lambda request: list(replies) * len(wire.loads(request)["cases"])


def deep(levels: int) -> bytes:
    header = b'{"value": ' + b"[" * levels + b"]" * levels + b', "blob": 0}'
    return header + b"\n"


def claimed_tensor(shape: list[int], blob: bytes = b"", copies: int = 1) -> bytes:
    observation = {"outputs": {"~": "tuple", "items": [
        {"~": "tensor", "dtype": "float64", "shape": shape, "at": 0}] * copies},
        "error": None, "shortcuts": [], "modified_inputs": [], "grads": {"~": "dict", "items": {}}}
    return json.dumps({"value": {"~": "dict", "items": observation},
                       "blob": len(blob)}).encode() + b"\n" + blob


MALFORMED = {
    "not a message": b"garbage",
    "a length that lies": b'{"value": 1, "blob": 99}\n',
    "JSON nested a million deep": deep(1_000_000),
    "a number with 100000 digits": b'{"value": ' + b"9" * 100_000 + b', "blob": 0}\n',
    "a tensor claiming 10^30 bytes": claimed_tensor([10**15, 10**15]),
    "a negative size": claimed_tensor([-1, 4]),
    "an unknown dtype": claimed_tensor([2]).replace(b"float64", b"object"),
    "a value that is not an observation": wire.dumps([1, 2, 3]),
    "fields of the wrong types": wire.dumps({"outputs": 5, "error": None, "shortcuts": [],
                                             "modified_inputs": [], "grads": {}}),
    "1000 tensors sharing one MiB": claimed_tensor([2**17], bytes(2**20), copies=1000),
    "an observation of two MiB": wire.dumps({"outputs": None, "error": None,
                                             "shortcuts": ["torch.softmax"] * 150_000,
                                             "modified_inputs": [], "grads": {}}),
}


@pytest.mark.parametrize("what", MALFORMED)
def test_a_malformed_reply_is_an_ungradable_record_never_an_internal_error(what):
    with pytest.raises(verdicts.Unreadable):
        verdicts.judge_cell(SOFTMAX_CELL, reply_with(MALFORMED[what]))


def test_too_few_replies_are_an_ungradable_record():
    with pytest.raises(verdicts.Unreadable):
        verdicts.judge_cell(SOFTMAX_CELL, lambda request: [])


def test_a_well_formed_wrong_reply_is_judged_like_any_wrong_answer():
    result = verdicts.judge_cell(SOFTMAX_CELL, reply_with(claimed_tensor([2], bytes(16))))
    assert not result.passed and "shape" in result.message


def test_plain_values_survive_the_wire_and_code_does_not():
    value = {"t": torch.arange(6.0).reshape(2, 3), "n": (1, 2.5, None, "x", True), "d": torch.int64,
             "empty": torch.zeros(0, 3)}
    back = wire.loads(wire.dumps(value))
    assert torch.equal(back["t"], value["t"]) and back["n"] == value["n"]
    assert back["d"] is torch.int64 and back["empty"].shape == (0, 3)
    with pytest.raises(TypeError):
        wire.dumps({"f": print})
    assert type(wire.loads(wire.dumps([print], lenient=True))[0]).__name__ \
        == "builtin_function_or_method"


def test_a_profiler_the_student_left_running_keeps_running_through_a_check():
    import cProfile

    def after_the_check():
        return None

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        result = judged({"softmax": right_softmax})
        after_the_check()
    finally:
        profiler.disable()
    profiler.create_stats()
    assert result.passed
    assert any(name == "after_the_check" for _, _, name in profiler.stats)


def test_an_error_while_computing_gradients_is_the_students_error_not_the_graders():
    class NoGradient(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return right_softmax(x)

        @staticmethod
        def backward(ctx, grad):
            raise RuntimeError("this operation has no gradient")

    result = judged({"softmax": lambda x, dim=-1: NoGradient.apply(x) if dim == -1
                     else right_softmax(x, dim)})
    assert not result.passed and "while computing gradients" in result.message, result.message
