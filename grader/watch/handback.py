"""Handing a graded submission's feedback back through nbgrader's feedback exchange.

The page goes to the workspace's ``feedback/<student>/<lesson>/<lesson>.html`` with the
submission's own ``timestamp.txt`` and ``submission_secret.txt`` (from the exchange, as collect
kept them), and nbgrader's ``ExchangeReleaseFeedback`` (``nbgrader release_feedback``'s own
code) copies it to the exchange under the hash of that secret, where only the student's
``nbgrader fetch_feedback`` finds it. A submission from an LMS folder has no secret: its page is
written, and nothing is released.

Before the lesson's due date (the student's own, extension included) the page is the early one
(``early.html.j2``): each exercise's check as the notebook runs it, and with ``before_due =
"hidden"`` whether the hidden tests passed; never the score, nor the hidden tests' inputs or
diagnosis. After it, the full page of ``make feedback``. ``Ledger`` keeps what was handed back
(which files, which view), so a restart hands back only what is missing, and the due date
passing replaces every early page with the full one.
"""

import json
import logging
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from jinja2 import FileSystemLoader
from nbgrader.auth import Authenticator
from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange import ExchangeError
from nbgrader.exchange.default import ExchangeReleaseFeedback

from ..course import COURSE_ID, Lesson
from ..grading.results import ExerciseResult, Result
from ..outputs.feedback import OUTCOME_EXPLANATIONS, feedback_html, path_part
from ..outputs.render import TEMPLATES
from ..records.standings import Standing
from ..workspace import EXCHANGE_FILES, Workspace, atomic_write
from .judging import visible_cell

EARLY = TEMPLATES.overlay(loader=FileSystemLoader(Path(__file__).parent))
SECRET = "submission_secret.txt"
FULL = "full"


class ReleaseFailed(Exception):
    """nbgrader's exchange refused the feedback (the message says why)."""


@dataclass(frozen=True)
class Row:
    """One exercise as the early page shows it."""

    name: str
    check: bool | None  # the notebook's check passed; None: not known
    message: str  # its diagnosis when it failed
    hidden: str  # "passed", "not passed", "not run", or "" (not shown, or none)


def early_rows(result: Result, lesson: Lesson, visible: dict[str, dict], view: str) -> list[Row]:
    cells = {cell.grade_id: cell for cell in lesson.cells}
    rows = []
    for exercise in result.exercises:
        cell = cells[exercise.grade_id]
        seen = visible.get(exercise.grade_id)
        check = seen["passed"] if seen else (True if exercise.passed else None)
        has_hidden = len(visible_cell(cell).calls) < len(cell.calls)
        hidden = ""
        if view == "hidden" and has_hidden and result.outcome.value == "graded":
            hidden = ("not run" if check is False else "passed" if exercise.passed
                      else "not passed")
        rows.append(Row(exercise.name, check, seen["message"] if seen and not check else "",
                        hidden))
    return rows


def early_page(result: Result, lesson: Lesson, visible: dict[str, dict], view: str,
               due: datetime | None) -> str:
    return EARLY.get_template("early.html.j2").render(
        result=result, graded=result.outcome.value == "graded",
        explanation=OUTCOME_EXPLANATIONS.get(result.outcome, ""),
        rows=early_rows(result, lesson, visible, view), view=view,
        due=due.strftime("%Y-%m-%d %H:%M UTC") if due else None)


def full_page(result: Result, standing: Standing) -> str:
    return feedback_html(result, standing)


def write_page(workspace: Workspace, result: Result, page: str) -> Path:
    """The page and its exchange files in feedback/<student>/<lesson>/; returns the folder."""
    student, lesson = path_part(result.student), path_part(result.lesson)
    folder = workspace.feedback / student / lesson
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / f"{lesson}.html", page.encode("utf-8"))
    source = workspace.submission(student, lesson)
    for name in EXCHANGE_FILES:
        if (source / name).is_file() and not (source / name).is_symlink():
            shutil.copyfile(source / name, folder / name)
        else:
            (folder / name).unlink(missing_ok=True)
    return folder


def release(workspace: Workspace, exchange_root: Path, student: str, lesson: str) -> bool:
    """Copy the page to nbgrader's feedback exchange (nbgrader's own release_feedback); False
    when the submission has no exchange secret to release it under."""
    if not (workspace.feedback / student / lesson / SECRET).is_file():
        return False
    coursedir = CourseDirectory(course_id=COURSE_ID, root=str(workspace.root),
                                feedback_directory=str(workspace.feedback),
                                student_id=student, assignment_id=lesson)
    exchange = ExchangeReleaseFeedback(coursedir=coursedir, authenticator=Authenticator(),
                                       root=str(exchange_root))
    exchange.log.setLevel(logging.WARNING)
    try:
        exchange.start()
    except ExchangeError as err:
        raise ReleaseFailed(str(err) or "nbgrader's exchange refused it") from None
    return True


class Ledger:
    """(student, lesson) -> {"digest", "view"} of each page handed back: watch/handed_back.json
    in the workspace, written whole after every change."""

    def __init__(self, workspace: Workspace):
        self.path = workspace.root / "watch" / "handed_back.json"
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            data = {}
        self.entries = {tuple(key.split("/", 1)): value for key, value in data.items()}

    def get(self, key: tuple[str, str]) -> dict | None:
        return self.entries.get(key)

    def put(self, key: tuple[str, str], digest: str, view: str) -> None:
        self.entries[key] = {"digest": digest, "view": view}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(
            {"/".join(k): v for k, v in sorted(self.entries.items())}, indent=1).encode())


class Views:
    """Each submission's visible verdicts, beside the ledger (watch/visible/<student>/<lesson>
    .json): the early page can be written again after a restart."""

    def __init__(self, workspace: Workspace):
        self.root = workspace.root / "watch" / "visible"

    def save(self, student: str, lesson: str, digest: str,
             verdicts: dict[str, ExerciseResult]) -> None:
        path = self.root / path_part(student) / f"{path_part(lesson)}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps({"digest": digest, "exercises": {
            grade_id: {"passed": v.passed, "message": v.message}
            for grade_id, v in verdicts.items()}}).encode())

    def load(self, student: str, lesson: str, digest: str) -> dict[str, dict]:
        try:
            data = json.loads((self.root / student / f"{lesson}.json").read_text())
        except (OSError, ValueError):
            return {}
        return data["exercises"] if data.get("digest") == digest else {}
