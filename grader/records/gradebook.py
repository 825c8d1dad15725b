"""nbgrader's gradebook, the one source of truth for grades: written per submission, read back by
the CSV, the report and the feedback, and shown by the formgrader.

The lessons enter the gradebook the way nbgrader puts them there: `nbgrader
generate_assignment` on the source notebooks (into a scratch release directory, so notebooks/
is not touched), which writes their notebooks, grade cells and source cells.

Each graded submission is then written as ``nbgrader autograde`` writes one, through nbgrader's
own ``Gradebook`` API, as soon as it is graded (``Recorder``, the batch's ``on_result``):

- the student, and the submission with its timestamp (the ``timestamp.txt`` collect wrote, as
  nbgrader reads it) and the student's extension from the course file;
- every graded cell's ``auto_score`` (0 while the submission is *held*: its source is flagged,
  see ``Result.held``) and ``needs_manual_grade`` (held or not graded, and no human has set a
  score yet); every solution cell's ``auto_comment`` (the check's diagnosis, the flags); the
  notebook's ``flagged`` mark for a held submission, and its ``late_submission_penalty``;
- the autograded notebook, ``autograded/<student>/<lesson>/<lesson>.ipynb``: the submission
  with its locked cells as released, no outputs of the student's, and under each test cell the
  grader's verdict (the formgrader shows it and grades from it), with ``timestamp.txt`` beside it.

A human's ``manual_score`` and ``extra_credit`` (set in the formgrader) are never written here:
they win over the automatic points (nbgrader's ``Grade.score``) and survive grading again. A
manual score releases a held submission. When a submission with a manual score is graded from
a changed notebook, it is marked for a human again.

History: every result written to the gradebook is also kept, in the same transaction, in the
course's own table of the gradebook's database (``database.RESULTS``), with the time and a
digest of the submission folder it was graded from, so grading again never loses a result and
any machine that reaches the gradebook rebuilds the results from it (``report``, ``feedback``,
``history``). The newest entry says what the gradebook holds: ``grade`` skips a submission
whose newest entry was graded from the same files (``--again`` grades it anyway), so an
interrupted batch resumes where it stopped. results/ keeps each result's JSON as grading's
output; nothing reads it back (except a result graded before the table existed).

The gradebook is written one writer at a time (``database.lock``), so several graders, on
several machines, can share one PostgreSQL gradebook.
"""

import copy
import hashlib
import json
import os
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from sqlalchemy.exc import SAWarning

from .. import release
from ..course import RELEASE, Lesson, nbgrader_metadata
from ..grading.results import ExerciseResult, Outcome, Result
from ..grading.submissions import Submission, Ungradable, read_notebook, released_cells
from ..intake.manifest import Collected
from ..timestamps import as_utc, read_timestamp
from ..workspace import Workspace
from . import database
from .lateness import CourseFile, Lateness, lateness

# nbgrader's Gradebook runs `alembic` (installed next to this Python) to check the schema
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")


def ensure_lessons(db_url: str, lessons: list[str]) -> None:
    """Add every lesson (notebooks and graded cells) that the gradebook does not know yet
    (as its one writer: graders starting together add each lesson once)."""
    with database.lock(db_url):
        with database.gradebook(db_url) as gradebook:
            known = {a.name for a in gradebook.assignments if a.notebooks}
        missing = [lesson for lesson in lessons if lesson not in known]
        if missing:
            with tempfile.TemporaryDirectory() as scratch:
                release.generate(missing, Path(scratch), db_url)


def apply_course(db_url: str, course: CourseFile) -> None:
    """Write the course file's due dates (lessons the gradebook knows) and extensions
    (submissions it holds) into the gradebook."""
    with database.lock(db_url), database.gradebook(db_url) as gradebook:
        for assignment in gradebook.assignments:
            due = course.due.get(assignment.name)
            if due is not None:
                assignment.duedate = _naive(due)
            for submission in assignment.submissions:
                extension = course.extensions.get((submission.student.id, assignment.name))
                if extension is not None:
                    submission.extension = extension or None
        gradebook.db.commit()


def _naive(value: datetime) -> datetime:
    """UTC without a zone, as nbgrader stores times."""
    return as_utc(value).replace(tzinfo=None)


# -- the submission folder and the history --------------------------------------------------------

