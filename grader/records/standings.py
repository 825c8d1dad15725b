"""Reading the gradebook: what each submission counts with, the results it was graded with,
its history and the scores a human set. Nothing here writes.

A submission counts with nbgrader's score (a score a human set in the formgrader wins over the
automatic points, and releases a held submission) less its late penalty, computed from the
course's late policy and how late the gradebook says it was (nbgrader's due date of the
submission, its extension included, and its time).
"""

from dataclasses import dataclass, field
from datetime import datetime

from nbgrader.api import Gradebook

from ..grading.results import Result
from ..intake.manifest import Collected
from ..timestamps import as_utc
from . import database
from .lateness import CourseFile, Lateness, lateness


@dataclass(frozen=True)
class CellGrade:
    auto: float | None
    manual: float | None
    extra_credit: float | None
    score: float  # nbgrader's: the manual score if set, else the automatic one; + extra credit
    max_score: float


@dataclass(frozen=True)
class Standing:
    """One submission as the gradebook holds it, and what it counts with."""

    student: str
    lesson: str
    score: float  # nbgrader's score: human scores win
    max_score: float
    cells: dict[str, CellGrade] = field(default_factory=dict)
    needs_manual_grade: bool = False
    lateness: Lateness = Lateness(None, None)
    penalty: float = 0.0

    @property
    def overridden(self) -> bool:
        """A human set a score or extra credit on some cell."""
        return any(c.manual is not None or c.extra_credit for c in self.cells.values())

    @property
    def final(self) -> float:
        """What the lesson counts with: the score less the late penalty."""
        return round(max(0.0, self.score - self.penalty), 4)

    @property
    def timestamp(self) -> datetime | None:
        return self.lateness.submitted


Standings = dict[tuple[str, str], Standing]


def late_marked(book: Gradebook, collected: Collected) -> set[tuple[str, str]]:
    """(student, lesson) the LMS marked late without a time: as collect's manifest says here,
    and as it said where each submission was graded (kept in the gradebook)."""
    return set(collected.late) | database.late_markers(book)


def submission_lateness(submission, marked: bool, course: CourseFile) -> Lateness:
    """How late a submission of nbgrader's gradebook is, under the course's policy."""
    return lateness(submission.duedate, submission.timestamp, marked, course.late)


def standings(book: Gradebook, course: CourseFile, collected: Collected) -> Standings:
    """(student, lesson) -> Standing, for every submission in the gradebook."""
    marked = late_marked(book, collected)
    found = {}
    for assignment in book.assignments:
        for submission in assignment.submissions:
            key = (submission.student.id, assignment.name)
            cells = {g.name: CellGrade(g.auto_score, g.manual_score, g.extra_credit,
                                       float(g.score), float(g.max_score))
                     for nb in submission.notebooks for g in nb.grades}
            late = submission_lateness(submission, key in marked, course)
            score, most = float(submission.score), float(submission.max_score)
            found[key] = Standing(key[0], key[1], score, most, cells,
                                  bool(submission.needs_manual_grade), late,
                                  late.penalty(score, most))
    return found


def out_of_date(book: Gradebook, course: CourseFile, found: Standings) -> list[str]:
    """What of the course file, and of the penalties as they stand, the gradebook does not hold
    yet (``refresh`` writes it), in words; [] when it holds all of it."""
    stale = []
    for assignment in book.assignments:
        due = course.due.get(assignment.name)
        if due is not None and as_utc(assignment.duedate) != due:
            stale.append(f"the due date of {assignment.name}")
        for submission in assignment.submissions:
            key = (submission.student.id, assignment.name)
            extension = course.extensions.get(key)
            if extension is not None and submission.extension != (extension or None):
                stale.append(f"the extension of {key[0]} for {key[1]}")
            penalty = found[key].penalty if key in found else 0.0
            stored = sum(nb.late_submission_penalty or 0.0 for nb in submission.notebooks)
            if abs(stored - penalty) > 1e-9:
                stale.append(f"the late penalty of {key[0]} for {key[1]}")
    return stale


def recorded_results(book: Gradebook, keys) -> list[Result]:
    """The result the gradebook holds for each (student, lesson) of ``keys``: the newest entry
    of its history."""
    results = []
    for entry in database.newest(book, sorted(keys)).values():
        try:
            results.append(Result.from_dict(entry["result"]))
        except (KeyError, TypeError, ValueError):
            continue
    return results


def history(book: Gradebook, student: str, lesson: str) -> list[dict]:
    """Every result this submission had in the gradebook, oldest first: {"recorded" (UTC, ISO
    8601), "submission" (digest of the files it was graded from, or None), "result",
    "lms_late"}."""
    return database.entries(book, student, lesson)


def overrides(book: Gradebook) -> list[tuple[str, str, str, float | None, float | None]]:
    """(student, lesson, grade_id, manual_score, extra_credit) of every cell a human graded."""
    return sorted((s.student.id, a.name, g.name, g.manual_score, g.extra_credit)
                  for a in book.assignments for s in a.submissions
                  for nb in s.notebooks for g in nb.grades
                  if g.manual_score is not None or g.extra_credit)
