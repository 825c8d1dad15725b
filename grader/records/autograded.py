"""The autograded notebook: the submission as the formgrader shows it and grades it by hand.

``autograded/<student>/<lesson>/<lesson>.ipynb``, beside it the submission's ``timestamp.txt``
and ``submission_secret.txt`` (nbgrader's layout): the notebook that was graded, with its locked
cells as released, no outputs of the student's, and under each test cell the grader's verdict;
a test cell the student deleted is put back at the end, a duplicated one counts once. A notebook
that could not be read is the released one with a note saying why, and so is one that needs a
human (held, or not graded).

The formgrader shows this notebook as HTML in the instructor's Jupyter session, so nothing of
the student's in it may be active (``inert``): their markdown is kept as written when it
renders inert, else shown as text; raw cells are shown as text, attachments keep only raster
images, and the notebook's and cells' metadata are the released notebook's (nbgrader's grade
ids, which the formgrade template writes into the page unescaped, included).
"""

import copy
import re
from pathlib import Path

import nbformat

from ..course import RELEASE, Lesson, nbgrader_metadata
from ..grading.batch import Handin
from ..grading.results import ExerciseResult, Outcome, Result
from ..grading.submissions import Ungradable, parse_notebook, released_cells
from ..workspace import EXCHANGE_FILES, Workspace, atomic_write
from .inert import formgrader_ids, inert_cell

CELL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # nbformat's: nbconvert renders no other


def human_note(result: Result) -> str:
    """Why this submission needs a human, in a sentence and the details; "" if it does not."""
    if result.outcome is not Outcome.GRADED:
        return f"Not graded ({result.outcome.value}): {result.reason}"
    if result.held:
        return ("Held for a human: its automatic points "
                f"({result.score:g} / {result.max_score:g}) count 0 until you set manual "
                "scores.\n" + "\n".join(f"Flagged: {flag}" for flag in result.flags))
    return ""


def autograded_notebook(handin: Handin, result: Result, lesson: Lesson) -> nbformat.NotebookNode:
    """The notebook of ``handin`` as the formgrader shows it (see the module docstring)."""
    release = nbformat.read(RELEASE / lesson.name / f"{lesson.name}.ipynb", as_version=4)
    try:
        if handin.notebook is None:
            raise Ungradable(handin.missing)
        notebook = parse_notebook(handin.notebook, f"{lesson.name}.ipynb")
        unread = None
    except Ungradable as err:
        notebook, unread = release, str(err)
    released = released_cells(lesson.name)
    reserved = formgrader_ids(released.values())
    verdicts = {e.grade_id: e for e in result.exercises}
    cells, shown = [], set()
    for cell in notebook.cells:
        grade_id = nbgrader_metadata(cell).get("grade_id")
        original = released.get(grade_id)
        if original is not None and nbgrader_metadata(original).get("locked"):
            cell = original
        else:
            cell = _students_cell(cell, original, reserved)
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
    for index, cell in enumerate(cells):  # unique valid ids (the same every time)
        if not isinstance(cell.get("id"), str) or not CELL_ID.fullmatch(cell["id"]) \
                or cell["id"] in ids:
            cell["id"] = f"grader-{index}"
        ids.add(cell["id"])
    return nbformat.v4.new_notebook(cells=cells, metadata=copy.deepcopy(release.metadata))


def _students_cell(cell, original, reserved: frozenset[str]):
    """A cell of the student's, inert, with the metadata of the released cell it answers (its
    grade id), or none."""
    cell = inert_cell(cell, reserved)
    answers = original is not None and original.cell_type == cell.cell_type
    cell.metadata = copy.deepcopy(original.metadata) if answers else {}
    return cell


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


def write_autograded(workspace: Workspace, handin: Handin, result: Result,
                     lesson: Lesson) -> Path:
    """autograded/<student>/<lesson>/: the autograded notebook and the exchange's files."""
    path = workspace.autograded_file(result.student, result.lesson)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, nbformat.writes(autograded_notebook(handin, result, lesson)).encode())
    for name in EXCHANGE_FILES:
        target = path.parent / name
        if name in handin.exchange:
            atomic_write(target, handin.exchange[name])
        elif target.exists():
            target.unlink()
    return path
