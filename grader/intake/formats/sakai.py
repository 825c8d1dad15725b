"""Sakai (Assignments > an assignment > "Download All").

Each student's submission lies in ``<assignment>/<Last, First(eid)>/``: the files under
``Submission attachment(s)/``, the submission time in ``timestamp.txt`` (``yyyyMMddHHmmssSSS``,
the server's local time: read as UTC), and text typed inline in
``<Last, First(eid)>_submissionText.html``; ``grades.csv`` lies beside the students' folders.
The eid is the student's login, the same in every assignment. A student with only text has no
notebook, and the table says so.

Source: Sakai's ``AssignmentServiceImpl`` (``getSubmissionsZip``, ``zipSubmissions``).
"""

import functools
import re
from datetime import UTC, datetime

from ..download import Entry
from ..errors import Skip
from .base import Format, Found

ATTACHMENTS = "Submission attachment(s)"
STUDENT = re.compile(r"(?P<name>.*)\((?P<eid>[^()]+)\)")
TEXT = "_submissionText.html"
MAX_TIMESTAMP_BYTES = 256


class Sakai(Format):
    name, label = "sakai", "Sakai"
    own_files = frozenset({"timestamp.txt", "grades.csv", "grades.xls", "grades.xlsx",
                           "comments.txt"})

    @classmethod
    def sure(cls, entries: list[Entry]) -> bool:
        return any(ATTACHMENTS in entry.parts[:-1] for entry in entries)

    @functools.cached_property
    def times(self) -> dict[str, datetime]:
        """A student's folder -> the time in its timestamp.txt."""
        found = {}
        for entry in self.entries:
            if entry.name != "timestamp.txt":
                continue
            try:
                text = entry.read(MAX_TIMESTAMP_BYTES, "a time").decode().strip()
                found[entry.folder] = datetime.strptime(text[:14], "%Y%m%d%H%M%S") \
                    .replace(tzinfo=UTC)
            except (Skip, OSError, ValueError):
                continue
        return found

    def parse(self, entry: Entry) -> Found:
        index = _student_folder(entry.parts[:-1])
        if index is None:
            raise Skip("not in a Sakai student's folder (<Last, First(eid)>/)")
        match = STUDENT.fullmatch(entry.parts[index])
        name, eid = match["name"].strip() or None, match["eid"].strip()
        folder = "/".join(entry.parts[:index + 1])
        time = self.times.get(folder)
        found = Found([self.identity(f"sakai:{eid.casefold()}", "Sakai user", lms_id=eid,
                                     name=name, course_id=True)],
                      "/".join(entry.parts[index + 1:]), time,
                      "Sakai's timestamp.txt (the server's local time)" if time else "")
        if entry.name.endswith(TEXT):
            found.instead = "online text (Sakai)"
        return found


def _student_folder(folders: list[str]) -> int | None:
    """The index of the student's folder: the one above ``Submission attachment(s)/``, else the
    innermost named ``<name>(<eid>)``."""
    if ATTACHMENTS in folders:
        index = folders.index(ATTACHMENTS) - 1
        return index if index >= 0 and STUDENT.fullmatch(folders[index]) else None
    return next((i for i in reversed(range(len(folders))) if STUDENT.fullmatch(folders[i])),
                None)
