"""The runner as a module: importable without side effects, and its recording replays to the
same points in the trusted process (without a sandbox or a kernel in between)."""

import importlib
import io
import os
import sys

from attention_course import attention, checks
from grader import verdicts
from grader.course import CheckCall, GradedCell


def test_importing_the_runner_changes_nothing():
    environment, arguments, path = dict(os.environ), list(sys.argv), list(sys.path)
    runner = importlib.import_module("grader.runner")
    assert (dict(os.environ), sys.argv, sys.path) == (environment, arguments, path)
    options = runner.arguments().parse_args(["--scratch", "s", "--package-root", "p"])
    assert (str(options.scratch), options.own_pid_namespace) == ("s", False)


def recorded(namespace: dict, cell: GradedCell) -> list:
    """What the runner records at ``cell`` for ``namespace``, read back as the grader reads it."""
    from grader import runner

    record = runner.Record()
    step = {"grade_id": cell.grade_id,
            "calls": [[c.check, list(c.targets), c.seed] for c in cell.calls]}
    runner.record_checks(step, namespace, record, checks.CHECKS)
    sent = io.BytesIO()
    record.send(sent, {})
    meta, arrays = sent.getvalue().split(b"\n", 1)
    return verdicts.read_record({"observations.json": meta, "observations.npz": arrays})[1]


SOFTMAX_CELL = GradedCell("check_softmax", 2.0, (CheckCall("check_softmax", ("softmax",), 0),
                                                 CheckCall("check_softmax", ("softmax",), 1)), "")


def test_a_recorded_right_answer_earns_the_points():
    def softmax(x, dim=-1):
        exps = (x - x.amax(dim=dim, keepdim=True)).exp()
        return exps / exps.sum(dim=dim, keepdim=True)

    result = verdicts.judge_cell(SOFTMAX_CELL, recorded({"softmax": softmax}, SOFTMAX_CELL))
    assert (result.passed, result.points) == (True, 2.0)


def test_a_recorded_call_of_the_reference_is_a_refused_shortcut():
    result = verdicts.judge_cell(SOFTMAX_CELL, recorded({"softmax": attention.softmax},
                                                        SOFTMAX_CELL))
    assert (result.passed, result.mistake) == (False, "shortcut")


def test_a_recorded_mistake_is_named_and_earns_nothing():
    def no_max(x, dim=-1):
        return x.exp() / x.exp().sum(dim=dim, keepdim=True)

    result = verdicts.judge_cell(SOFTMAX_CELL, recorded({"softmax": no_max}, SOFTMAX_CELL))
    assert (result.passed, result.points) == (False, 0.0)
    assert result.mistake.startswith("no max-subtraction"), result.message


def test_a_missing_name_is_reported_not_graded():
    result = verdicts.judge_cell(SOFTMAX_CELL, recorded({}, SOFTMAX_CELL))
    assert not result.passed and "`softmax` is not defined" in result.message
