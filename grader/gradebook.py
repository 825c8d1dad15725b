"""Writing points into nbgrader's gradebook, so the formgrader and `nbgrader export` see them.

The lessons enter the gradebook the way nbgrader puts them there: `nbgrader
generate_assignment` on the source notebooks (into a scratch release directory, so notebooks/
is not touched). Each result then sets the automatic score of every graded cell. A submission
that could not be graded keeps 0 points and is marked as needing manual grading.
"""

import os
import sys
import tempfile
import warnings
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from sqlalchemy.exc import SAWarning

from . import release
from .course import COURSE_ID
from .results import Result

# nbgrader's Gradebook runs `alembic` (installed next to this Python) to check the schema
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def ensure_lessons(db_url: str, lessons: list[str]) -> None:
    """Add every lesson (notebooks and graded cells) that the gradebook does not know yet."""
    with Gradebook(db_url, course_id=COURSE_ID) as gradebook:
        known = {a.name for a in gradebook.assignments if a.notebooks}
    missing = [lesson for lesson in lessons if lesson not in known]
    if missing:
        with tempfile.TemporaryDirectory() as scratch:
            for lesson in missing:
                release.generate(lesson, Path(scratch), db_url)


def record(db_url: str, results: list[Result]) -> None:
    """Set each submission's automatic scores from its result; rerunning changes nothing."""
    with Gradebook(db_url, course_id=COURSE_ID) as gradebook, warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's own add_submission warns
        for result in results:
            gradebook.update_or_create_student(result.student)
            try:
                submission = gradebook.find_submission(result.lesson, result.student)
            except MissingEntry:
                submission = gradebook.add_submission(result.lesson, result.student)
            points = {e.grade_id: 0.0 if result.held else e.points for e in result.exercises}
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    if grade.name in points:
                        grade.auto_score = points[grade.name]
                        grade.needs_manual_grade = result.needs_human
            gradebook.db.commit()


def scores(db_url: str) -> dict[tuple[str, str], dict[str, float]]:
    """(student, lesson) -> {grade_id: points} as the gradebook holds them."""
    with Gradebook(db_url, course_id=COURSE_ID) as gradebook:
        return {(s.student.id, s.assignment.name):
                {g.name: g.score for nb in s.notebooks for g in nb.grades}
                for a in gradebook.assignments for s in a.submissions}
