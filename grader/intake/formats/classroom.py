"""Google Classroom and Google Drive.

"Make a copy for each student" names each student's copy ``<Full Name> - <title>`` (Classroom's
behaviour, not a documented format); a Drive download of a folder keeps Drive's folder tree, so
per-student folders ``<Full Name>/<file>`` work too, and a download may mix both (students who
attached a file of their own lie in their folder): either way of naming counts as Classroom's.
Classroom gives names only, no ids: the roster, or the name itself, is the student, and two
students of one name cannot be told apart (the table says so where it matters).
"""

import re

from ..download import Entry
from ..students import squash
from .base import Format, Found

NAMED = re.compile(r"(?P<name>.+?) - (?P<file>.+)", re.DOTALL)
PERSON = re.compile(r"[^\W\d_]+(?:[ '-][^\W\d_]+)+")  # a folder named like a person: "Ann Lee"


class Classroom(Format):
    name, label = "classroom", "Google Classroom/Drive"

    @classmethod
    def named_like(cls, entry: Entry) -> bool:
        return NAMED.fullmatch(entry.name) is not None or (
            len(entry.parts) == 2 and PERSON.fullmatch(entry.parts[0]) is not None)

    def parse(self, entry: Entry) -> Found:
        if match := NAMED.fullmatch(entry.name):
            name, original = match["name"].strip(), match["file"]
        else:
            name, original = self.student_folder(entry), entry.name
        return Found([self.identity(f"classroom:{squash(name)}", "Classroom/Drive name",
                                    name=name)], original)
