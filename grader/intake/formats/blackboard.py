"""Blackboard Learn (Grade Center > an assignment column > "Assignment File Download").

Every file lies at the top of the zip as ``<assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>
_<the student's file name>``, beside a receipt per attempt, ``<assignment>_<username>_attempt_
<YYYY-MM-DD-HH-MM-SS>.txt``, whose first line is ``Name: <Full Name> (<username>)`` and whose
``Files:`` part lists each file with its ``Original filename:`` and ``Filename:``. The username
is the student's login, the same in every assignment; the attempt time is the server's local
time (no zone: read as UTC, the table says so). A receipt that lists no file is an attempt with
no notebook (text typed in the submission field, or nothing), and the table says so. Usernames
may hold ``_``: the receipts' usernames say where the assignment's name ends.

Source: Blackboard's help, "Download assignments" (Original course view), and the receipts such
downloads hold.
"""

import functools
import re
from datetime import UTC, datetime

from ..download import Entry
from ..errors import Skip
from .base import Format, Found

NAMED = re.compile(r"(?P<prefix>.+)_attempt_(?P<time>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)"
                   r"(?:_(?P<file>.+)|(?P<receipt>\.txt))", re.DOTALL)
RECEIPT_NAME = re.compile(r"^Name:\s*(?P<name>.*?)\s*\((?P<user>[^()]+)\)\s*$", re.MULTILINE)
RECEIPT_FILE = re.compile(r"^\s*Filename:\s*\S", re.MULTILINE)
MAX_RECEIPT_BYTES = 1 << 20


class Blackboard(Format):
    name, label = "blackboard", "Blackboard Learn"

    @classmethod
    def named_like(cls, entry: Entry) -> bool:
        return NAMED.fullmatch(entry.name) is not None

    @functools.cached_property
    def receipts(self) -> dict[str, tuple[str, str, bool]]:
        """Receipt file name -> (username, full name, whether it lists a file)."""
        found = {}
        for entry in self.entries:
            match = NAMED.fullmatch(entry.name)
            if not (match and match["receipt"]):
                continue
            try:
                text = entry.read(MAX_RECEIPT_BYTES, "a receipt").decode("utf-8", "replace")
            except (Skip, OSError, ValueError):
                continue
            if who := RECEIPT_NAME.search(text):
                found[entry.name] = (who["user"].strip(), who["name"],
                                     RECEIPT_FILE.search(text) is not None)
        return found

    def parse(self, entry: Entry) -> Found:
        match = NAMED.fullmatch(entry.name)
        if not match:
            raise Skip("not named as Blackboard names files "
                       "(<assignment>_<username>_attempt_<time>_<file>)")
        user, name = self._user(match["prefix"])
        time = datetime.strptime(match["time"], "%Y-%m-%d-%H-%M-%S").replace(tzinfo=UTC)
        identity = self.identity(f"blackboard:{user.casefold()}", "Blackboard user",
                                 lms_id=user, name=name, course_id=True)
        found = Found([identity], match["file"] or entry.name, time,
                      "the attempt's time in Blackboard's name (the server's local time)")
        if match["receipt"] and self.receipts.get(entry.name, ("", "", False))[2]:
            found.notes.append("Blackboard's receipt of the attempt's files")
        elif match["receipt"]:
            found.instead = "an attempt with no file (Blackboard receipt)"
        return found

    def _user(self, prefix: str) -> tuple[str, str | None]:
        """(username, full name) from the part before ``_attempt_``: a receipt's username that
        ends it (the longest), else the text after its last ``_``."""
        known = {user: name for user, name, _ in self.receipts.values()}
        ends = [user for user in known if prefix.endswith(f"_{user}")]
        if ends:
            user = max(ends, key=len)
            return user, known[user] or None
        return prefix.rpartition("_")[2], None
