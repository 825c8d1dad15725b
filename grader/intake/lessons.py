"""Which lesson a notebook is: read from its content, never from its file name.

It is the course lesson whose released nbgrader cells (their grade_ids) the notebook holds, so
``Copy of ...``, ``(1)`` and an LMS's renaming do not matter. Only a file that is not a readable
notebook (empty, cut short, not JSON), or a notebook without nbgrader cells, takes its lesson
from ``--lesson`` or a lesson name in its file name, so that grading reports it as ungradable
rather than losing the student.

The JSON is read in outline, so that a notebook costs collect little more than its bytes: every
string but the few names read here (``cells``, ``metadata``, ``nbgrader``, ``grade_id`` and a
grade_id's value) is made empty first, which leaves the cells' structure without the sources and
outputs a notebook's size is made of. What is left must be a notebook's: at most
``MAX_STRINGS`` strings and ``MAX_OUTLINE_BYTES`` outside them. JSON that is nothing but
structure (``[[],[],...]``, sixteen million lists in 48 MiB) would cost gigabytes to parse, here
or when grading: it is refused, with a row saying so.
"""

import functools
import json
import re
from dataclasses import dataclass

from ..course import lesson_names
from ..grading.submissions import released_cells


@functools.cache
def lesson_cells() -> dict[str, frozenset[str]]:
    """Each lesson's released nbgrader grade_ids."""
    return {lesson: frozenset(released_cells(lesson)) for lesson in lesson_names()}


MAX_STRINGS = 500_000  # a notebook of 64 MiB, its outputs as lines of text, holds fewer
MAX_OUTLINE_BYTES = 4 << 20  # the outline's size: the course's notebooks make 10 KiB
MAX_CONTAINERS = 200_000  # lists and objects: ten thousand cells with outputs make 100,000
# a JSON string, escapes and all, or one never closed (to the end): possessive, so that neither
# a string nor a search that fails backtracks (quadratic on '"' followed by a million '\\"')
STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+\\?+("|\Z)', re.DOTALL)
NAMES = frozenset({b'"cells"', b'"metadata"', b'"nbgrader"', b'"grade_id"'})
MAX_GRADE_ID_BYTES = 256
SPACE = b" \t\r"  # between tokens: left out (newlines kept, for the line of an error)


@dataclass
class Content:
    lesson: str | None
    readable: bool  # a notebook (JSON with a list of cells)
    graded: bool = True  # it has nbgrader cells
    problem: str | None = None  # why the content names no lesson
    note: str | None = None
    refused: bool = False  # not read at all: no notebook is shaped like it


class Shapeless(Exception):
    """The JSON has more structure than any notebook: not read."""


def outline(data: bytes | bytearray) -> bytes:
    """``data``'s JSON with every string made empty but the names ``lesson_of`` reads (and a
    grade_id's value), and its spaces left out; Shapeless past ``MAX_STRINGS`` strings,
    ``MAX_OUTLINE_BYTES`` or ``MAX_CONTAINERS``. What is not JSON stays not JSON."""
    if data.count(b'"') > 2 * MAX_STRINGS:
        raise Shapeless(f"more than {MAX_STRINGS:,} strings")
    parts, size, last, previous = [], 0, 0, b""
    for match in STRING.finditer(data):
        between = _between(data, last, match.start())
        if not match[1]:  # never closed: where it starts is kept, for the error
            parts.append(between + b'"')
            last = len(data)
            break
        text = match[0]
        keep = text in NAMES or (previous == b'"grade_id"' and between.strip() == b":"
                                 and len(text) <= MAX_GRADE_ID_BYTES)
        parts += [between, text if keep else b'""']
        size += len(between) + len(parts[-1])
        if size > MAX_OUTLINE_BYTES:
            raise Shapeless(f"more than {MAX_OUTLINE_BYTES >> 20} MiB outside its strings")
        previous, last = text, match.end()
    text = b"".join([*parts, _between(data, last, len(data))])
    if len(text) > MAX_OUTLINE_BYTES:
        raise Shapeless(f"more than {MAX_OUTLINE_BYTES >> 20} MiB outside its strings")
    if text.count(b"[") + text.count(b"{") > MAX_CONTAINERS:
        raise Shapeless(f"more than {MAX_CONTAINERS:,} lists and objects")
    return text


def _between(data: bytes | bytearray, start: int, end: int) -> bytes:
    """The JSON between two strings, without spaces; Shapeless if too long to be a
    notebook's, whatever spaces it holds."""
    if end - start > MAX_OUTLINE_BYTES:
        raise Shapeless(f"more than {MAX_OUTLINE_BYTES >> 20} MiB outside its strings")
    return bytes(data[start:end]).translate(None, SPACE)


def lesson_of(data: bytes | bytearray) -> Content:
    """The lesson a notebook's nbgrader cells belong to."""
    if not data or data.isspace():
        return Content(None, False, False, "the file is empty")
    try:
        notebook = json.loads(outline(data).decode("utf-8"))
    except Shapeless as why:
        return Content(None, False, False, f"its JSON has more structure than a notebook "
                       f"({why}): not read, nor collected, since grading would have to read "
                       f"it", refused=True)
    except UnicodeDecodeError:
        return Content(None, False, False, "not a text file")
    except json.JSONDecodeError as err:
        return Content(None, False, False, f"not valid JSON ({err.msg} at line {err.lineno})")
    except (ValueError, RecursionError) as err:
        return Content(None, False, False, f"not valid JSON ({type(err).__name__})")
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