def digest(folder: Path) -> str:
    """What the submission is: a hash of every file in its folder (names and bytes)."""
    sha = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file() and not p.is_symlink()):
        if path.name.startswith("."):  # collect's temporary files
            continue
        sha.update(str(path.relative_to(folder)).encode() + b"\0")
        sha.update(hashlib.sha256(path.read_bytes()).digest())
    return sha.hexdigest()


def legacy_history_dir(workspace: Workspace, student: str, lesson: str) -> Path:
    """Where the history was kept before it moved into the gradebook's database."""
    return workspace.results / student / f"{lesson}.history"


def history(workspace: Workspace, student: str, lesson: str) -> list[dict]:
    """Every result this submission had in the gradebook, oldest first: {"recorded" (UTC, ISO
    8601), "submission" (digest of the folder it was graded from, or None), "result",
    "lms_late"}."""
    with database.gradebook(workspace.db_url) as gradebook:
        return database.entries(gradebook, student, lesson)


def _legacy_entries(workspace: Workspace, student: str, lesson: str) -> list[dict]:
    """A result graded before the history was in the database: its history files, else its
    result file (timed by the file), oldest first."""
    found = []
    for path in sorted(legacy_history_dir(workspace, student, lesson).glob("*.json")):
        try:
            found.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    path = workspace.result_file(student, lesson)
    if not found and path.is_file():
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        recorded = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
        found.append({"recorded": recorded.isoformat(), "submission": None, "result": result})
    return found


def keep_earlier_results(workspace: Workspace, submissions: list[Submission]) -> None:
    """Before grading: a result in the gradebook that has no history in its database yet
    (graded before the history was kept there) gets its history from the files results/ held,
    so grading again does not lose it. (A result file an interrupted batch wrote but did not
    get into the gradebook is not one.)"""
    with database.lock(workspace.db_url), database.gradebook(workspace.db_url) as gradebook:
        in_gradebook = set(_scores(gradebook))
        known = database.newest(gradebook)
        for submission in submissions:
            key = (submission.student, submission.lesson)
            if key not in in_gradebook or key in known:
                continue
            for entry in _legacy_entries(workspace, *key):
                database.add_entry(gradebook, *key, entry, False, json.dumps(entry["result"]))
        gradebook.db.commit()


def recorded_results(workspace: Workspace, keys) -> list[Result]:
    """The result the gradebook holds for each (student, lesson) of ``keys``: the newest entry
    of its history (else the local files of one graded before the history was kept)."""
    keys = sorted(keys)
    with database.gradebook(workspace.db_url) as gradebook:
        newest = database.newest(gradebook, keys)
    results = []
    for key in keys:
        entries = [newest[key]] if key in newest else _legacy_entries(workspace, *key)
        try:
            if entries:
                results.append(Result.from_dict(entries[-1]["result"]))
        except (KeyError, TypeError, ValueError):
            continue
    return results


def is_recorded(submission: Submission, newest: dict, in_gradebook: set) -> bool:
    """True if the gradebook holds this submission graded from the files it has now
    (``newest``: database.newest's entries)."""
    key = (submission.student, submission.lesson)
    return (key in in_gradebook and key in newest
            and newest[key]["submission"] == digest(submission.folder))


def to_grade(workspace: Workspace, submissions: list[Submission],
             again: bool) -> tuple[list[Submission], list[Submission]]:
    """(to grade, already graded from the same files), in the order given."""
    if again:
        return list(submissions), []
    keep_earlier_results(workspace, submissions)  # a workspace from before: into the database
    with database.gradebook(workspace.db_url) as gradebook:
        in_gradebook, newest = set(_scores(gradebook)), database.newest(gradebook)
    done = [s for s in submissions if is_recorded(s, newest, in_gradebook)]
    return [s for s in submissions if s not in done], done


# -- writing a result -------------------------------------------------------------------------

def autograded_file(workspace: Workspace, student: str, lesson: str) -> Path:
    return workspace.root / "autograded" / student / lesson / f"{lesson}.ipynb"


