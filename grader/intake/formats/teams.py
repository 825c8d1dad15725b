"""Microsoft Teams (Assignments > an assignment > "Student work" download).

Each student's work lies in a folder named after the student, with the files they turned in
under ``Submitted files/`` and their OneDrive copy, which they may keep editing after turning it
in, under ``Working files/``. Only ``Submitted files/`` is the submission: a notebook in
``Working files/`` is a draft and never graded (a student with nothing else gets a row saying
no notebook was submitted). Teams gives names only: the roster, or the name, is the student.

Source: Microsoft's help for Teams Assignments, "Download student work".
"""

from ..download import Entry
from ..errors import Skip
from ..students import squash
from .base import Format, Found

SUBMITTED, WORKING = "Submitted files", "Working files"


class Teams(Format):
    name, label = "teams", "Microsoft Teams"

    @classmethod
    def sure(cls, entries: list[Entry]) -> bool:
        return any(part in (SUBMITTED, WORKING) for entry in entries
                   for part in entry.parts[1:-1])

    def parse(self, entry: Entry) -> Found:
        folders = entry.parts[:-1]
        where = next((i for i, part in enumerate(folders) if part in (SUBMITTED, WORKING)), None)
        if not where:
            raise Skip(f"not in a student's {SUBMITTED}/ or {WORKING}/ folder")
        name = folders[where - 1]
        found = Found([self.identity(f"teams:{squash(name)}", "Teams name", name=name)],
                      "/".join(entry.parts[where + 1:]))
        if folders[where] == WORKING:
            found.draft = f"in {WORKING}/, the student's copy after turning in"
        return found
