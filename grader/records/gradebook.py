"""Writing to nbgrader's gradebook, the one source of truth for grades: each result as soon as
it is graded, and the course file's due dates, extensions and the late penalties.

The lessons enter the gradebook the way nbgrader puts them there: `nbgrader
generate_assignment` on the source notebooks (into a scratch release directory, so notebooks/
is not touched), which writes their notebooks, grade cells and source cells.

Each graded submission is then written as ``nbgrader autograde`` writes one, through nbgrader's
own ``Gradebook`` API, in one transaction (``Recorder``):

- the student, and the submission with its timestamp (read with the notebook it was graded
  from) and the student's extension from the course file;
- every graded cell's ``auto_score`` (0 while the submission is *held*: its source is flagged,
  see ``Result.held``) and ``needs_manual_grade`` (held or not graded, and no human has set a
  score yet); every solution cell's ``auto_comment`` (the check's diagnosis, the flags); the
  notebook's ``flagged`` mark for a held submission, and its ``late_submission_penalty``;
- an entry of the course's history table (``database.RESULTS``): the result, when, and the
  digest of the files it was graded from, so grading again never loses a result and any machine
  that reaches the gradebook rebuilds the results from it. ``grade`` skips a submission whose
  newest entry was graded from the files it has now (``--again`` grades it anyway), so an
  interrupted batch resumes where it stopped, and a notebook changed while it was being graded
  is graded again.

Beside it goes the autograded notebook the formgrader shows (``autograded``). A human's
``manual_score`` and ``extra_credit`` (set in the formgrader) are never written here: they win
over the automatic points (nbgrader's ``Grade.score``) and survive grading again. When a
submission with a manual score is graded from a changed notebook, it is marked for a human
again. A command opens the gradebook once and writes through that session; each write is made
as the database's one writer (``database.lock``), so several graders, on several machines, can
share one PostgreSQL gradebook.
"""

import tempfile
import warnings
from datetime import UTC, datetime
from pathlib import Path

from nbgrader.api import Gradebook
from sqlalchemy.exc import SAWarning

from .. import release
from ..course import Lesson
from ..grading.batch import Handin
from ..grading.results import Outcome, Result, exercise_name
from ..grading.submissions import Submission
from ..intake.manifest import Collected
from ..timestamps import as_utc
from ..workspace import Workspace, folder_digest
from . import database
from .autograded import human_note, write_autograded
from .lateness import CourseFile
from .standings import late_marked, submission_lateness


def ensure_lessons(book: Gradebook, url: str, lessons: list[str]) -> None:
    """Add every lesson (notebooks and graded cells) that the gradebook does not know yet
    (as its one writer: graders starting together add each lesson once)."""
    with database.lock(url):
        known = {a.name for a in book.assignments if a.notebooks}
        book.db.commit()  # nbgrader's own session writes the new ones
        missing = [lesson for lesson in lessons if lesson not in known]
        if missing:
            with tempfile.TemporaryDirectory() as scratch:
                release.generate(missing, Path(scratch), url)
            book.db.expire_all()


def refresh(book: Gradebook, url: str, course: CourseFile, collected: Collected) -> None:
    """Write the course file's due dates (lessons the gradebook knows) and extensions
    (submissions it holds) into the gradebook, and every late penalty as the scores stand now
    (human scores included)."""
    with database.lock(url):
        marked = late_marked(book, collected)
        for assignment in book.assignments:
            due = course.due.get(assignment.name)
            if due is not None:
                assignment.duedate = _naive(due)
            for submission in assignment.submissions:
                key = (submission.student.id, assignment.name)
                extension = course.extensions.get(key)
                if extension is not None:
                    submission.extension = extension or None
                book.db.flush()
                set_penalty(book, submission, course, key in marked)
        book.db.commit()


def _naive(value: datetime) -> datetime:
    """UTC without a zone, as nbgrader stores times."""
    return as_utc(value).replace(tzinfo=None)


