"""Which lesson a notebook is: read from its content, never from its file name.

It is the course lesson whose released nbgrader cells (their grade_ids) the notebook holds, so
``Copy of ...``, ``(1)`` and an LMS's renaming do not matter. Only a file that is not a readable
notebook (empty, cut short, not JSON), or a notebook without nbgrader cells, takes its lesson
from ``--lesson`` or a lesson name in its file name, so that grading reports it as ungradable
rather than losing the student.
"""

import functools
import json
from dataclasses import dataclass

from ..course import lesson_names
from ..grading.submissions import released_cells


@functools.cache
def lesson_cells() -> dict[str, frozenset[str]]:
    """Each lesson's released nbgrader grade_ids."""
    return {lesson: frozenset(released_cells(lesson)) for lesson in lesson_names()}


@dataclass
class Content:
    lesson: str | None
    readable: bool  # a notebook (JSON with a list of cells)
    graded: bool = True  # it has nbgrader cells
    problem: str | None = None  # why the content names no lesson
    note: str | None = None


def lesson_of(data: bytes) -> Content:
    """The lesson a notebook's nbgrader cells belong to."""
    if not data.strip():
        return Content(None, False, False, "the file is empty")
    try:
        notebook = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return Content(None, False, False, "not a text file")
    except json.JSONDecodeError as err:
        return Content(None, False, False, f"not valid JSON ({err.msg} at line {err.lineno})")
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        return Content(None, False, False, "JSON, but not a notebook")
    ids = set()
    for cell in cells:
        try:
            grade_id = cell["metadata"]["nbgrader"]["grade_id"]
        except (KeyError, TypeError):
            continue
        if isinstance(grade_id, str):
            ids.add(grade_id)
    if not ids:
        return Content(None, True, False, "a notebook without nbgrader cells")
    scores = {lesson: len(ids & cells) / len(cells) for lesson, cells in lesson_cells().items()
              if cells}
    best = max(scores.values(), default=0)
    if best == 0:
        return Content(None, True, True, "its nbgrader cells belong to no lesson of this course")
    winners = sorted(lesson for lesson, score in scores.items() if score == best)
    if len(winners) > 1:
        return Content(None, True, True, f"its cells belong to {' and '.join(winners)} equally")
    others = sorted(lesson for lesson, score in scores.items() if 0 < score < best)
    return Content(winners[0], True, note=f"also holds cells of {', '.join(others)}"
                   if others else None)


def lesson_named(*names: str) -> str | None:
    """The one lesson whose name appears in these file names, if exactly one does."""
    found = {lesson for lesson in lesson_names() for name in names if lesson in name}
    return found.pop() if len(found) == 1 else None