class Recorder:
    """Writes each result to the gradebook as it comes (``grade_batch``'s ``on_result``, called
    from the batch's threads, one at a time here)."""

    def __init__(self, workspace: Workspace, lessons: dict[str, Lesson],
                 course: CourseFile | None = None):
        self.workspace, self.lessons = workspace, lessons
        self.course = course or CourseFile()
        self.collected = Collected.read(workspace)
        self.lock = threading.Lock()
        self.recorded: list[Result] = []
        self.stopped = False

    def __call__(self, result: Result) -> None:
        with self.lock:
            if self.stopped:
                return
            record_one(self.workspace, result, self.lessons[result.lesson], self.course,
                       self.collected)
            self.recorded.append(result)

    def stop(self) -> None:
        """Record nothing more: once a batch is interrupted, a submission still running ends
        because its runner is stopped, and that is no grade (it is graded on resuming)."""
        with self.lock:
            self.stopped = True


def record(workspace: Workspace, results: list[Result], lessons: dict[str, Lesson],
           course: CourseFile | None = None) -> None:
    """Write every result to the gradebook (what ``Recorder`` does, for a list)."""
    recorder = Recorder(workspace, lessons, course)
    for result in results:
        recorder(result)


def record_one(workspace: Workspace, result: Result, lesson: Lesson, course: CourseFile,
               collected: Collected) -> None:
    """Write one result: the autograded notebook, then, as the gradebook's one writer and in
    one transaction, the gradebook's rows and the history entry; then the late penalty."""
    folder = workspace.submitted / result.student / result.lesson
    submitted = digest(folder) if folder.is_dir() else None
    key = (result.student, result.lesson)
    write_autograded(workspace, result, lesson, folder)
    entry = {"recorded": datetime.now(timezone.utc).isoformat(), "submission": submitted}
    with database.lock(workspace.db_url), database.gradebook(workspace.db_url) as gradebook, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's own add_submission warns
        earlier = database.entries(gradebook, *key)
        changed = bool(earlier) and earlier[-1]["submission"] != submitted
        submission = _write_grades(gradebook, result, lesson, course, changed,
                                   read_timestamp(folder))
        database.add_entry(gradebook, *key, entry, key in collected.late, result.to_json())
        gradebook.db.commit()
        set_penalty(gradebook, submission, course, key in collected.late)


def _write_grades(gradebook: Gradebook, result: Result, lesson: Lesson, course: CourseFile,
                  changed: bool, timestamp: datetime | None):
    """The submission's rows as nbgrader autograde writes them (not committed); returns it."""
    verdicts = {e.grade_id: e for e in result.exercises}
    comments = solution_comments(result, lesson)
    gradebook.update_or_create_student(result.student)
    submission = gradebook.update_or_create_submission(result.lesson, result.student)
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


def set_penalty(gradebook: Gradebook, submission, course: CourseFile, marker: bool,
                commit: bool = True) -> float:
    """Store the late penalty of the submission's score as it stands (nbgrader's
    ``late_submission_penalty``, on its notebook); return it."""
    if commit:
        gradebook.db.refresh(submission)  # the score, with the grades just written
    late = lateness(submission.assignment.duedate, submission.extension, submission.timestamp,
                    marker, course.late)
    penalty = late.penalty(submission.score, submission.max_score)
    for index, notebook in enumerate(submission.notebooks):
        notebook.late_submission_penalty = penalty if index == 0 and penalty else None
    if commit:
        gradebook.db.commit()
    return penalty


def solution_comments(result: Result, lesson: Lesson) -> dict[str, str | None]:
    """The automatic comment of each solution cell (exercise ``x`` of check ``check_x``): the
    check's diagnosis when it failed, and on the first one why a human is needed."""
    names = [cell.grade_id.removeprefix("check_") for cell in lesson.cells]
    comments: dict[str, str | None] = {}
    for exercise in result.exercises:
        if result.outcome is Outcome.GRADED and not exercise.passed:
            comments[exercise.name] = exercise.message
    why = human_note(result)
    if why and names:
        first = names[0]
        comments[first] = why + (f"\n\n{comments[first]}" if comments.get(first) else "")
    return comments


def human_note(result: Result) -> str:
    """Why this submission needs a human, in a sentence and the details; "" if it does not."""
    if result.outcome is not Outcome.GRADED:
        return f"Not graded ({result.outcome.value}): {result.reason}"
    if result.held:
        return ("Held for a human: its automatic points "
                f"({result.score:g} / {result.max_score:g}) count 0 until you set manual "
                "scores.\n" + "\n".join(f"Flagged: {flag}" for flag in result.flags))
    return ""


