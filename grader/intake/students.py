"""Whose file it is: the LMS's identities, the class roster, and student ids as folder names.

With a roster (CSV: ``id`` and ``name``, optionally ``lms_id``, ``email`` and ``group``), a file's
student is the roster row whose id, LMS id or e-mail is the LMS's id for the student, else the one
row whose name is the LMS's name (accents, case, punctuation and word order aside). Two rows of
that name, or two accounts that match one row by name, are ambiguous: skipped and reported. Without
a roster the LMS's own id is the student (Canvas user id, Gradescope SID, exchange user, file-name
id), or the name where the LMS has no stable id. An id becomes a folder name only if it is one:
``..``, path separators, control characters and ids over ``MAX_ID_LENGTH`` are refused; spaces and
non-ASCII letters are mapped to ASCII (``Zoë Ñandú`` -> ``Zoe-Nandu``; a name with no ASCII letters
-> its Punycode), and the table says so. The roster's group column says who shares a group's
submission (Canvas's export of a group set, with ``canvas_user_id``, ``login_id`` and
``group_name``, is such a roster).
"""

import csv
import io
import re
import unicodedata
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from .errors import CollectError, Skip

MAX_ID_LENGTH = 64
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]*")


@dataclass(frozen=True)
class Identity:
    """Who a file belongs to, as the LMS says it."""

    lms: str  # the LMS, as messages name it ("Canvas")
    key: str  # the same student gets the same key in every download of this LMS
    id_label: str  # what the LMS's id is, in messages ("Canvas user")
    lms_id: str | None = None  # the LMS's id for the student
    name: str | None = None  # the name the LMS wrote
    email: str | None = None
    stable: bool = True  # lms_id names the student in every assignment (not Moodle's)
    course_id: bool = False  # lms_id is the course's own student id (exchange, file names, SID)
    folder_prefix: str = ""  # before an id of one assignment only, as a folder name

    def describe(self) -> str:
        text = f"{self.id_label} {self.lms_id}" if self.lms_id else self.id_label
        if self.name:
            text += f" ({self.name})" if self.lms_id else f" '{self.name}'"
        return text


def squash(name: str) -> str:
    """A name for comparison: letters and digits only, accents and case folded."""
    text = unicodedata.normalize("NFKD", name)
    text = "".join(c for c in text if not unicodedata.combining(c)).casefold()
    return "".join(c for c in text if c.isalnum())


def name_variants(name: str) -> set[str]:
    """A full name in every word order an LMS may write it in ("Bob Smith", "Smith, Bob")."""
    if "," in name:
        last, first = name.split(",", 1)
        words = first.split() + last.split()
    else:
        words = name.split()
    variants = {squash(name)}
    for k in range(len(words)):
        variants.add(squash(" ".join(words[k:] + words[:k])))
    return variants - {""}


def folder_id(raw: str) -> tuple[str, str | None]:
    """(the folder name for a student id, a note if it had to be changed); Skip if it cannot be
    one."""
    if raw in ("", ".", "..") or "/" in raw or "\\" in raw:
        raise Skip(f"student id {raw!r} cannot be a folder name")
    if any(unicodedata.category(c)[0] == "C" for c in raw):
        raise Skip(f"student id {raw!r} holds control characters")
    if len(raw) > MAX_ID_LENGTH:
        raise Skip(f"student id {raw[:20]!r}... is {len(raw)} characters long "
                   f"(at most {MAX_ID_LENGTH})")
    if SAFE_ID.fullmatch(raw):
        return raw, None
    folded = "".join(c for c in unicodedata.normalize("NFKD", raw)
                     if not unicodedata.combining(c))
    slug = re.sub(r"[^A-Za-z0-9._@+-]+", "-", folded).strip("-._")
    if not folded.isascii() or not slug:  # letters with no ASCII form: keep them, as Punycode
        spaced = re.sub(r"[\s/\\]+", "-", unicodedata.normalize("NFC", raw).strip())
        slug = "xn--" + spaced.encode("punycode").decode("ascii")
        slug = re.sub(r"[^A-Za-z0-9._@+-]+", "-", slug).strip("-._")
    if len(slug) > MAX_ID_LENGTH or not SAFE_ID.fullmatch(slug):
        raise Skip(f"student id {raw!r} has no usable folder name")
    return slug, f"id {raw!r} written as {slug!r}"


@dataclass
class RosterRow:
    id: str
    name: str


