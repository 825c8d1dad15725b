"""Collecting a class's notebooks from an LMS download into nbgrader's submitted/ folder.

``collect(source, workspace)`` reads one download (a zip, or a folder such as nbgrader's
exchange inbound/) and writes ``submitted/<student>/<lesson>/<lesson>.ipynb`` with nbgrader's
``timestamp.txt`` beside it. Every file of the download gets a row in the table it returns: the
student and lesson it went to and its outcome (collected, renamed, merged, superseded, unchanged,
ignored, or skipped and why). Nobody is dropped, merged or graded under another id without a
row saying so; one bad file never stops the others.

The steps, one module each: the download's files (``download``); its LMS, and whose each file
is by that LMS's naming (``formats``, one module per LMS, each citing its source); every file
read, each notebook's lesson taken from its content (``candidates``, ``lessons``); each
notebook's student, from the roster or the LMS (``identify``, ``students``); the newest notebook
per student and lesson written (``submitted``), and what was collected from where kept in the
workspace (``manifest``).

Collect holds little in memory whatever a download says: every file is read a chunk at a time
up to a limit, and the download as a whole up to a budget (``download``); a notebook is held
only while its hash and lesson are read, and read again as it is written. A notebook without
the lesson's nbgrader cells (a blank ``Untitled.ipynb``, a file saved halfway) never replaces
one with them (``submitted``), and a folder of nbgrader's exchange must belong to the student it
names (``formats/exchange``).
"""

from pathlib import Path

from ..course import lesson_names
from ..workspace import Workspace
from . import formats, groups
from .candidates import read_files
from .download import opened
from .errors import CollectError, Skip
from .guesses import download_lesson, refuse_guesses
from .identify import identify, no_notebook
from .manifest import Collected, Manifest
from .students import Roster
from .submitted import newest, write
from .table import Collection, Row

__all__ = ["Collected", "Collection", "CollectError", "Roster", "Row", "Skip", "collect"]


def collect(source: Path, workspace: Workspace, roster: Roster | None = None,
            lesson: str | None = None, fmt: str = "auto", dry_run: bool = False,
            again: bool = False, share_groups: bool = False) -> Collection:
    """Collect one download into the workspace's submitted/ folder; see the module docstring.
    A download collected before is not read again unless ``again``; ``share_groups``: a
    group assignment, each member gets the group's notebook (the roster's group column)."""
    if share_groups and (roster is None or not roster.groups):
        raise CollectError("--groups needs a roster with a group column (group, group_name "
                           "or team; Canvas's export of a group set has one)")
    source = Path(source)
    lessons = lesson_names()
    if lesson is not None and lesson not in lessons:
        raise CollectError(f"unknown lesson {lesson!r}; the course's lessons: "
                           f"{', '.join(lessons)}")
    if fmt != "auto" and fmt not in formats.BY_NAME:
        raise CollectError(f"unknown format {fmt!r}: one of {', '.join(formats.BY_NAME)}")
    if not source.exists():
        raise CollectError(f"{source} does not exist")
    manifest = Manifest.load(workspace)
    with opened(source) as download:
        digest = download.hash()
        if digest in manifest.archives and not again:
            seen = manifest.archives[digest]
            label = formats.BY_NAME.get(seen.get("format"), formats.Files).label
            return Collection(source.name, label, [],
                              already=f"on {seen['collected']} as {seen['name']}")
        entries = download.entries
        kind = formats.detect(entries) if fmt == "auto" else formats.BY_NAME[fmt]
        read = read_files(kind(entries, lessons), lesson)
        groups.teams(read.candidates, read.rows, roster)
        identify(read.candidates, read.others, roster, manifest)
        if share_groups:
            groups.share(read.candidates, read.rows, roster)
        if fmt == "auto":
            refuse_guesses(read.candidates, kind, manifest, roster)
        winners = newest(read.candidates, manifest, workspace)
        without = no_notebook(read.candidates, read.others)
        if not dry_run:  # the winners are read from the download again as they are written
            for student, row in without.items():
                manifest.without_notebook(student, lesson or download_lesson(read.candidates),
                                          {"entry": row.file, "why": row.details[0]})
            write(winners, workspace, manifest, digest, source.name, kind.name)
    return Collection(source.name, kind.label, read.rows, dry_run=dry_run)
