"""Points, decided in the grader's own process, one graded cell at a time.

When the student's process reaches a graded cell it waits. Here the cell's checks run exactly
as in a student's check cell, with a ``Remote`` session: each check generates its cases here
(its hidden seeds never exist in the student's process before the call), sends them as plain
values (``checks.student.wire``), and the student's process only calls the student's code on
them and sends back what it did (outputs, errors, gradients for the probe weights). The verdict (the
comparison, the named-mistake diagnosis, the shortcut rule) is made here, against a reference
computed here. Nothing the student's process runs can change a verdict; it can only answer.
"""

from attention_course.checks import CHECKS
from attention_course.checks.framework import SESSION, CheckFailed, Harnessed, Target, judge_all
from attention_course.checks.student import wire
from attention_course.checks.student.observing import Observation

from ..course import CheckCall, GradedCell
from ..sandbox.client import Exchange, ExchangeFailed
from .results import ExerciseResult, exercise_name


class Unreadable(Exception):
    """The student's process answered with something that is not a record of observations."""


class Remote:
    """A check session that observes in the student's process and judges here."""

    def __init__(self, exchange: Exchange):
        self.exchange = exchange

    def run(self, exercise, student, cases, reference, reference_parameters) -> None:
        request = {"inputs": list(exercise.inputs),
                   "forbidden": {"builtins": sorted(exercise.forbidden.builtin_names),
                                 "functions": exercise.forbidden.qualified_names},
                   "student": describe(student),
                   "cases": [{"description": c.description, "args": tuple(c.args),
                              "kwargs": dict(c.kwargs), "grad": c.grad,
                              "default_device": c.default_device} for c in cases]}
        replies = self.exchange(wire.dumps(request))
        if len(replies) != len(cases):
            raise Unreadable(f"{len(replies)} replies for {len(cases)} cases")
        seen = [observation(reply) for reply in replies]
        judge_all(exercise, cases, seen, reference, reference_parameters)


def describe(student) -> dict:
    """What the student's process calls: a target by name, or a harness around targets."""
    if isinstance(student, Target):
        return {"harness": None, "args": [{"target": student.name}]}
    if isinstance(student, Harnessed):
        return {"harness": student.function.__name__,
                "args": [{"target": a.name} if isinstance(a, Target) else a
                         for a in student.args]}
    raise TypeError(f"a check passed {type(student).__name__} as the student's side: under the "
                    f"grader it must be a Target or a Harnessed")


def observation(reply: bytes) -> Observation:
    """One case's reply as an Observation; Unreadable for anything malformed."""
    try:
        fields = wire.loads(reply)
    except wire.Malformed as err:
        raise Unreadable(str(err)) from None
    if type(fields) is not dict or set(fields) != set(vars(Observation())):
        raise Unreadable("a reply is not an observation")
    outputs, error, grads = fields["outputs"], fields["error"], fields["grads"]
    if not (outputs is None or type(outputs) is tuple) \
            or not (error is None or type(error) is str) or type(grads) is not dict \
            or any(type(x) is not list or any(type(s) is not str for s in x)
                   for x in (fields["shortcuts"], fields["modified_inputs"])):
        raise Unreadable("an observation has fields of the wrong types")
    return Observation(**fields)


def judge_cell(cell: GradedCell, exchange: Exchange) -> ExerciseResult:
    """Run the cell's checks against the student's process behind ``exchange``."""
    token = SESSION.set(Remote(exchange))
    try:
        for call in cell.calls:
            _judge_call(call)
    except CheckFailed as failure:
        return exercise_result(cell, False, str(failure), failure.mistake)
    except AssertionError as failure:
        return exercise_result(cell, False, str(failure))
    finally:
        SESSION.reset(token)
    return exercise_result(cell, True, f"ok: {exercise_name(cell.grade_id)} passed")


def exercise_result(cell: GradedCell, passed: bool, message: str,
                    mistake: str | None = None) -> ExerciseResult:
    return ExerciseResult(cell.grade_id, cell.points if passed else 0.0, cell.points, passed,
                          message, mistake)


def _judge_call(call: CheckCall) -> None:
    try:
        CHECKS[call.check](*(Target(name) for name in call.targets), seed=call.seed)
    except (AssertionError, Unreadable, ExchangeFailed):
        raise
    except Exception as err:  # answers the checks cannot even compare
        raise AssertionError(f"{', '.join(call.targets)}: its results could not be judged "
                             f"({type(err).__name__}: {err})") from None
