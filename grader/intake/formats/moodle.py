"""Moodle (assignment > "Download all submissions"), 3.x and 4.x.

With "Download submissions in folders" (the default since Moodle 3.1) each student's files lie
in ``<Full Name>_<participant id>_assignsubmission_file/`` (subfolders kept, files not renamed);
Moodle 3.x (3.9 and 3.11 LTS included) ends that folder with one more ``_``
(``..._assignsubmission_file_/``). Without folders every file is ``<Full Name>_<participant
id>_assignsubmission_file_<file name>``. Online text is the plugin ``onlinetext``:
``..._assignsubmission_onlinetext[_]/onlinetext.html`` (or ``..._onlinetext_onlinetext.html``):
a student who handed in only that has no notebook, and the table says so.

Moodle writes underscores of the name as spaces; with blind marking the name is "Participant".
The participant id is Moodle's per-assignment identifier (it differs between assignments), so
across lessons a student is known by name or by the roster. A team submission is named after
the team (``<group name>_<group id>``, or "Default group" with no id for students in no group):
its members are the roster rows whose group column names the team; without such a roster the
team's files are skipped, never given to a student named after the team.

Source: Moodle's ``mod/assign/classes/downloader.php`` (4.x: ``get_student_prefix``,
``load_submissionplugin_filelist``), ``mod/assign/locallib.php`` (3.x:
``download_submissions``) and the ``downloadasfolders_help`` string.
"""

import re

from ..errors import Skip
from ..students import squash
from .base import FolderOrFlat, Found

WHO = r"(?:(?P<name>.+?)_(?P<participant>\d+)|(?P<default>Default group))_assignsubmission_"
FOLDER = re.compile(WHO + r"(?P<plugin>[a-z]+)_?")
FLAT = re.compile(WHO + r"(?P<plugin>file|onlinetext)_(?P<file>.+)", re.DOTALL)
TEXT_PLUGINS = {"onlinetext": "online text (Moodle)"}


class Moodle(FolderOrFlat):
    name, label = "moodle", "Moodle"
    FOLDER, FLAT = FOLDER, FLAT
    naming = "<Full Name>_<participant id>_assignsubmission_file[/ or _]<file>"

    def _found(self, match: re.Match, original: str) -> Found:
        found = self._who(match, original)
        found.instead = TEXT_PLUGINS.get(match["plugin"], "")
        return found

    def _who(self, match: re.Match, original: str) -> Found:
        if match["default"]:
            raise Skip("a team submission of Moodle's \"Default group\" (students in no "
                       "group): Moodle does not say who they are")
        name, participant = match["name"].strip(), match["participant"]
        if name.casefold() == "participant":  # blind marking: no name
            identity = self.identity(f"moodle-participant:{participant}", "Moodle participant",
                                     lms_id=participant, stable=False,
                                     folder_prefix="participant")
            return Found([identity], original, notes=[
                "blind marking: Moodle's participant id differs per assignment"])
        identity = self.identity(f"moodle:{squash(name)}", "Moodle participant",
                                 lms_id=participant, name=name, stable=False)
        return Found([identity], original, team=name)
