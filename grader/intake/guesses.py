"""Downloads whose naming collect would only be guessing at, refused whole.

A layout collect does not know is read as this course's own naming (``formats/files``), which
takes a student from a file-name prefix or a folder. Two results of that are never a class, and
collect refuses them with a message rather than writing them:

- every notebook of the download would be one student's (three at least): the prefix or folder
  is the assignment's, not a student's (an LMS that names files ``<assignment>_<user>_...``);
- without a roster, every notebook would be a student never seen before, while earlier
  downloads know the class (three at least each): the names are the submissions', not the
  students' (an LMS that puts a submission id in front).

Naming the format (``--format files`` included) says the names are what that format says, so
nothing is refused as a guess; a roster makes the second case moot, since then a student is only
ever a roster row.
"""

from collections import Counter

from .candidates import Candidate
from .errors import CollectError
from .formats import Format
from .manifest import Manifest
from .students import Roster

AT_LEAST = 3


def refuse_guesses(candidates: list[Candidate], kind: type[Format], manifest: Manifest,
                   roster: Roster | None) -> None:
    """CollectError if the download, its format detected, would put the class under one
    student or each notebook under a new one; see the module docstring."""
    placed = [c for c in candidates if c.student and c.row.outcome != "skipped"]
    files = {c.entry.path for c in placed}
    students = {c.student for c in placed}
    if len(files) >= AT_LEAST and len(students) == 1 and not kind.names_each_submitter:
        raise CollectError(
            f"every notebook of this download ({len(files)}) would be student "
            f"{students.pop()!r}'s, read as {kind.label}: that is not a class; collect knows "
            f"this LMS's naming by --format, or the download is not one it reads (nothing "
            f"written)")
    if kind.name != "files" or roster is not None or len(students) < AT_LEAST:
        return
    known = {s.casefold() for s in manifest.students}
    if len(known) >= AT_LEAST and not {s.casefold() for s in students} & known \
            and max(Counter(c.student for c in placed).values()) == 1:
        raise CollectError(
            f"every notebook of this download would be a new student ({len(students)}, none "
            f"of the {len(known)} collected before), read as {kind.label}: its names are not "
            f"the students'; pass --roster, or --format files if they are (nothing written)")


def download_lesson(candidates: list[Candidate]) -> str:
    """The one lesson of the download's notebooks, else "" (not known)."""
    lessons = {c.lesson for c in candidates if c.lesson}
    return lessons.pop() if len(lessons) == 1 else ""
