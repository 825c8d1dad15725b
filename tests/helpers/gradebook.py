"""The gradebook seen from a test: each function opens it once, as a command does, and what a
human does in the formgrader (set a score) done the way the formgrader does it."""

import tempfile
from pathlib import Path

import nbformat
from nbgrader.api import MissingEntry

from grader.course import Lesson, lesson_names, read_lesson
from grader.grading.batch import Handin, grade_batch
from grader.grading.results import Result
from grader.grading.submissions import Submission
from grader.intake.manifest import Collected
from grader.records import database, gradebook
from grader.records import standings as reading
from grader.records.lateness import CourseFile
from grader.sandbox.client import Limits
from grader.workspace import Workspace

Where = Workspace | str  # a workspace's gradebook, or a database URL


def book(where: Where):
    return database.gradebook(where if isinstance(where, str) else where.db_url)


def history(where: Where, student: str, lesson: str) -> list[dict]:
    with book(where) as opened:
        return reading.history(opened, student, lesson)


def scores(where: Where) -> dict[tuple[str, str], dict[str, float]]:
    """(student, lesson) -> {grade_id: points} as the gradebook holds them."""
    with book(where) as opened:
        return {(s.student.id, s.assignment.name):
                {g.name: g.score for nb in s.notebooks for g in nb.grades}
                for a in opened.assignments for s in a.submissions}


def overrides(where: Where) -> list[tuple]:
    with book(where) as opened:
        return reading.overrides(opened)


def standings(workspace: Workspace, course: CourseFile | None = None) -> reading.Standings:
    with book(workspace) as opened:
        return reading.standings(opened, course or CourseFile(), Collected.read(workspace))


def results(where: Where) -> list[Result]:
    """Every result the gradebook holds, by student and lesson."""
    with book(where) as opened:
        held = {(s.student.id, a.name) for a in opened.assignments for s in a.submissions}
        return reading.recorded_results(opened, held)


def recorded_results(where: Where, keys) -> list[Result]:
    with book(where) as opened:
        return reading.recorded_results(opened, keys)


def to_grade(workspace: Workspace, submissions: list[Submission], again: bool = False):
    with book(workspace) as opened:
        return gradebook.to_grade(opened, submissions, again)


def ensure_lessons(where: Where, lessons: list[str]) -> None:
    url = where if isinstance(where, str) else where.db_url
    with database.gradebook(url) as opened:
        gradebook.ensure_lessons(opened, url, lessons)


def record(workspace: Workspace, graded: list[Result], lessons: dict[str, Lesson],
           course: CourseFile | None = None) -> None:
    """Write results to the gradebook as ``grade`` does, each with its submission folder's
    files where there is one."""
    with book(workspace) as opened:
        recorder = gradebook.Recorder(opened, workspace.db_url, workspace, lessons,
                                      course or CourseFile(), Collected.read(workspace))
        for result in graded:
            folder = workspace.submission(result.student, result.lesson)
            handin = Handin.read(Submission(result.student, result.lesson, folder))
            recorder.record(handin, result)


def set_manual_score(workspace: Workspace, student: str, lesson: str, grade_id: str,
                     manual_score: float | None, extra_credit: float | None = None) -> None:
    """What the formgrader does when a human grades a cell (nbgrader's GradeHandler.put)."""
    with book(workspace) as opened:
        try:
            grade = opened.find_grade(grade_id, lesson, lesson, student)
        except MissingEntry:
            raise KeyError(f"no grade {grade_id!r} for {student}, {lesson}") from None
        grade.manual_score = manual_score
        grade.extra_credit = extra_credit
        grade.needs_manual_grade = manual_score is None and grade.auto_score is None
        opened.db.commit()


def grade_cell_ids(workspace: Workspace, student: str, lesson: str) -> dict[str, str]:
    """{grade_id: the gradebook's id of that grade} of one submission (the formgrader's
    /formgrader/api/grade/<id>)."""
    with book(workspace) as opened:
        submission = opened.find_submission(lesson, student)
        return {g.name: g.id for nb in submission.notebooks for g in nb.grades}


def submission_notebook_id(workspace: Workspace, student: str, lesson: str) -> str:
    """The gradebook's id of a submission's notebook (the formgrader's
    /formgrader/submissions/<id>/, where it is graded by hand)."""
    with book(workspace) as opened:
        return opened.find_submission_notebook(lesson, lesson, student).id


def read_course() -> dict[str, Lesson]:
    return {name: read_lesson(name) for name in lesson_names()}


def grade_notebooks(lesson_id: str, notebooks: dict) -> dict[str, Result]:
    """{student: notebook} of one lesson graded here (sandboxed), in a scratch workspace:
    {student: Result}."""
    lesson = read_lesson(lesson_id)
    with tempfile.TemporaryDirectory() as scratch:
        workspace = Workspace(Path(scratch) / "workspace")
        submissions = []
        for student, notebook in notebooks.items():
            folder = workspace.submitted / student / lesson_id
            folder.mkdir(parents=True)
            nbformat.write(notebook, folder / f"{lesson_id}.ipynb")
            submissions.append(Submission(student, lesson_id, folder))
        return {r.student: r for r in grade_here(submissions, {lesson_id: lesson}, workspace)}


def grade_here(submissions: list[Submission], lessons: dict[str, Lesson],
               workspace: Workspace, workers: int = 1, sandboxed: bool = True) -> list[Result]:
    """The results of grading ``submissions`` on this machine, in the order given (nothing is
    written to the gradebook). One runner unless asked: a test grading a few notebooks would
    pay more for starting a second (torch imported, 1.7 CPU-s) than it gains."""
    graded = {(handin.student, handin.lesson): done.result for handin, done in
              grade_batch(submissions, lessons, workspace, workers, Limits(), sandboxed)}
    return [graded[s.student, s.lesson] for s in submissions]
