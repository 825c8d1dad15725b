"""The course as the grader sees it: lessons, their graded cells and the workspace.

Everything here is read from the instructor's source notebooks in solutions/: each graded cell
of a lesson calls one check on one of the student's objects, for one or more seeds, e.g.
``check_softmax(softmax)`` and, hidden from students, ``check_softmax(softmax, seed=1)``. The
grader makes the same calls, but observes in the sandbox and judges in a trusted process.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS, RELEASE = ROOT / "solutions", ROOT / "notebooks"
CHECK_CALL = re.compile(r"^\s*(check_\w+)\((\w+)(?:,\s*seed=(\d+))?\)\s*$", re.M)
COPY_ACCURACY = "check_copy_accuracy"  # lesson 05: the trained model's held-out accuracy
COURSE_ID = "attention-step-by-step"


@dataclass(frozen=True)
class CheckCall:
    check: str  # a function of attention_course.checks
    target: str  # the student's object it checks
    seed: int


@dataclass(frozen=True)
class GradedCell:
    grade_id: str
    points: float
    calls: tuple[CheckCall, ...]  # empty for COPY_ACCURACY
    source: str  # the locked test cell as released to students (hidden tests stripped)


@dataclass(frozen=True)
class Lesson:
    name: str
    cells: tuple[GradedCell, ...]

    @property
    def max_score(self) -> float:
        return sum(cell.points for cell in self.cells)


def nbgrader_metadata(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def read_lesson(name: str) -> Lesson:
    """The graded cells of one lesson, from its source and released notebooks."""
    source = nbformat.read(SOLUTIONS / name / f"{name}.ipynb", as_version=4)
    released = nbformat.read(RELEASE / name / f"{name}.ipynb", as_version=4)
    released_sources = {nbgrader_metadata(c).get("grade_id"): c.source for c in released.cells}
    cells = []
    for cell in source.cells:
        meta = nbgrader_metadata(cell)
        if not meta.get("grade") or meta.get("solution"):
            continue
        calls = tuple(CheckCall(check, target, int(seed or 0))
                      for check, target, seed in CHECK_CALL.findall(cell.source))
        if not calls and meta["grade_id"] != COPY_ACCURACY:
            raise ValueError(f"{name}: the grader does not know how to grade cell "
                             f"{meta['grade_id']!r}: it calls no check_*(...) function")
        cells.append(GradedCell(meta["grade_id"], float(meta["points"]), calls,
                                released_sources[meta["grade_id"]]))
    return Lesson(name, tuple(cells))


def lesson_names() -> list[str]:
    return sorted(p.parent.name for p in SOLUTIONS.glob("*/*.ipynb") if p.stem == p.parent.name)


def read_course() -> dict[str, Lesson]:
    return {name: read_lesson(name) for name in lesson_names()}


@dataclass(frozen=True)
class Workspace:
    """One run of the course: submissions, results, feedback, the report and the gradebook,
    laid out as nbgrader expects (submitted/<student>/<lesson>/<lesson>.ipynb)."""

    root: Path

    @classmethod
    def default(cls) -> "Workspace":
        return cls(Path(os.environ.get("ATTENTION_COURSE_WORKSPACE", ROOT / "course")).resolve())

    @property
    def submitted(self) -> Path:
        return self.root / "submitted"

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def feedback(self) -> Path:
        return self.root / "feedback"

    @property
    def report(self) -> Path:
        return self.root / "report"

    @property
    def scratch(self) -> Path:
        return self.root / "scratch"

    @property
    def db_url(self) -> str:
        default = f"sqlite:///{self.root / 'gradebook.db'}"
        return os.environ.get("ATTENTION_COURSE_GRADEBOOK", default)

    def result_file(self, student: str, lesson: str) -> Path:
        return self.results / student / f"{lesson}.json"