# -- the autograded notebook --------------------------------------------------------------------

def autograded_notebook(folder: Path, result: Result, lesson: Lesson) -> nbformat.NotebookNode:
    """The submission as the formgrader shows it: locked cells as released, no outputs of the
    student's, the grader's verdict under each test cell (a test cell the student deleted is
    put back at the end); a notebook that could not be read is the released one with a note."""
    try:
        notebook = read_notebook(Submission(result.student, result.lesson, folder))
        unread = None
    except Ungradable as err:
        notebook = nbformat.read(RELEASE / lesson.name / f"{lesson.name}.ipynb", as_version=4)
        unread = str(err)
    released = released_cells(lesson.name)
    verdicts = {e.grade_id: e for e in result.exercises}
    cells, shown = [], set()
    for cell in notebook.cells:
        grade_id = nbgrader_metadata(cell).get("grade_id")
        original = released.get(grade_id)
        if original is not None and nbgrader_metadata(original).get("locked"):
            cell = original
        if grade_id in verdicts:
            if grade_id in shown:
                continue  # a duplicated test cell counts once
            shown.add(grade_id)
        cells.append(_with_verdict(cell, verdicts.get(grade_id), result))
    cells += [_with_verdict(released[g], verdicts[g], result)
              for g in verdicts if g not in shown and g in released]
    note = human_note(result)
    if unread and result.outcome is Outcome.GRADED:
        note = f"The submitted notebook could not be read: {unread}"
    if note:
        cells.insert(0, nbformat.v4.new_markdown_cell(_note_markdown(note), id="grader-note"))
    ids = set()
    for index, cell in enumerate(cells):  # unique ids (the same every time)
        if not isinstance(cell.get("id"), str) or cell["id"] in ids:
            cell["id"] = f"grader-{index}"
        ids.add(cell["id"])
    out = copy.deepcopy(notebook)
    out.nbformat, out.nbformat_minor = 4, max(5, out.get("nbformat_minor", 5))
    out.cells = cells
    return out


def _with_verdict(cell, verdict: ExerciseResult | None, result: Result):
    cell = copy.deepcopy(cell)
    if cell.cell_type == "code":
        cell.execution_count = None
        cell.outputs = [] if verdict is None else [
            nbformat.v4.new_output("stream", name="stdout", text=verdict_text(verdict, result))]
    return cell


def verdict_text(verdict: ExerciseResult, result: Result) -> str:
    """What the grader found at one test cell, as its output in the autograded notebook."""
    points = f"{verdict.points:g} / {verdict.max_points:g} points"
    if result.outcome is not Outcome.GRADED:
        return f"[grader] not graded ({result.outcome.value}): {result.reason}\n"
    held = " (held for a human: counts 0 until you set a manual score)" if result.held else ""
    if verdict.passed:
        return f"[grader] passed: {points}{held}\n"
    return f"[grader] failed: {points}{held}\n{verdict.message}\n"


def _note_markdown(text: str) -> str:
    """A note for the grader as markdown that shows the text as written (in a code block)."""
    first, _, rest = text.partition("\n")
    fence = "~~~~"
    body = f"{first}\n{rest}".replace(fence, "~ ~ ~ ~").strip("\n")
    return f"**For the grader** (written by the course's grader):\n\n{fence}text\n{body}\n{fence}"


def write_autograded(workspace: Workspace, result: Result, lesson: Lesson, folder: Path) -> Path:
    """autograded/<student>/<lesson>/: the autograded notebook and the exchange's files."""
    path = autograded_file(workspace, result.student, result.lesson)
    path.parent.mkdir(parents=True, exist_ok=True)
    notebook = autograded_notebook(folder, result, lesson)
    _atomic_write(path, nbformat.writes(notebook).encode("utf-8"))
    for name in EXCHANGE_FILES:
        source, target = folder / name, path.parent / name
        if source.is_file() and not source.is_symlink():
            _atomic_write(target, source.read_bytes())
        elif target.exists():
            target.unlink()
    return path


