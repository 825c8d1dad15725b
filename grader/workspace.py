"""The course workspace: one run of the course, laid out as nbgrader lays out a course
(``submitted/<student>/<lesson>/<lesson>.ipynb``), and how files are written into it.

Every file the grader writes there is written whole or not at all (``atomic_write``): a reader,
or a grader interrupted halfway, never sees half a file. A submission is what its folder holds:
``digest`` names it by its files' names and bytes, so the gradebook's history can say which
files a result was graded from.
"""

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the course's repository
# what nbgrader's exchange keeps beside a submitted notebook: its time, and the secret that
# lets the student fetch the feedback released for it
EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")


@dataclass(frozen=True)
class Workspace:
    """One run of the course: submissions, results, autograded notebooks, feedback, the report,
    the gradebook (SQLite in the workspace unless ``ATTENTION_COURSE_GRADEBOOK`` names another
    database), collect's manifest and the course file."""

    root: Path

    @classmethod
    def default(cls) -> "Workspace":
        return cls(Path(os.environ.get("ATTENTION_COURSE_WORKSPACE", ROOT / "course")).resolve())

    @property
    def submitted(self) -> Path:
        return self.root / "submitted"

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def autograded(self) -> Path:
        return self.root / "autograded"

    @property
    def feedback(self) -> Path:
        return self.root / "feedback"

    @property
    def report(self) -> Path:
        return self.root / "report"

    @property
    def scratch(self) -> Path:
        return self.root / "scratch"

    @property
    def manifest(self) -> Path:
        """collect's record of what it collected from where (``intake.manifest``)."""
        return self.root / "collected.json"

    @property
    def course_file(self) -> Path:
        """Due dates, extensions and the late policy (``records.lateness``)."""
        return self.root / "course.toml"

    @property
    def db_url(self) -> str:
        default = f"sqlite:///{self.root / 'gradebook.db'}"
        return os.environ.get("ATTENTION_COURSE_GRADEBOOK", default)

    def submission(self, student: str, lesson: str) -> Path:
        return self.submitted / student / lesson

    def result_file(self, student: str, lesson: str) -> Path:
        return self.results / student / f"{lesson}.json"

    def autograded_file(self, student: str, lesson: str) -> Path:
        return self.autograded / student / lesson / f"{lesson}.ipynb"


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (a hidden temporary file, then a rename)."""
    temporary = path.with_name(f".{path.name}.writing")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def folder_paths(folder: Path) -> list[tuple[str, Path]]:
    """Every file of ``folder`` and its subfolders, by "/"-separated relative path, sorted:
    regular files only (no symbolic link), and none whose name starts with a dot (temporary)."""
    folder = Path(folder)
    paths = sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
                   and not p.name.startswith("."))
    return [(path.relative_to(folder).as_posix(), path) for path in paths]


def folder_files(folder: Path) -> dict[str, bytes]:
    """The bytes of every file ``folder_paths`` lists."""
    return {name: path.read_bytes() for name, path in folder_paths(folder)}


def digest(files: Iterable[tuple[str, bytes]]) -> str:
    """What a set of files is: a hash of their names and bytes, given in name order."""
    sha = hashlib.sha256()
    for name, data in files:
        sha.update(name.encode() + b"\0")
        sha.update(hashlib.sha256(data).digest())
    return sha.hexdigest()


def folder_digest(folder: Path) -> str:
    """``digest`` of a folder's files, read one at a time."""
    return digest((name, path.read_bytes()) for name, path in folder_paths(folder))
