"""Which file of a Gradescope submission is the lesson's notebook.

Students upload what they have: the notebook under its own name, a renamed copy
(``Copy of 01_embeddings.ipynb``), several notebooks, a folder, or no notebook at all. In that
order of preference: ``<lesson>.ipynb``; else the one notebook whose nbgrader cells are the
lesson's (read from its content, as collect does); else the only notebook there is (grading then
says what is wrong with it). Several candidates, or none, grade nothing and say so, naming the
files found. Checkpoints and macOS metadata are not the student's work and are skipped.
"""

from dataclasses import dataclass
from pathlib import Path

from ..intake.lessons import lesson_of

SKIPPED_FOLDERS = (".ipynb_checkpoints", "__MACOSX")
MAX_NOTEBOOK_BYTES = 64 << 20
NAMES_LISTED = 10


@dataclass(frozen=True)
class Found:
    """The notebook to grade (``data``, None when there is none) and what to tell the student:
    ``note`` when the file is not the expected one, ``problem`` when nothing can be graded."""

    name: str
    data: bytes | None
    note: str = ""
    problem: str = ""


def find_notebook(submission: Path, lesson: str) -> Found:
    expected = f"{lesson}.ipynb"
    files = _files(submission)
    notebooks = {name: path for name, path in files.items() if name.endswith(".ipynb")}
    if not notebooks:
        listed = _listing(files) or "no file at all"
        return Found(expected, None, problem=f"no notebook in the submission ({listed}): "
                                             f"upload {expected}")
    exact = [name for name in notebooks if Path(name).name == expected]
    if len(exact) == 1:
        return _read(exact[0], notebooks[exact[0]], "")
    contents = {name: _read(name, path, "") for name, path in notebooks.items()}
    ours = [name for name, found in contents.items()
            if found.data is not None and lesson_of(found.data).lesson == lesson]
    chosen = ours if ours else list(notebooks) if len(notebooks) == 1 else []
    if len(chosen) == 1:
        name = chosen[0]
        return _read(name, notebooks[name], f"graded {name} (expected {expected})")
    why = "several notebooks of this lesson" if chosen else "none of them is this lesson's"
    return Found(expected, None, problem=f"{why} ({_listing(notebooks)}): upload one "
                                         f"notebook, {expected}")


def _files(submission: Path) -> dict[str, Path]:
    """Regular files under ``submission`` (no links followed), by their path inside it."""
    found = {}
    for path in sorted(submission.rglob("*")):
        inside = path.relative_to(submission)
        if path.is_symlink() or not path.is_file() \
                or any(part in SKIPPED_FOLDERS or part.startswith("._") for part in inside.parts):
            continue
        found[inside.as_posix()] = path
    return found


def _read(name: str, path: Path, note: str) -> Found:
    if path.stat().st_size > MAX_NOTEBOOK_BYTES:
        return Found(name, None, problem=f"{name} is larger than "
                                         f"{MAX_NOTEBOOK_BYTES >> 20} MiB: clear its outputs")
    return Found(name, path.read_bytes(), note)


def _listing(files) -> str:
    names = sorted(files)
    more = f" and {len(names) - NAMES_LISTED} more" if len(names) > NAMES_LISTED else ""
    return ", ".join(names[:NAMES_LISTED]) + more
