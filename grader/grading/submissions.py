"""Finding submissions, refusing broken ones, and planning what the runner executes.

A submission is ``submitted/<student>/<lesson>/<lesson>.ipynb`` (nbgrader's layout). Before
any of it runs, it is read as untrusted data: a file that is empty, not JSON, not a notebook,
of another notebook format or nbgrader metadata version, or missing (renamed) is *ungradable*,
with a reason an instructor can act on. A readable one becomes a plan for the runner: its code
cells in order, with every locked cell put back as released (as nbgrader does) and every graded
test cell replaced by a "record here" step. Test cells a student deleted are recorded at the
end; duplicated ones count once.
"""

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import nbformat

from ..course import RELEASE, Lesson, nbgrader_metadata

NBGRADER_SCHEMA_VERSION = 3


class Ungradable(Exception):
    """The submission cannot be graded; the message says why, for the instructor."""


@dataclass(frozen=True)
class Submission:
    student: str
    lesson: str
    folder: Path


def find_submissions(submitted: Path, lessons: list[str],
                     students: list[str] | None = None) -> list[Submission]:
    """Every submitted/<student>/<lesson>/ folder of a known lesson, sorted."""
    found = []
    for folder in sorted(submitted.glob("*/*/")):
        student, lesson = folder.parent.name, folder.name
        if lesson in lessons and (students is None or student in students):
            found.append(Submission(student, lesson, folder))
    return found


def notebook_in(files: Mapping[str, bytes], lesson: str) -> bytes:
    """The notebook among a submission folder's ``files`` (``folder_files``), or Ungradable if
    it is missing or renamed."""
    name = f"{lesson}.ipynb"
    if name in files:
        return files[name]
    others = sorted(path for path in files if "/" not in path and path.endswith(".ipynb"))
    if others:
        raise Ungradable(f"renamed notebook: found {', '.join(others)}, expected {name}")
    raise Ungradable(f"no notebook: {name} is missing from the submission")


def parse_notebook(raw: bytes, name: str) -> nbformat.NotebookNode:
    """The notebook in ``raw`` (the file ``name``), or Ungradable saying what is wrong."""
    path = Path(name)
    if not raw.strip():
        raise Ungradable(f"{path.name} is empty")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise Ungradable(f"{path.name} is not a text file (not UTF-8)") from None
    except json.JSONDecodeError as err:
        raise Ungradable(f"{path.name} is not valid JSON ({err.msg} at line {err.lineno}, "
                         f"column {err.colno}): was it saved completely?") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise Ungradable(f"{path.name} is JSON but not a Jupyter notebook (it has no cells)")
    if data.get("nbformat") != 4:
        raise Ungradable(f"{path.name} has notebook format version {data.get('nbformat')!r}; "
                         f"this course uses version 4")
    try:
        notebook = nbformat.from_dict(data)
        for cell in notebook.cells:
            _check_cell(cell)
    except Ungradable:
        raise
    except Exception as err:  # a cell that is not shaped like a notebook cell
        raise Ungradable(f"{path.name} has a malformed cell "
                         f"({type(err).__name__}: {err})") from None
    return notebook


def _check_cell(cell) -> None:
    if cell.get("cell_type") not in ("code", "markdown", "raw"):
        raise Ungradable(f"unknown cell type {cell.get('cell_type')!r}")
    source = cell.get("source", "")
    if isinstance(source, list):
        cell["source"] = source = "".join(source)
    if not isinstance(source, str):
        raise Ungradable("a cell's source is not text")
    meta = nbgrader_metadata(cell)
    if not isinstance(meta, dict) or not isinstance(meta.get("grade_id", ""), str):
        raise Ungradable("a cell's nbgrader metadata is malformed (its grade_id is not text): "
                         "the notebook was edited outside Jupyter")
    version = meta.get("schema_version", NBGRADER_SCHEMA_VERSION)
    if version != NBGRADER_SCHEMA_VERSION:
        raise Ungradable(f"unknown nbgrader metadata version {version!r} in cell "
                         f"{nbgrader_metadata(cell).get('grade_id', '?')!r} (this grader reads "
                         f"version {NBGRADER_SCHEMA_VERSION})")


@functools.cache  # read once per grading run, not once per submission
def released_cells(lesson: str) -> dict[str, nbformat.NotebookNode]:
    released = nbformat.read(RELEASE / lesson / f"{lesson}.ipynb", as_version=4)
    return {nbgrader_metadata(c)["grade_id"]: c for c in released.cells
            if nbgrader_metadata(c).get("grade_id")}


@functools.cache
def released_source(lesson: str) -> frozenset[str]:
    """The source of every code cell of the released notebook: what is not the student's."""
    released = nbformat.read(RELEASE / lesson / f"{lesson}.ipynb", as_version=4)
    return frozenset(cell.source for cell in released.cells if cell.cell_type == "code")


def plan(notebook: nbformat.NotebookNode, lesson: Lesson) -> list[dict]:
    """The runner's job: code cells to run and where each graded cell stood."""
    released, graded = released_cells(lesson.name), {c.grade_id: c for c in lesson.cells}
    steps, recorded = [], set()
    for cell in notebook.cells:
        grade_id = nbgrader_metadata(cell).get("grade_id")
        if grade_id in graded:
            if grade_id not in recorded:
                steps.append(_record_step(graded[grade_id]))
                recorded.add(grade_id)
            continue
        original = released.get(grade_id)
        if original is not None and nbgrader_metadata(original).get("locked"):
            cell = original  # a locked cell runs as released, whatever the student did to it
        if cell.cell_type == "code":
            steps.append({"kind": "code", "source": cell.source})
    steps += [_record_step(c) for c in lesson.cells if c.grade_id not in recorded]
    # cells after the last graded one cannot change a grade: they are not run
    last = max(i for i, step in enumerate(steps) if step["kind"] != "code")
    return steps[:last + 1]


def _record_step(cell) -> dict:
    return {"kind": "graded", "grade_id": cell.grade_id}
