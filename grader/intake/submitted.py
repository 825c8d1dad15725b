"""The newest notebook of each student and lesson, written into the workspace's submitted/.

Several notebooks of one student and lesson: one that holds the lesson's nbgrader cells wins
over one that does not (a blank ``Untitled.ipynb``, a file saved halfway, whatever their order
or times), then the newest (the LMS's time, else the zip entry's time); the others are shown as
superseded, saying by which and why. The same holds against what submitted/ has from an earlier
download: it stays if it is the lesson's notebook and the new one is not, or if it is newer.
Beside each notebook go nbgrader's ``timestamp.txt`` (the time it was submitted) and, from
nbgrader's exchange, ``submission_secret.txt``.

A winner is read from the download again as it is written, a chunk at a time, and written only
if its bytes are still those collect read (a folder of the exchange may change meanwhile).
"""

import hashlib
import os
from collections import defaultdict
from datetime import UTC, datetime

from ..timestamps import nbgrader_time, parse_time
from ..workspace import Workspace, atomic_write
from .candidates import MAX_NOTEBOOK_BYTES, UNREADABLE, Candidate
from .download import CHUNK
from .errors import Skip
from .lessons import lesson_of
from .manifest import Manifest
from .table import short

CELLS = "holds the lesson's nbgrader cells"


def newest(candidates: list[Candidate], manifest: Manifest,
           workspace: Workspace) -> list[Candidate]:
    """The candidate to write for each student and lesson; the others' rows say why not."""
    groups = defaultdict(list)
    for candidate in candidates:
        if candidate.student is not None and candidate.row.outcome != "skipped":
            groups[candidate.student, candidate.lesson].append(candidate)
    winners = []
    for (student, lesson), group in groups.items():
        group.sort(key=lambda c: (c.holds_cells, *c.order))
        winner = group[-1]
        for loser in group[:-1]:
            _superseded(loser, winner)
        if _against_the_workspace(winner, student, lesson, manifest, workspace):
            winners.append(winner)
    return winners


def _superseded(loser: Candidate, winner: Candidate) -> None:
    loser.row.outcome = "superseded"
    why = "the same file" if loser.sha256 == winner.sha256 else \
        f"it {CELLS}; this file does not" if winner.holds_cells > loser.holds_cells else \
        "newer" if loser.found.time and winner.found.time and \
        loser.found.time < winner.found.time else \
        "same time or none known: the later in the download"
    if not loser.identity.lms_id:
        why += f"; or a second student named {loser.identity.name!r}, which " \
               f"{loser.identity.lms} cannot tell: check"
    loser.row.details.insert(0, f"by {winner.entry.path} ({why})")


def _against_the_workspace(winner: Candidate, student: str, lesson: str, manifest: Manifest,
                           workspace: Workspace) -> bool:
    """Whether ``winner`` replaces what submitted/ holds (its row says what it did)."""
    notebook = workspace.submission(student, lesson) / f"{lesson}.ipynb"
    current = _file_hash(notebook) if notebook.is_file() else None
    record = manifest.submission(student, lesson)
    if current == winner.sha256:
        winner.row.outcome = "unchanged"
        winner.row.details.insert(0, f"already collected from {record['archive_name']}"
                                  if record else "already in submitted/")
        manifest.adopt(student, winner.identity, winner.how)
        return False
    if record is not None and record["sha256"] != current:
        record = None  # submitted/ was changed by hand since: what is there now counts
    if current is not None and _kept(winner, record, _holds_cells(notebook, lesson)):
        return False
    return _renamed(winner, lesson)


def _kept(winner: Candidate, record: dict | None, holds_cells: bool) -> bool:
    """Whether the notebook in submitted/ (collected as ``record`` says, if it was) stays: it
    holds the lesson's cells and the winner does not, or it is newer. The winner's row says."""
    row = winner.row
    if holds_cells != winner.holds_cells:
        if holds_cells:
            row.outcome = "superseded"
            row.details.insert(0, f"by {_source(record)}, which {CELLS}; this file does not")
            return True
        row.details.append(f"replaces {_source(record)}, which does not hold the lesson's "
                           f"nbgrader cells")
        return False
    if record is None:
        row.details.append("replaces a notebook this command did not collect")
        return False
    before = parse_time(record.get("time") or "")
    if before and winner.found.time and winner.found.time <= before:
        row.outcome = "superseded"
        row.details.insert(0, f"by {record['entry']} from {record['archive_name']} "
                              f"({short(before)}, newer), collected before")
        return True
    row.details.append(f"replaces {record['entry']} from {record['archive_name']}"
                       + ("" if before and winner.found.time else
                          " (times unknown: the later download wins)"))
    return False


def _source(record: dict | None) -> str:
    """Where the notebook in submitted/ came from, for a row."""
    return f"{record['entry']} from {record['archive_name']}, collected before" if record \
        else "the notebook already in submitted/"


def _renamed(winner: Candidate, lesson: str) -> bool:
    original = winner.found.original.rsplit("/", 1)[-1]
    if original != f"{lesson}.ipynb":
        winner.row.details.insert(0, f"the student's file was {original!r}")
        if winner.row.outcome == "collected":
            winner.row.outcome = "renamed"
    return True


def _file_hash(path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _holds_cells(notebook, lesson: str) -> bool:
    """Whether the notebook in submitted/ holds ``lesson``'s nbgrader cells."""
    try:
        if notebook.stat().st_size > MAX_NOTEBOOK_BYTES:
            return False
        return lesson_of(notebook.read_bytes()).lesson == lesson
    except OSError:
        return False


def write(winners: list[Candidate], workspace: Workspace, manifest: Manifest, digest: str,
          name: str, fmt: str) -> None:
    """Each winner's notebook and exchange files into submitted/, then the manifest."""
    now = datetime.now(UTC)
    for candidate in winners:
        folder = workspace.submission(candidate.student, candidate.lesson)
        folder.mkdir(parents=True, exist_ok=True)
        try:
            _write_notebook(candidate, folder / f"{candidate.lesson}.ipynb")
        except (Skip, *UNREADABLE) as err:
            candidate.row.skip(f"not written: {err}")
            continue
        found = candidate.found
        _write_or_remove(folder / "timestamp.txt",
                         nbgrader_time(found.time).encode() if found.time else None)
        _write_or_remove(folder / "submission_secret.txt", found.secret)
        manifest.record(candidate.student, candidate.lesson, candidate.identity, candidate.how, {
            "archive": digest, "archive_name": name, "entry": candidate.entry.path,
            "sha256": candidate.sha256, "time": found.time.isoformat() if found.time else None,
            "time_from": found.time_from, "late": found.late,
            "collected": now.isoformat(timespec="seconds")})
    manifest.archives[digest] = {"name": name, "format": fmt,
                                 "collected": now.isoformat(timespec="seconds")}
    manifest.save()


def _write_notebook(candidate: Candidate, path) -> None:
    """The candidate's notebook, read from the download again, written whole or not at all
    (as ``atomic_write`` does); Skip if it is no longer what collect read."""
    temporary = path.with_name(f".{path.name}.writing")
    try:
        with temporary.open("wb") as file:
            digest = candidate.entry.copy(file, MAX_NOTEBOOK_BYTES, "a notebook", charge=False)
        if digest != candidate.sha256:
            raise Skip("it changed in the download while collect read it; collect again")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _write_or_remove(path, data: bytes | None) -> None:
    """An exchange file of this notebook, or none (the replaced notebook's is removed)."""
    if data is not None:
        atomic_write(path, data)
    elif path.exists():
        path.unlink()