def _atomic_write(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.writing")
    temporary.write_bytes(data)
    os.replace(temporary, path)


# -- reading the gradebook ----------------------------------------------------------------------

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


def standings(workspace: Workspace, course: CourseFile | None = None,
              collected: Collected | None = None) -> dict[tuple[str, str], Standing]:
    """(student, lesson) -> Standing, for every submission in the gradebook."""
    course = course or CourseFile()
    collected = collected or Collected.read(workspace)
    found = {}
    with database.gradebook(workspace.db_url) as gradebook:
        marked = late_marked(gradebook, collected)
        for assignment in gradebook.assignments:
            for submission in assignment.submissions:
                key = (submission.student.id, assignment.name)
                cells = {g.name: CellGrade(g.auto_score, g.manual_score, g.extra_credit,
                                           float(g.score), float(g.max_score))
                         for nb in submission.notebooks for g in nb.grades}
                late = lateness(assignment.duedate, submission.extension, submission.timestamp,
                                key in marked, course.late)
                score, most = float(submission.score), float(submission.max_score)
                found[key] = Standing(key[0], key[1], score, most, cells,
                                      bool(submission.needs_manual_grade), late,
                                      late.penalty(score, most))
    return found


def late_marked(gradebook: Gradebook, collected: Collected) -> set[tuple[str, str]]:
    """(student, lesson) the LMS marked late without a time: as collect's manifest says here,
    and as it said where each submission was graded (kept in the gradebook)."""
    return set(collected.late) | database.late_markers(gradebook)


def refresh(workspace: Workspace, course: CourseFile) -> None:
    """Bring the gradebook up to date with the course file (due dates, extensions) and the
    scores as they stand (human scores included): every late penalty is computed again."""
    apply_course(workspace.db_url, course)
    with database.lock(workspace.db_url), database.gradebook(workspace.db_url) as gradebook:
        marked = late_marked(gradebook, Collected.read(workspace))
        for assignment in gradebook.assignments:
            for submission in assignment.submissions:
                set_penalty(gradebook, submission, course,
                            (submission.student.id, assignment.name) in marked, commit=False)
        gradebook.db.commit()


def scores(db_url: str) -> dict[tuple[str, str], dict[str, float]]:
    """(student, lesson) -> {grade_id: points} as the gradebook holds them."""
    with database.gradebook(db_url) as gradebook:
        return _scores(gradebook)


def _scores(gradebook: Gradebook) -> dict[tuple[str, str], dict[str, float]]:
    return {(s.student.id, s.assignment.name):
            {g.name: g.score for nb in s.notebooks for g in nb.grades}
            for a in gradebook.assignments for s in a.submissions}


def overrides(db_url: str) -> list[tuple[str, str, str, float | None, float | None]]:
    """(student, lesson, grade_id, manual_score, extra_credit) of every cell a human graded."""
    with database.gradebook(db_url) as gradebook:
        return sorted((s.student.id, a.name, g.name, g.manual_score, g.extra_credit)
                      for a in gradebook.assignments for s in a.submissions
                      for nb in s.notebooks for g in nb.grades
                      if g.manual_score is not None or g.extra_credit)


def grade_cell_ids(workspace: Workspace, student: str, lesson: str) -> dict[str, str]:
    """{grade_id: the gradebook's id of that grade} of one submission (the formgrader's
    /formgrader/api/grade/<id>)."""
    with database.gradebook(workspace.db_url) as gradebook:
        submission = gradebook.find_submission(lesson, student)
        return {g.name: g.id for nb in submission.notebooks for g in nb.grades}


def submission_notebook_id(workspace: Workspace, student: str, lesson: str) -> str:
    """The gradebook's id of a submission's notebook (the formgrader's
    /formgrader/submissions/<id>/, where it is graded by hand)."""
    with database.gradebook(workspace.db_url) as gradebook:
        return gradebook.find_submission_notebook(lesson, lesson, student).id


def set_manual_score(workspace: Workspace, student: str, lesson: str, grade_id: str,
                     manual_score: float | None, extra_credit: float | None = None) -> None:
    """What the formgrader does when a human grades a cell (nbgrader's GradeHandler.put)."""
    with database.gradebook(workspace.db_url) as gradebook:
        try:
            grade = gradebook.find_grade(grade_id, lesson, lesson, student)
        except MissingEntry:
            raise KeyError(f"no grade {grade_id!r} for {student}, {lesson}") from None
        grade.manual_score = manual_score
        grade.extra_credit = extra_credit
        grade.needs_manual_grade = manual_score is None and grade.auto_score is None
        gradebook.db.commit()

