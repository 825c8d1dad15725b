"""Brightspace (D2L) (Assignments > a folder > "Download" of the submissions).

Each submission's files are named ``<ids> - <First Last> - <Mon D, YYYY HMM AM> - <file>``
(flat), or lie in a folder ``<ids> - <First Last> - <Mon D, YYYY HMM AM>/`` in newer downloads,
beside Brightspace's ``index.html``. ``<ids>`` (``123456-789012``) names the submission, not the
student: another submission of the same student has other ids. So a student is their name (or
the roster row of that name), and of several submissions the newest, by the time in the name,
is kept. The time is the server's local time (no zone: read as UTC, the table says so).

Source: D2L's help, "Download assignment submissions", and the downloads it describes.
"""

import re
from datetime import UTC, datetime

from ..students import squash
from .base import FolderOrFlat, Found

SUBMISSION = (r"(?P<ids>\d+-\d+) - (?P<name>.+?) ?- "
              r"(?P<when>[A-Z][a-z]{2} \d{1,2}, \d{4} \d{1,2}:?\d\d [AP]M)")
FOLDER = re.compile(SUBMISSION)
FLAT = re.compile(SUBMISSION + r" - (?P<file>.+)", re.DOTALL)


class Brightspace(FolderOrFlat):
    name, label = "brightspace", "Brightspace (D2L)"
    own_files = frozenset({"index.html"})
    FOLDER, FLAT, naming = FOLDER, FLAT, "<ids> - <name> - <date> - <file>"

    def _found(self, match: re.Match, original: str) -> Found:
        name = match["name"].strip()
        identity = self.identity(f"brightspace:{squash(name)}", "Brightspace name", name=name)
        when = match["when"].replace(":", "")
        time = datetime.strptime(when, "%b %d, %Y %I%M %p").replace(tzinfo=UTC)
        return Found([identity], original, time,
                     "the time in Brightspace's name (the server's local time)",
                     notes=[f"Brightspace submission {match['ids']}"])
