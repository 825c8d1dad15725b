"""The newest notebook of each student and lesson, written into the workspace's submitted/.

Several notebooks of one student and lesson: the newest is kept (the LMS's time, else the zip
entry's time) and the others are shown as superseded; one collected before from an earlier
download stays if it is newer. Beside each notebook go nbgrader's ``timestamp.txt`` (the time
it was submitted) and, from nbgrader's exchange, ``submission_secret.txt``.
"""

import hashlib
from collections import defaultdict
from datetime import UTC, datetime

from ..timestamps import nbgrader_time, parse_time
from ..workspace import Workspace, atomic_write
from .candidates import Candidate
from .manifest import Manifest
from .table import short


def newest(candidates: list[Candidate], manifest: Manifest,
           workspace: Workspace) -> list[Candidate]:
    """The candidate to write for each student and lesson; the others' rows say why not."""
    groups = defaultdict(list)
    for candidate in candidates:
        if candidate.student is not None and candidate.row.outcome != "skipped":
            groups[candidate.student, candidate.lesson].append(candidate)
    winners = []
    for (student, lesson), group in groups.items():
        group.sort(key=lambda c: c.order)
        winner = group[-1]
        for loser in group[:-1]:
            _superseded(loser, winner)
        if _against_the_workspace(winner, student, lesson, manifest, workspace):
            winners.append(winner)
    return winners


def _superseded(loser: Candidate, winner: Candidate) -> None:
    loser.row.outcome = "superseded"
    why = "the same file" if loser.sha256 == winner.sha256 else \
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
    current = hashlib.sha256(notebook.read_bytes()).hexdigest() if notebook.is_file() else None
    record = manifest.submission(student, lesson)
    if current == winner.sha256:
        winner.row.outcome = "unchanged"
        winner.row.details.insert(0, f"already collected from {record['archive_name']}"
                                  if record else "already in submitted/")
        manifest.adopt(student, winner.identity, winner.how)
        return False
    if record is not None and record["sha256"] != current:
        record = None  # submitted/ was changed by hand since: what is there now counts
    if record is not None:
        before = parse_time(record.get("time") or "")
        if before and winner.found.time and winner.found.time <= before:
            winner.row.outcome = "superseded"
            winner.row.details.insert(0, f"by {record['entry']} from {record['archive_name']} "
                                         f"({short(before)}, newer), collected before")
            return False
        winner.row.details.append(
            f"replaces {record['entry']} from {record['archive_name']}"
            + ("" if before and winner.found.time else " (times unknown: the later download"
               " wins)"))
    elif current is not None:
        winner.row.details.append("replaces a notebook this command did not collect")
    original = winner.found.original.rsplit("/", 1)[-1]
    if original != f"{lesson}.ipynb":
        winner.row.details.insert(0, f"the student's file was {original!r}")
        if winner.row.outcome == "collected":
            winner.row.outcome = "renamed"
    return True


def write(winners: list[Candidate], workspace: Workspace, manifest: Manifest, digest: str,
          name: str, fmt: str) -> None:
    """Each winner's notebook and exchange files into submitted/, then the manifest."""
    now = datetime.now(UTC)
    for candidate in winners:
        folder = workspace.submission(candidate.student, candidate.lesson)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / f"{candidate.lesson}.ipynb", candidate.data)
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


def _write_or_remove(path, data: bytes | None) -> None:
    """An exchange file of this notebook, or none (the replaced notebook's is removed)."""
    if data is not None:
        atomic_write(path, data)
    elif path.exists():
        path.unlink()