class Roster:
    """The class list: student ids, names and the LMS's ids for them."""

    ID = ("id", "student_id", "sis_user_id", "username", "login_id")
    NAME = ("name", "full_name", "student_name", "student")
    FIRST = ("first_name", "first", "given_name")
    LAST = ("last_name", "last", "family_name", "surname")
    LMS_ID = ("lms_id", "canvas_id", "canvas_user_id", "user_id", "sid", "participant_id")
    EMAIL = ("email", "e_mail", "email_address")
    GROUP = ("group", "group_name", "team", "team_name")

    def __init__(self, rows: list[dict[str, str]], where: str = "the roster"):
        self.rows: dict[str, RosterRow] = {}
        self.ids: dict[str, set[str]] = defaultdict(set)  # the course's ids
        self.lms_ids: dict[str, set[str]] = defaultdict(set)  # the LMS's ids and e-mails
        self.names: dict[str, set[str]] = defaultdict(set)
        self.groups: dict[str, list[str]] = defaultdict(list)  # squashed group -> its ids
        self.group_of: dict[str, str] = {}  # id -> the group's name
        for number, row in enumerate(rows, start=2):
            sid = row.get("id", "").strip()
            if not sid:
                continue
            if sid in self.rows:
                raise CollectError(f"{where}, line {number}: id {sid!r} is there twice")
            name = row.get("name", "").strip()
            self.rows[sid] = RosterRow(sid, name)
            self.ids[sid.casefold()].add(sid)
            for alias in (row.get("lms_id", ""), row.get("email", "")):
                for value in alias.split(";"):
                    if value.strip():
                        self.lms_ids[value.strip().casefold()].add(sid)
            for variant in name_variants(name) if name else ():
                self.names[variant].add(sid)
            if group := row.get("group", "").strip():
                self.groups[squash(group)].append(sid)
                self.group_of[sid] = group

    @classmethod
    def read(cls, path: Path) -> "Roster":
        try:
            text = path.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as err:
            raise CollectError(f"cannot read the roster {path}: {err}") from None
        reader = csv.DictReader(io.StringIO(text))
        headers = {re.sub(r"[\s_-]+", "_", (h or "").strip().casefold()): h
                   for h in reader.fieldnames or []}

        def column(options):
            return next((headers[o] for o in options if o in headers), None)

        columns = {key: column(options) for key, options in (
            ("id", cls.ID), ("name", cls.NAME), ("first", cls.FIRST), ("last", cls.LAST),
            ("lms_id", cls.LMS_ID), ("email", cls.EMAIL), ("group", cls.GROUP))}
        if columns["id"] is None:
            raise CollectError(f"the roster {path} has no id column (one of {', '.join(cls.ID)}; "
                               f"found {', '.join(reader.fieldnames or []) or 'no header'})")
        rows = []
        for row in reader:
            values = {key: (row.get(header) or "").strip() if header else ""
                      for key, header in columns.items()}
            name = values["name"] or " ".join(filter(None, (values["first"], values["last"])))
            rows.append({"id": values["id"], "name": name, "lms_id": values["lms_id"],
                         "email": values["email"], "group": values["group"]})
        return cls(rows, str(path))

    def members(self, team: str) -> list[str]:
        """The ids of the roster rows whose group is ``team`` (case and accents aside)."""
        return list(self.groups.get(squash(team), ()))

    def resolve(self, identity: Identity) -> tuple[str, str]:
        """(student id, how: "roster-id" or "roster-name"); Skip if the roster cannot tell.

        An LMS's own id (a Canvas user id) is looked up in the lms_id column only, never among
        the course's ids, which may be numbers too; a Moodle participant id (another one in
        every assignment) is not looked up at all."""
        lookups = []
        if identity.lms_id and identity.course_id:
            lookups.append((identity.lms_id, self.ids.get(identity.lms_id.casefold(), set())
                            | self.lms_ids.get(identity.lms_id.casefold(), set())))
        elif identity.lms_id and identity.stable:
            lookups.append((identity.lms_id, self.lms_ids.get(identity.lms_id.casefold(), set())))
        if identity.email:
            lookups.append((identity.email, self.lms_ids.get(identity.email.casefold(), set())))
        for value, ids in lookups:
            if len(ids) == 1:
                return next(iter(ids)), "roster-id"
            if len(ids) > 1:
                raise Skip(f"{identity.describe()}: the roster gives {value!r} to "
                           f"{', '.join(sorted(ids))}")
        if identity.name:
            ids = set().union(*(self.names.get(v, set()) for v in name_variants(identity.name)))
            if len(ids) == 1:
                return next(iter(ids)), "roster-name"
            if len(ids) > 1:
                raise Skip(f"ambiguous: {len(ids)} students on the roster are named like "
                           f"{identity.name!r} ({', '.join(sorted(ids))}); add the LMS's id "
                           f"({identity.lms_id or 'e-mail'}) to the right one's lms_id column")
        raise Skip(f"{identity.describe()} is not on the roster")


def resolve(identity: Identity, roster: Roster | None) -> tuple[str, str]:
    """(raw student id, how) for one identity: from the roster, else from the LMS."""
    if roster is not None:
        return roster.resolve(identity)
    if identity.lms_id and identity.stable:
        return identity.lms_id, "lms-id"
    if identity.name:
        return re.sub(r"\s+", "-", identity.name.strip()).casefold(), "lms-name"
    if identity.lms_id:  # an id of this assignment only (anonymous grading)
        return f"{identity.folder_prefix}{identity.lms_id}", "lms-id"
    raise Skip("the download does not say whose file it is")
