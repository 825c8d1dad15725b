"""What an LMS format is to collect: how its downloads are told from others', and whose file
each entry of one is.

A format is one class: its ``name`` (``--format``), its ``label`` (in messages), ``sure`` (a sign
no other LMS's download has, such as Gradescope's metadata file) or ``named_like`` (one entry is
named the way this LMS names files: the formats vote, file by file), and ``parse``, which says
whose an entry is (``Found``) or raises ``Skip`` saying why it cannot tell. ``Found`` also says
when a file stands for a submission without a notebook (a link, online text, a receipt:
``instead``), when it is a draft the student never submitted (``draft``) and when it is a team's
(``team``, whose members the roster's group column names). Detection and the
order in which formats are tried live in ``formats/__init__.py``.
"""

import functools
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar

from ..download import Entry
from ..errors import Skip
from ..students import Identity


@dataclass
class Found:
    """What the LMS's naming says about one file."""

    identities: list[Identity]
    original: str  # the student's own file name, with the LMS's additions taken off
    time: datetime | None = None
    time_from: str = ""
    late: bool = False
    notes: list[str] = field(default_factory=list)
    secret: bytes | None = None  # nbgrader's submission_secret.txt, for fetch_feedback
    instead: str = ""  # what the student handed in instead of a notebook ("a link", ...)
    draft: str = ""  # why this file is a draft the student did not submit: never graded
    team: str | None = None  # a team's submission: the roster's group column names its members


class Format:
    """One LMS's download layout, built once per download with all of its entries."""

    name: ClassVar[str]
    label: ClassVar[str]
    own_files: ClassVar[frozenset[str]] = frozenset()  # the LMS's files, not a student's
    # each submission names its student outright (an exchange user, a SID): one student's many
    # submissions are that, not a naming collect misread (``guesses``)
    names_each_submitter: ClassVar[bool] = False

    def __init__(self, entries: list[Entry], lessons: list[str]):
        self.entries, self.lessons = entries, lessons

    @classmethod
    def sure(cls, entries: list[Entry]) -> bool:
        """The download holds a sign of this LMS that no other has."""
        return False

    @classmethod
    def named_like(cls, entry: Entry) -> bool:
        """``entry`` is named as this LMS names students' files."""
        return False

    def parse(self, entry: Entry) -> Found:
        """Whose file ``entry`` is; Skip saying why if its naming does not tell."""
        raise NotImplementedError

    def is_own_file(self, entry: Entry) -> bool:
        return entry.name in self.own_files

    def identity(self, key: str, id_label: str, **fields) -> Identity:
        """A student as this LMS names them; ``key`` is the same in every download."""
        return Identity(self.label, key, id_label, **fields)

    def student_folder(self, entry: Entry) -> str:
        """The innermost folder above a file that is not a lesson's, if it is a student's."""
        folders = [p for p in entry.parts[:-1] if p not in self.lessons]
        if not folders:
            raise Skip("neither its name nor a folder says whose file it is")
        folder = folders[-1]
        if folder in self.wrappers:
            raise Skip(f"neither its name nor a folder says whose file it is ({folder}/ holds "
                       f"every file)")
        return folder

    @functools.cached_property
    def wrappers(self) -> set[str]:
        """Folders that hold every notebook of the download: a wrapper, not a student."""
        notebooks = [e for e in self.entries if e.is_notebook()]
        if len(notebooks) < 2:
            return set()
        shared = set(notebooks[0].parts[:-1])
        for entry in notebooks[1:]:
            shared &= set(entry.parts[:-1])
        return shared


class FolderOrFlat(Format):
    """A format whose submissions are either a folder named after the student (files inside)
    or files with that name in front: ``FOLDER`` matches such a folder's name, ``FLAT`` a flat
    file's (its group ``file`` the student's own file name), ``naming`` says how the LMS names
    files (in the row of a file it cannot place), and ``_found`` turns a match into a Found."""

    FOLDER: ClassVar[re.Pattern]
    FLAT: ClassVar[re.Pattern]
    naming: ClassVar[str]

    @classmethod
    def named_like(cls, entry: Entry) -> bool:
        return cls.FLAT.fullmatch(entry.name) is not None \
            or any(cls.FOLDER.fullmatch(part) for part in entry.parts[:-1])

    def parse(self, entry: Entry) -> Found:
        for index, part in enumerate(entry.parts[:-1]):
            if match := self.FOLDER.fullmatch(part):
                return self._found(match, "/".join(entry.parts[index + 1:]))
        if match := self.FLAT.fullmatch(entry.name):
            return self._found(match, match["file"])
        raise Skip(f"not named as {self.label} names files ({self.naming})")

    def _found(self, match: re.Match, original: str) -> Found:
        raise NotImplementedError
