"""The course as the grader sees it: lessons, their graded cells and the workspace.

The lessons are the registry's (``attention_course.lessons``); what each graded cell does is
read from the instructor's source notebook in solutions/. A graded cell imports checks and calls
them on the student's objects, for one or more seeds, e.g. ``check_softmax(softmax)`` and,
hidden from students, ``check_softmax(softmax, seed=1)``. The grader makes the same calls, but
observes in the sandbox and judges in a trusted process. A graded cell is read with ``ast``:
anything else in it is an error when the lesson is read (at release, in the tests), never a
test the grader silently skips.
"""

import ast
import functools
import re
from dataclasses import dataclass

import nbformat

from attention_course import lessons
from attention_course.checks import CHECKS

from . import syntax
from .workspace import ROOT

SOLUTIONS, RELEASE = ROOT / "solutions", ROOT / "notebooks"
COURSE_ID = "attention-step-by-step"
CHECKS_MODULE = "attention_course.checks"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"  # nbgrader's solution region


class GradedCellError(ValueError):
    """A graded cell the grader cannot read: the message says where and why."""


@dataclass(frozen=True)
class CheckCall:
    check: str  # a function of attention_course.checks
    targets: tuple[str, ...]  # the names of the student's objects it checks
    seed: int


@dataclass(frozen=True)
class GradedCell:
    grade_id: str
    points: float
    calls: tuple[CheckCall, ...]
    source: str  # the locked test cell as released to students (hidden tests stripped)


@dataclass(frozen=True)
class Lesson:
    name: str
    cells: tuple[GradedCell, ...]

    @property
    def max_score(self) -> float:
        return sum(cell.points for cell in self.cells)

    @property
    def points(self) -> list[tuple[str, float]]:
        """(grade_id, points) of every graded cell, in notebook order."""
        return [(cell.grade_id, cell.points) for cell in self.cells]


def nbgrader_metadata(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def check_calls(source: str, where: str) -> tuple[CheckCall, ...]:
    """The check calls of a graded cell; GradedCellError for anything else in it."""
    try:
        statements = syntax.parse(source).body
    except SyntaxError as err:
        raise GradedCellError(f"{where}: not valid Python ({err.msg}, line {err.lineno})") from None
    calls = []
    for statement in statements:
        if (isinstance(statement, ast.ImportFrom) and statement.module == CHECKS_MODULE
                and all(alias.name in CHECKS for alias in statement.names)):
            continue
        call = _check_call(statement)
        if call is None:
            raise GradedCellError(
                f"{where}, line {statement.lineno}: the grader cannot read "
                f"`{ast.unparse(statement)[:80]}`; a graded cell may only import checks from "
                f"{CHECKS_MODULE} and call them as check_<name>(<student's names>[, seed=<int>])")
        calls.append(call)
    if not calls:
        raise GradedCellError(f"{where}: calls no check")
    return tuple(calls)


def _check_call(statement: ast.stmt) -> CheckCall | None:
    """check_x(name, ...[, seed=N]) as a CheckCall, or None if the statement is anything else."""
    call = statement.value if isinstance(statement, ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id in CHECKS and call.args
            and all(isinstance(a, ast.Name) for a in call.args)):
        return None
    seed = 0
    for keyword in call.keywords:
        value = keyword.value
        if keyword.arg != "seed" or not (isinstance(value, ast.Constant)
                                         and type(value.value) is int):
            return None
        seed = value.value
    return CheckCall(call.func.id, tuple(a.id for a in call.args), seed)


def graded_cells(name: str) -> list[GradedCell]:
    """The graded cells of one lesson's source notebook (``source`` as in solutions/), checked
    against the registry: they are exactly its practices' checks. GradedCellError if not."""
    entry = lessons.lesson(name)
    notebook = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", as_version=4)
    cells = [GradedCell(meta["grade_id"], float(meta["points"]),
                        check_calls(cell.source, f"{name}, graded cell {meta['grade_id']!r}"),
                        cell.source)
             for cell in notebook.cells
             if (meta := nbgrader_metadata(cell)).get("grade") and not meta.get("solution")]
    graded, registered = [c.grade_id for c in cells], [p.check for p in entry.practice]
    if sorted(graded) != sorted(registered):
        raise GradedCellError(f"{name}: the notebook grades {graded}, the registry "
                              f"(attention_course/lessons.py) says {registered}")
    return cells


def read_lesson(name: str) -> Lesson:
    """A lesson's graded cells, each with its test cell as released to students."""
    released = nbformat.read(RELEASE / name / f"{name}.ipynb", as_version=4)
    released_sources = {nbgrader_metadata(c).get("grade_id"): c.source for c in released.cells}
    cells = []
    for cell in graded_cells(name):
        if cell.grade_id not in released_sources:
            raise GradedCellError(f"{name}: graded cell {cell.grade_id!r} is not in the "
                                  f"released notebook: run `make release`")
        cells.append(GradedCell(cell.grade_id, cell.points, cell.calls,
                                released_sources[cell.grade_id]))
    return Lesson(name, tuple(cells))


def lesson_names() -> list[str]:
    return lessons.ids()


@functools.cache
def solution_sources(lesson: str) -> dict[str, str]:
    """Practice cell name -> the instructor's answer, as a student would have typed it (for
    inspection's copied-answer flags, and the demo class)."""
    source = nbformat.read(SOLUTIONS / lesson / f"{lesson}.ipynb", as_version=4)
    markers = re.compile(rf"^ *(?:{re.escape(BEGIN)}|{re.escape(END)})\n?", re.M)
    return {nbgrader_metadata(c)["grade_id"]: markers.sub("", c.source)
            for c in source.cells if nbgrader_metadata(c).get("solution")}