def to_grade(book: Gradebook, submissions: list[Submission],
             again: bool) -> tuple[list[Submission], list[Submission]]:
    """(to grade, already graded from the files they have now), in the order given."""
    if again:
        return list(submissions), []
    in_gradebook = {(s.student.id, a.name) for a in book.assignments for s in a.submissions}
    newest = database.newest(book)

    def recorded(submission: Submission) -> bool:
        key = (submission.student, submission.lesson)
        return (key in in_gradebook and key in newest
                and newest[key]["submission"] == folder_digest(submission.folder))

    done = [s for s in submissions if recorded(s)]
    return [s for s in submissions if s not in done], done


class Recorder:
    """Writes each result to the gradebook as it comes, with the autograded notebook."""

    def __init__(self, book: Gradebook, url: str, workspace: Workspace,
                 lessons: dict[str, Lesson], course: CourseFile, collected: Collected):
        self.book, self.url, self.workspace = book, url, workspace
        self.lessons, self.course, self.collected = lessons, course, collected
        self.recorded: list[Result] = []

    def record(self, handin: Handin, result: Result) -> None:
        """Write one result: the autograded notebook, then, as the gradebook's one writer and in
        one transaction, the gradebook's rows, the late penalty and the history entry."""
        lesson = self.lessons[result.lesson]
        key = (result.student, result.lesson)
        write_autograded(self.workspace, handin, result, lesson)
        marker = key in self.collected.late
        with database.lock(self.url), warnings.catch_warnings():
            warnings.simplefilter("ignore", SAWarning)  # nbgrader's own add_submission warns
            try:
                earlier = database.newest(self.book, [key]).get(key)
                changed = earlier is not None and earlier["submission"] != handin.digest
                submission = _write_grades(self.book, result, lesson, self.course, changed,
                                           handin.timestamp)
                self.book.db.flush()
                set_penalty(self.book, submission, self.course, marker)
                database.add_entry(self.book, *key, {
                    "recorded": datetime.now(UTC).isoformat(),
                    "submission": handin.digest}, marker, result.to_json())
                self.book.db.commit()
            except BaseException:
                self.book.db.rollback()  # none of it, and the session goes on
                raise
        self.recorded.append(result)


def _write_grades(book: Gradebook, result: Result, lesson: Lesson, course: CourseFile,
                  changed: bool, timestamp: datetime | None):
    """The submission's rows as nbgrader autograde writes them (not committed); returns it."""
    verdicts = {e.grade_id: e for e in result.exercises}
    comments = solution_comments(result, lesson)
    book.update_or_create_student(result.student)
    submission = book.update_or_create_submission(result.lesson, result.student)
    submission.timestamp = _naive(timestamp) if timestamp else None
    extension = course.extensions.get((result.student, result.lesson))
    if extension is not None:
        submission.extension = extension or None
    for notebook in submission.notebooks:
        for grade in notebook.grades:
            verdict = verdicts.get(grade.name)
            if verdict is None:
                continue
            grade.auto_score = 0.0 if result.held else verdict.points
            overridden = grade.manual_score is not None
            grade.needs_manual_grade = (changed if overridden else result.needs_human)
        for comment in notebook.comments:
            comment.auto_comment = comments.get(comment.name)
        if result.held:
            notebook.flagged = True
    return submission


def set_penalty(book: Gradebook, submission, course: CourseFile, marker: bool) -> float:
    """Store the late penalty of the submission's score as it stands (nbgrader's
    ``late_submission_penalty``, on its first notebook; not committed); return it."""
    book.db.refresh(submission)  # the score, with what was just written
    late = submission_lateness(submission, marker, course)
    penalty = late.penalty(submission.score, submission.max_score)
    for index, notebook in enumerate(submission.notebooks):
        notebook.late_submission_penalty = penalty if index == 0 and penalty else None
    return penalty


def solution_comments(result: Result, lesson: Lesson) -> dict[str, str | None]:
    """The automatic comment of each solution cell (exercise ``x`` of check ``check_x``): the
    check's diagnosis when it failed, and on the first one why a human is needed."""
    names = [exercise_name(cell.grade_id) for cell in lesson.cells]
    comments: dict[str, str | None] = {}
    for exercise in result.exercises:
        if result.outcome is Outcome.GRADED and not exercise.passed:
            comments[exercise.name] = exercise.message
    why = human_note(result)
    if why and names:
        first = names[0]
        comments[first] = why + (f"\n\n{comments[first]}" if comments.get(first) else "")
    return comments
