"""nbgrader's exchange (``nbgrader submit``), read from its ``inbound/`` folder or a zip of it.

Each submission is a folder ``<student id>+<assignment>+<timestamp>``, with ``+<random string>``
at the end since nbgrader 0.7 (``add_random_string``), holding the submitted files,
``timestamp.txt`` (the submission time, ``%Y-%m-%d %H:%M:%S.%f %Z``) and
``submission_secret.txt``, which is kept beside the notebook so that the student's
``nbgrader fetch_feedback`` finds the feedback released for it. Source: nbgrader's
``exchange/default/submit.py`` and ``collect.py`` (which splits the folder name from the right,
so ids may hold ``+``).

Whose a folder is, is checked as nbgrader's ``collect.py`` checks it (``check_owner``): every
student of the hub may create folders in ``inbound/``, under their own Unix account, so a folder
``<student>+...`` must belong to the account named ``<student>`` (``pwd.getpwuid(st_uid)
.pw_name``, compared with the id in the folder's name as it is, for nbgrader's ``submit.py``
names the folder with ``get_username()``: the Unix user, or ``JUPYTERHUB_USER`` for
``jovyan``). Where nbgrader only warns, a folder that belongs to another user is skipped, with a
row naming its owner: a later folder made in a student's name by someone else does not replace
their submission, and a student's folder renamed to another's name is not that other's. Root
and the account running collect are believed too: they could write submitted/ themselves, and a
copy of the exchange the instructor made belongs to them. The owner is that of the folder
opened (``download.py`` follows no link). What is not checked: a zip of the exchange carries no
owners, so from a zip whose a folder is rests on its name alone; and a hub that runs every
student as one account (``jovyan``) cannot tell them apart by owner (collect, run as that
account, believes them all; run as another, it names the owner in every row).
"""

import functools
import os
import pwd
import re
import zipfile

from ...timestamps import parse_time
from ...workspace import EXCHANGE_FILES
from ..download import Entry
from ..errors import Skip
from .base import Format, Found

FOLDER = re.compile(r".+\+[^+]+\+\d{4}-\d\d-\d\d[^+]*(?:\+[^+]*)?")
MAX_SECRET_BYTES = 1024  # nbgrader's is 32 hex digits
MAX_TIMESTAMP_BYTES = 1024  # nbgrader's is 30 characters


class Exchange(Format):
    name, label = "exchange", "nbgrader exchange"
    own_files = frozenset(EXCHANGE_FILES)
    names_each_submitter = True

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
                    found[entry.folder] = entry.read(MAX_TIMESTAMP_BYTES, "a time").decode()
                except (Skip, UnicodeDecodeError, zipfile.BadZipFile, OSError):
                    pass
        return found

    @functools.cached_property
    def secrets(self) -> dict[str, bytes]:
        """Submission folder -> its submission_secret.txt."""
        found = {}
        for entry in self.entries:
            if entry.name == "submission_secret.txt" and len(entry.parts) > 1:
                try:
                    found[entry.folder] = bytes(entry.read(MAX_SECRET_BYTES, "a secret"))
                except (Skip, zipfile.BadZipFile, OSError):
                    continue
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
        _check_owner(entry, folder, student)
        time, time_from = parse_time(self.times.get(folder, "")), "the exchange's timestamp.txt"
        if time is None:
            time, time_from = parse_time(stamp), "the exchange folder's name"
        notes = [f"submitted as assignment {assignment!r}"] if assignment not in self.lessons \
            else []
        identity = self.identity(f"id:{student}", "exchange user", lms_id=student,
                                 course_id=True)
        return Found([identity], "/".join(entry.parts[index + 1:]), time,
                     time_from if time else "", notes=notes, secret=self.secrets.get(folder))


def _check_owner(entry: Entry, folder: str, student: str) -> None:
    """Skip unless ``folder`` belongs to ``student``'s Unix account (or to root, or to whoever
    runs collect); from a zip, nothing to check."""
    uid = entry.owner(folder)
    if uid is None or uid in (0, os.geteuid()):
        return
    try:
        owner = pwd.getpwuid(uid).pw_name
    except KeyError:
        owner = f"uid {uid}, a user this machine does not know"
    if owner != student:
        raise Skip(f"the exchange folder {folder.rsplit('/', 1)[-1]!r} belongs to Unix user "
                   f"{owner!r}, not to {student!r}: nbgrader submits under the student's own "
                   f"account, so someone else made it in {student}'s name; not collected "
                   f"(nbgrader's collect warns of the same; if the hub runs every student as "
                   f"one account, collect a zip of inbound/, whose owners are not checked)")
