"""Points, decided in a process that never runs student code.

The runner leaves, per submission, what the student's objects did on each check's seeded
inputs: JSON metadata and plain arrays (loaded with ``allow_pickle=False``). Here the same
checks the students run are replayed on those observations (``recording.replaying``): the same
comparisons, the same named-mistake diagnosis and the same shortcut rule, but against a
reference computed here. What happened inside the student's kernel (a patched
``torch.allclose``, a check cell that printed "ok") decides nothing.
"""

import io
import json
import zipfile

import numpy as np

from attention_course.checks import CHECKS
from attention_course.checks.framework import CheckFailed
from attention_course.checks.recording import from_arrays, replaying

from .course import CheckCall, GradedCell, Lesson
from .results import ExerciseResult

MAX_RECORD_BYTES = 64 * 2**20


class Unreadable(Exception):
    """The runner's record is missing or malformed."""


def read_record(files: dict[str, bytes]) -> tuple[dict, list]:
    """The runner's metadata and observations, checked for size and shape."""
    meta, arrays = files.get("observations.json"), files.get("observations.npz")
    if meta is None or arrays is None:
        raise Unreadable("the kernel ended without leaving its observations")
    if len(meta) + len(arrays) > MAX_RECORD_BYTES:
        raise Unreadable("the observations are implausibly large")
    try:
        data = json.loads(meta)
        with np.load(io.BytesIO(arrays), allow_pickle=False) as loaded:
            observations = from_arrays(data["observations"], loaded)
        entries = list(data["entries"])
    except (ValueError, KeyError, TypeError, OSError, zipfile.BadZipFile) as err:
        raise Unreadable(f"the observations are malformed ({type(err).__name__})") from None
    return data, [(entry, observations[entry["first"]:entry["first"] + entry["count"]])
                  for entry in entries]


def judge_lesson(lesson: Lesson, recorded: list) -> list[ExerciseResult]:
    """One result per graded cell of ``lesson``, from the runner's record."""
    return [judge_cell(cell, [(e, o) for e, o in recorded if e.get("grade_id") == cell.grade_id])
            for cell in lesson.cells]


def judge_cell(cell: GradedCell, recorded: list) -> ExerciseResult:
    try:
        for call in cell.calls:
            _judge_call(call, recorded)
    except CheckFailed as failure:
        return exercise_result(cell, False, str(failure), failure.mistake)
    except AssertionError as failure:
        return exercise_result(cell, False, str(failure))
    return exercise_result(cell, True, f"ok: {cell.grade_id.removeprefix('check_')} passed")


def exercise_result(cell: GradedCell, passed: bool, message: str,
                    mistake: str | None = None) -> ExerciseResult:
    return ExerciseResult(cell.grade_id, cell.points if passed else 0.0, cell.points, passed,
                          message, mistake)


def _judge_call(call: CheckCall, recorded: list) -> None:
    """Replay one check call on what the runner recorded for it: the student's objects are
    never needed (each check builds what is the student's only when observing)."""
    what = ", ".join(call.targets)
    found = [(e, o) for e, o in recorded
             if (e.get("check"), e.get("targets"), e.get("seed"))
             == (call.check, list(call.targets), call.seed)]
    if not found:
        raise AssertionError(f"{what}: the grader could not observe it (the kernel never "
                             f"reached this check)")
    entry, observations = found[0]
    if entry.get("error"):
        raise AssertionError(f"{what}: {entry['error']}")
    try:
        with replaying(observations):
            CHECKS[call.check](*(None for _ in call.targets), seed=call.seed)
    except AssertionError:
        raise
    except Exception as err:  # recorded values the checks cannot even compare
        raise AssertionError(f"{what}: its results could not be judged "
                             f"({type(err).__name__}: {err})") from None
