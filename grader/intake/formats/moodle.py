"""Moodle (assignment > "Download all submissions").

With "Download submissions in folders" (the default since Moodle 3.1) each student's files lie
in ``<Full Name>_<participant id>_assignsubmission_file/`` (subfolders kept, files not renamed);
without it every file is ``<Full Name>_<participant id>_assignsubmission_file_<file name>``.
Moodle writes underscores of the name as spaces; with blind marking the name is "Participant".
The participant id is Moodle's per-assignment identifier (it differs between assignments), so
across lessons a student is known by name or by the roster. Source: Moodle's
``mod/assign/classes/downloader.php`` (``get_student_prefix``, ``load_submissionplugin_filelist``)
and the ``downloadasfolders_help`` string.
"""

import re

from ..download import Entry
from ..errors import Skip
from ..students import squash
from .base import Format, Found

FOLDER = re.compile(r"(?P<name>.+)_(?P<participant>\d+)_assignsubmission_file")
FLAT = re.compile(r"(?P<name>.+)_(?P<participant>\d+)_assignsubmission_file_(?P<file>.+)",
                  re.DOTALL)


class Moodle(Format):
    name, label = "moodle", "Moodle"

    @classmethod
    def named_like(cls, entry: Entry) -> bool:
        return any(FOLDER.fullmatch(p) for p in entry.parts[:-1]) \
            or FLAT.fullmatch(entry.name) is not None

    def parse(self, entry: Entry) -> Found:
        for index, part in enumerate(entry.parts[:-1]):
            if match := FOLDER.fullmatch(part):
                return self._found(match, "/".join(entry.parts[index + 1:]))
        if match := FLAT.fullmatch(entry.name):
            return self._found(match, match["file"])
        raise Skip("not named as Moodle names files "
                   "(<Full Name>_<participant id>_assignsubmission_file[/ or _]<file>)")

    def _found(self, match: re.Match, original: str) -> Found:
        name, participant = match["name"].strip(), match["participant"]
        if name.casefold() == "participant":  # blind marking: no name
            identity = self.identity(f"moodle-participant:{participant}", "Moodle participant",
                                     lms_id=participant, stable=False,
                                     folder_prefix="participant")
            return Found([identity], original, notes=[
                "blind marking: Moodle's participant id differs per assignment"])
        return Found([self.identity(f"moodle:{squash(name)}", "Moodle participant",
                                    lms_id=participant, name=name, stable=False)], original)
