"""nbgrader's exchange (``nbgrader submit``), read from its ``inbound/`` folder or a zip of it.

Each submission is a folder ``<student id>+<assignment>+<timestamp>``, with ``+<random string>``
at the end since nbgrader 0.7 (``add_random_string``), holding the submitted files,
``timestamp.txt`` (the submission time, ``%Y-%m-%d %H:%M:%S.%f %Z``) and
``submission_secret.txt``, which is kept beside the notebook so that the student's
``nbgrader fetch_feedback`` finds the feedback released for it. Source: nbgrader's
``exchange/default/submit.py`` and ``collect.py`` (which splits the folder name from the right,
so ids may hold ``+``).
"""

import functools
import re
import zipfile

from ...timestamps import parse_time
from ...workspace import EXCHANGE_FILES
from ..download import Entry
from ..errors import Skip
from .base import Format, Found

FOLDER = re.compile(r".+\+[^+]+\+\d{4}-\d\d-\d\d[^+]*(?:\+[^+]*)?")
MAX_SECRET_BYTES = 1024  # nbgrader's is 32 hex digits


class Exchange(Format):
    name, label = "exchange", "nbgrader exchange"
    own_files = frozenset(EXCHANGE_FILES)

    @classmethod
    def sure(cls, entries: list[Entry]) -> bool:
        return any(FOLDER.fullmatch(part) for entry in entries for part in entry.parts[:-1])

    @functools.cached_property
    def times(self) -> dict[str, str]:
        """Submission folder -> the text of its timestamp.txt."""
        found = {}
        for entry in self.entries:
            if entry.name == "timestamp.txt" and len(entry.parts) > 1:
                try:
                    found[entry.folder] = entry.read().decode()
                except (UnicodeDecodeError, zipfile.BadZipFile, OSError):
                    pass
        return found

    @functools.cached_property
    def secrets(self) -> dict[str, bytes]:
        """Submission folder -> its submission_secret.txt."""
        found = {}
        for entry in self.entries:
            if entry.name == "submission_secret.txt" and len(entry.parts) > 1:
                try:
                    secret = entry.read()
                except (zipfile.BadZipFile, OSError):
                    continue
                if len(secret) <= MAX_SECRET_BYTES:
                    found[entry.folder] = secret
        return found

    def parse(self, entry: Entry) -> Found:
        index = next((i for i, part in enumerate(entry.parts[:-1]) if FOLDER.fullmatch(part)),
                     None)
        if index is None:
            raise Skip("not inside an nbgrader exchange folder (<student>+<assignment>+<time>)")
        pieces = entry.parts[index].rsplit("+", 3)
        if parse_time(pieces[-1]) is not None:  # no random string
            student, assignment, stamp = "+".join(pieces[:-2]), pieces[-2], pieces[-1]
        else:
            student, assignment, stamp = pieces[0], pieces[1], pieces[2]
        folder = "/".join(entry.parts[:index + 1])
        time, time_from = parse_time(self.times.get(folder, "")), "the exchange's timestamp.txt"
        if time is None:
            time, time_from = parse_time(stamp), "the exchange folder's name"
        notes = [f"submitted as assignment {assignment!r}"] if assignment not in self.lessons \
            else []
        identity = self.identity(f"id:{student}", "exchange user", lms_id=student,
                                 course_id=True)
        return Found([identity], "/".join(entry.parts[index + 1:]), time,
                     time_from if time else "", notes=notes, secret=self.secrets.get(folder))
