"""Collecting a class's notebooks from an LMS download into nbgrader's submitted/ folder.

``collect(source, workspace)`` reads one download (a zip, or a folder such as nbgrader's
exchange inbound/) and writes ``submitted/<student>/<lesson>/<lesson>.ipynb`` with nbgrader's
``timestamp.txt`` beside it. Every file of the download gets a row in the table it returns: the
student and lesson it went to and its outcome (collected, renamed, merged, superseded, unchanged,
ignored, or skipped and why). Nobody is dropped, merged or graded under another id without a
row saying so; one bad file never stops the others.

Whose file it is comes from the LMS's naming, read as each LMS documents or writes it:

- **Canvas** (Submissions > "Download Submissions"): every file lies at the top of the zip as
  ``<name>_<user id>_<attachment id>_<the student's file name>``, with ``LATE_`` before the user
  id when Canvas counted the submission late, and ``anon_<id>`` instead of name and user id when
  the assignment is anonymous. ``<name>`` is the student's sortable name ("Smith, Bob"),
  lowercased and stripped of everything but letters, digits and ``_``: ``smithbob``, with
  non-ASCII letters kept (``müllerjörg``) and underscores kept (``o_brienpat``). Canvas folds
  ``_<digits>_`` out of names, so the first ``_<digits>_<digits>_`` is the ids: the numbers
  anchor the parse, never the name. The user id is the same in every assignment. Source: Canvas's
  ``lib/content_zipper.rb`` (``get_filename``, ``sanitize_user_name``, ``add_upload_submission``).
- **Moodle** (assignment > "Download all submissions"): with "Download submissions in folders"
  (the default since Moodle 3.1) each student's files lie in
  ``<Full Name>_<participant id>_assignsubmission_file/`` (subfolders kept, files not renamed);
  without it every file is ``<Full Name>_<participant id>_assignsubmission_file_<file name>``.
  Moodle writes underscores of the name as spaces; with blind marking the name is
  "Participant". The participant id is Moodle's per-assignment identifier (it differs between
  assignments), so across lessons a student is known by name or by the roster. Source: Moodle's
  ``mod/assign/classes/downloader.php`` (``get_student_prefix``,
  ``load_submissionplugin_filelist``) and the ``downloadasfolders_help`` string.
- **Gradescope** (assignment > "Export Submissions"): a folder per submission,
  ``submission_<id>/`` with the submitted files inside, and ``submission_metadata.yml`` beside
  them mapping each folder to ``:submitters:`` (each with ``:name:``, ``:sid:``, ``:email:``)
  and ``:created_at:``, the submission time. A group submission lists several submitters: each
  gets the notebook. Students are known by SID, else e-mail, else name. Gradescope does not
  publish this layout; it is what its exports hold (written from Ruby, hence the ``:key``
  names), the same layout otter-grader's Gradescope reader relies on.
- **Google Classroom / Drive**: "Make a copy for each student" names each student's copy
  ``<Full Name> - <title>`` (Classroom's behaviour, not a documented format); a Drive download of
  a folder keeps Drive's folder tree, so per-student folders ``<Full Name>/<file>`` work too.
  Classroom gives names only, no ids: the roster, or the name itself, is the student, and two
  students of one name cannot be told apart (the table says so where it matters).
- **nbgrader's exchange** (``nbgrader submit``): ``inbound/<student id>+<assignment>+<timestamp>``
  with ``+<random string>`` at the end since nbgrader 0.7 (``add_random_string``), the submitted
  files inside, ``timestamp.txt`` holding the submission time (format
  ``%Y-%m-%d %H:%M:%S.%f %Z``) and ``submission_secret.txt``, kept beside the notebook so that
  the student's ``nbgrader fetch_feedback`` finds the feedback released for it. Source:
  nbgrader's ``exchange/default/submit.py`` and ``collect.py`` (which splits the folder name
  from the right, so ids may hold ``+``).
- **Files** (this course's own naming, e.g. the demo class): ``<student id>_<file>`` anywhere in
  the zip, or per-student folders ``<student>/<file>`` (also a zipped ``submitted/`` tree).

The format is detected (``--format`` overrides it). The lesson is never read from a file name:
it is the course lesson whose released nbgrader cells (their grade_ids) the notebook holds, so
``Copy of ...``, ``(1)`` and Canvas's renaming do not matter. Only a file that is not a readable
notebook (empty, cut short, not JSON), or a notebook without nbgrader cells, takes its lesson
from ``--lesson`` or a lesson name in its file name, so that grading reports it as ungradable
rather than losing the student.

Student ids: with a roster (CSV: ``id`` and ``name``, optionally ``lms_id`` and ``email``), a
file's student is the roster row whose id, LMS id or e-mail is the LMS's id for the student, else
the one row whose name is the LMS's name (accents, case, punctuation and word order aside). Two
rows of that name, or two accounts that match one row by name, are ambiguous: skipped and
reported. Without a roster the LMS's own id is the student (Canvas user id, Gradescope SID,
exchange user, file-name id), or the name where the LMS has no stable id. An id becomes a folder
name only if it is one: ``..``, path separators, control characters and ids over
``MAX_ID_LENGTH`` are refused; spaces and non-ASCII letters are mapped to ASCII (``Zoë Ñandú`` ->
``Zoe-Nandu``; a name with no ASCII letters -> its Punycode), and the table says so.

A student's own zip inside the download is unpacked as that student's files, never read for
other students' names. Several notebooks of one student and lesson: the newest is kept (the
LMS's time, else the zip entry's time) and the others are shown as superseded. The workspace
keeps ``collected.json``: each download's hash (a download collected before is not collected
again), which identity each student id was collected from, and each collected file's source and
time, so a second download of a lesson only adds newer files and never makes a second student.
"""

import csv
import dataclasses
import functools
import hashlib
import io
import json
import os
import re
import unicodedata
import zipfile
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from .course import Workspace, lesson_names
from .grading.submissions import released_cells

FORMATS = ("canvas", "moodle", "gradescope", "classroom", "exchange", "files")
FORMAT_NAMES = {"canvas": "Canvas", "moodle": "Moodle", "gradescope": "Gradescope",
                "classroom": "Google Classroom/Drive", "exchange": "nbgrader exchange",
                "files": "<student>_<file> names or per-student folders"}
MANIFEST = "collected.json"
MAX_ID_LENGTH = 64
MAX_NOTEBOOK_BYTES = 64 << 20
MAX_NESTED_ZIP_BYTES = 256 << 20
MAX_NESTED_ENTRIES = 1000
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"  # nbgrader's Exchange.timestamp_format, in UTC
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]*")

CANVAS = re.compile(r"(?:(?P<name>.*?)_)??(?:(?P<late>LATE)_)?(?P<user>\d+|anon_[A-Za-z0-9]+)"
                    r"_(?P<attachment>\d+)_(?P<file>.+)", re.DOTALL)
MOODLE_FOLDER = re.compile(r"(?P<name>.+)_(?P<participant>\d+)_assignsubmission_file")
MOODLE_FLAT = re.compile(r"(?P<name>.+)_(?P<participant>\d+)_assignsubmission_file_(?P<file>.+)",
                         re.DOTALL)
CLASSROOM = re.compile(r"(?P<name>.+?) - (?P<file>.+)", re.DOTALL)
EXCHANGE = re.compile(r".+\+[^+]+\+\d{4}-\d\d-\d\d[^+]*(?:\+[^+]*)?")
GRADESCOPE_METADATA = "submission_metadata.yml"
COPY_OF = re.compile(r"^(?:copy of )+", re.IGNORECASE)
JUNK_NAMES = {".DS_Store", "Thumbs.db", "desktop.ini"}
EXCHANGE_FILES = {"timestamp.txt", "submission_secret.txt"}
MAX_SECRET_BYTES = 1024


class CollectError(Exception):
    """The download or the roster as a whole cannot be read; the message says why."""


class Skip(Exception):
    """This file (or this student in it) is not collected; the message says why."""


# ---------------------------------------------------------------- the download's files

@dataclass
class Entry:
    """One file of the download."""

    path: str  # inside the download, "/"-separated
    size: int
    time: datetime | None  # UTC
    read: Callable[[], bytes]
    order: tuple = ()
    time_kind: str = "the zip entry's time"

    @property
    def parts(self) -> list[str]:
        return self.path.split("/")

    @property
    def name(self) -> str:
        return self.parts[-1]


def _zip_name(info: zipfile.ZipInfo) -> str:
    name = info.filename
    if not info.flag_bits & 0x800:  # no UTF-8 flag: read as cp437, but most tools write UTF-8
        try:
            name = name.encode("cp437").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            pass
    return unicodedata.normalize("NFC", name.replace("\\", "/"))


def _zip_time(info: zipfile.ZipInfo) -> datetime | None:
    """A zip entry's time (local time without a zone, as zip stores it) in UTC; None if unset."""
    if info.date_time[0] <= 1980:
        return None
    try:
        return datetime(*info.date_time).astimezone().astimezone(timezone.utc)
    except ValueError:
        return None


def zip_entries(archive: zipfile.ZipFile, order: tuple = ()) -> list[Entry]:
    entries = []
    for index, info in enumerate(archive.infolist()):
        if info.is_dir():
            continue
        entries.append(Entry(_zip_name(info).strip("/"), info.file_size, _zip_time(info),
                             functools.partial(archive.read, info), (*order, index)))
    times = {e.time for e in entries}
    if len(entries) > 1 and None not in times and max(times) - min(times) <= timedelta(seconds=2):
        # every entry has the same time: it says when the zip was made, not when each file was
        # submitted (Canvas, for one, writes the download's time)
        for entry in entries:
            entry.time = None
    return entries


def folder_entries(folder: Path) -> list[Entry]:
    entries = []
    for index, path in enumerate(sorted(p for p in folder.rglob("*") if p.is_file())):
        stat = path.stat()
        entries.append(Entry(path.relative_to(folder).as_posix(), stat.st_size,
                             datetime.fromtimestamp(stat.st_mtime, timezone.utc),
                             path.read_bytes, (index,), "the file's modification time"))
    return entries


def is_junk(path: str) -> bool:
    parts = path.split("/")
    return parts[0] == "__MACOSX" or parts[-1] in JUNK_NAMES or parts[-1].startswith("._")


def download_hash(source: Path) -> str:
    digest = hashlib.sha256()
    if source.is_dir():
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            digest.update(path.relative_to(source).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    else:
        with source.open("rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------- students

@dataclass(frozen=True)
class Identity:
    """Who a file belongs to, as the LMS says it."""

    lms: str
    key: str  # the same student gets the same key in every download of this LMS
    lms_id: str | None = None  # the LMS's id for the student
    name: str | None = None  # the name the LMS wrote
    email: str | None = None
    stable: bool = True  # lms_id names the student in every assignment (not Moodle's)
    course_id: bool = False  # lms_id is the course's own student id (exchange, file names, SID)

    def describe(self) -> str:
        label = {"canvas": "Canvas user", "moodle": "Moodle participant",
                 "gradescope": "Gradescope SID", "classroom": "Classroom/Drive name",
                 "exchange": "exchange user", "files": "file id"}[self.lms]
        if self.lms == "gradescope" and self.lms_id and "@" in self.lms_id:
            label = "Gradescope e-mail"
        if self.lms == "files" and not self.lms_id:
            label = "folder"
        text = f"{label} {self.lms_id}" if self.lms_id else label
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

    ID = ("id", "student_id", "sis_user_id", "username")
    NAME = ("name", "full_name", "student_name", "student")
    FIRST = ("first_name", "first", "given_name")
    LAST = ("last_name", "last", "family_name", "surname")
    LMS_ID = ("lms_id", "canvas_id", "canvas_user_id", "user_id", "sid", "participant_id")
    EMAIL = ("email", "e_mail", "email_address")

    def __init__(self, rows: list[dict[str, str]], where: str = "the roster"):
        self.rows: dict[str, RosterRow] = {}
        self.ids: dict[str, set[str]] = defaultdict(set)  # the course's ids
        self.lms_ids: dict[str, set[str]] = defaultdict(set)  # the LMS's ids and e-mails
        self.names: dict[str, set[str]] = defaultdict(set)
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
            ("lms_id", cls.LMS_ID), ("email", cls.EMAIL))}
        if columns["id"] is None:
            raise CollectError(f"the roster {path} has no id column (one of {', '.join(cls.ID)}; "
                               f"found {', '.join(reader.fieldnames or []) or 'no header'})")
        rows = []
        for row in reader:
            values = {key: (row.get(header) or "").strip() if header else ""
                      for key, header in columns.items()}
            name = values["name"] or " ".join(filter(None, (values["first"], values["last"])))
            rows.append({"id": values["id"], "name": name, "lms_id": values["lms_id"],
                         "email": values["email"]})
        return cls(rows, str(path))

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
        prefix = "participant" if identity.lms == "moodle" else ""
        return f"{prefix}{identity.lms_id}", "lms-id"
    raise Skip("the download does not say whose file it is")


# ---------------------------------------------------------------- lessons

@functools.cache
def lesson_cells() -> dict[str, frozenset[str]]:
    """Each lesson's released nbgrader grade_ids."""
    return {lesson: frozenset(released_cells(lesson)) for lesson in lesson_names()}


@dataclass
class Content:
    lesson: str | None
    readable: bool  # a notebook (JSON with a list of cells)
    graded: bool = True  # it has nbgrader cells
    problem: str | None = None  # why the content names no lesson
    note: str | None = None


def lesson_of(data: bytes) -> Content:
    """The lesson a notebook's nbgrader cells belong to."""
    if not data.strip():
        return Content(None, False, False, "the file is empty")
    try:
        notebook = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return Content(None, False, False, "not a text file")
    except json.JSONDecodeError as err:
        return Content(None, False, False, f"not valid JSON ({err.msg} at line {err.lineno})")
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        return Content(None, False, False, "JSON, but not a notebook")
    ids = set()
    for cell in cells:
        try:
            grade_id = cell["metadata"]["nbgrader"]["grade_id"]
        except (KeyError, TypeError):
            continue
        if isinstance(grade_id, str):
            ids.add(grade_id)
    if not ids:
        return Content(None, True, False, "a notebook without nbgrader cells")
    scores = {lesson: len(ids & cells) / len(cells) for lesson, cells in lesson_cells().items()
              if cells}
    best = max(scores.values(), default=0)
    if best == 0:
        return Content(None, True, True, "its nbgrader cells belong to no lesson of this course")
    winners = sorted(lesson for lesson, score in scores.items() if score == best)
    if len(winners) > 1:
        return Content(None, True, True, f"its cells belong to {' and '.join(winners)} equally")
    others = sorted(lesson for lesson, score in scores.items() if 0 < score < best)
    return Content(winners[0], True, note=f"also holds cells of {', '.join(others)}"
                   if others else None)


def lesson_named(*names: str) -> str | None:
    """The one lesson whose name appears in these file names, if exactly one does."""
    found = {lesson for lesson in lesson_names() for name in names if lesson in name}
    return found.pop() if len(found) == 1 else None


# ---------------------------------------------------------------- the LMS formats

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


class Download:
    """A download's files and what its format knows beyond single file names."""

    def __init__(self, entries: list[Entry], lessons: list[str]):
        self.entries = entries
        self.lesson_numbers = {lesson.split("_", 1)[0] for lesson in lessons}
        self.lessons = lessons
        self._gradescope: dict | None = None
        self._exchange_times: dict[str, str] = {}
        self._exchange_secrets: dict[str, bytes] = {}
        for entry in entries:
            if entry.name == "timestamp.txt" and len(entry.parts) > 1:
                try:
                    self._exchange_times["/".join(entry.parts[:-1])] = entry.read().decode()
                except (UnicodeDecodeError, zipfile.BadZipFile, OSError):
                    pass
            elif entry.name == "submission_secret.txt" and len(entry.parts) > 1:
                try:
                    secret = entry.read()
                except (zipfile.BadZipFile, OSError):
                    continue
                if len(secret) <= MAX_SECRET_BYTES:  # nbgrader's is 32 hex digits
                    self._exchange_secrets["/".join(entry.parts[:-1])] = secret

    # -- detection

    def detect(self) -> str:
        paths = [e.path for e in self.entries]
        if any(EXCHANGE.fullmatch(part) for p in paths for part in p.split("/")[:-1]):
            return "exchange"
        if any(p.rsplit("/", 1)[-1] == GRADESCOPE_METADATA for p in paths):
            return "gradescope"
        files = [e for e in self.entries if e.name.lower().endswith((".ipynb", ".zip"))]
        files = files or self.entries
        votes = Counter()
        for entry in files:
            if any(MOODLE_FOLDER.fullmatch(p) for p in entry.parts[:-1]) \
                    or MOODLE_FLAT.fullmatch(entry.name):
                votes["moodle"] += 1
            elif CANVAS.fullmatch(entry.name):
                votes["canvas"] += 1
            elif CLASSROOM.fullmatch(entry.name):
                votes["classroom"] += 1
        if votes:
            fmt, count = votes.most_common(1)[0]
            if 2 * count >= len(files):
                return fmt
        return "files"

    # -- per format: Found, or Skip saying why the file does not follow the naming

    def canvas(self, entry: Entry) -> Found:
        match = CANVAS.fullmatch(entry.name)
        if not match:
            raise Skip("not named as Canvas names files (<name>_<user id>_<attachment id>_<file>)")
        user, name = match["user"], match["name"] or None
        anonymous = user.startswith("anon_")
        identity = Identity("canvas", f"canvas:{user}", user, name, stable=not anonymous)
        notes = ["LATE (Canvas)"] if match["late"] else []
        if anonymous:
            notes.append("anonymous grading: Canvas's anonymous id differs per assignment")
        return Found([identity], match["file"], late=bool(match["late"]), notes=notes)

    def moodle(self, entry: Entry) -> Found:
        for index, part in enumerate(entry.parts[:-1]):
            if match := MOODLE_FOLDER.fullmatch(part):
                return self._moodle(match, "/".join(entry.parts[index + 1:]))
        if match := MOODLE_FLAT.fullmatch(entry.name):
            return self._moodle(match, match["file"])
        raise Skip("not named as Moodle names files "
                   "(<Full Name>_<participant id>_assignsubmission_file[/ or _]<file>)")

    @staticmethod
    def _moodle(match: re.Match, original: str) -> Found:
        name, participant = match["name"].strip(), match["participant"]
        if name.casefold() == "participant":  # blind marking: no name
            identity = Identity("moodle", f"moodle-participant:{participant}", participant,
                                stable=False)
            return Found([identity], original, notes=[
                "blind marking: Moodle's participant id differs per assignment"])
        return Found([Identity("moodle", f"moodle:{squash(name)}", participant, name,
                               stable=False)], original)

    def gradescope_metadata(self) -> dict:
        if self._gradescope is None:
            self._gradescope = {}
            for entry in self.entries:
                if entry.name == GRADESCOPE_METADATA:
                    root = "/".join(entry.parts[:-1])
                    for key, value in _read_gradescope(entry.read()).items():
                        self._gradescope[f"{root}/{key}".strip("/")] = value
        return self._gradescope

    def gradescope(self, entry: Entry) -> Found:
        metadata = self.gradescope_metadata()
        for index in range(len(entry.parts) - 1, 0, -1):
            folder = "/".join(entry.parts[:index])
            if folder in metadata:
                break
        else:
            raise Skip(f"not inside a submission folder listed in {GRADESCOPE_METADATA}")
        submission = metadata[folder]
        identities = []
        for submitter in submission.get("submitters") or []:
            if not isinstance(submitter, dict):
                continue
            sid = str(submitter.get("sid") or "").strip() or None
            email = str(submitter.get("email") or "").strip() or None
            name = str(submitter.get("name") or "").strip() or None
            if sid:
                identities.append(Identity("gradescope", f"gradescope:{sid}", sid, name, email,
                                           course_id=True))
            elif email:
                identities.append(Identity("gradescope", f"gradescope:{email.casefold()}",
                                           email, name, email))
            elif name:
                identities.append(Identity("gradescope", f"gradescope-name:{squash(name)}",
                                           None, name))
        if not identities:
            raise Skip(f"{GRADESCOPE_METADATA} names no submitter for {folder.split('/')[-1]}")
        time = _as_utc(submission.get("created_at"))
        notes = []
        if len(identities) > 1:
            notes.append("group submission of " + ", ".join(i.describe() for i in identities))
        return Found(identities, "/".join(entry.parts[index:]), time,
                     "Gradescope's created_at" if time else "", notes=notes)

    def classroom(self, entry: Entry) -> Found:
        if match := CLASSROOM.fullmatch(entry.name):
            name, original = match["name"].strip(), match["file"]
        else:
            name, original = self._student_folder(entry), entry.name
        return Found([Identity("classroom", f"classroom:{squash(name)}", None, name)], original)

    def exchange(self, entry: Entry) -> Found:
        index = next((i for i, part in enumerate(entry.parts[:-1]) if EXCHANGE.fullmatch(part)),
                     None)
        if index is None:
            raise Skip("not inside an nbgrader exchange folder (<student>+<assignment>+<time>)")
        pieces = entry.parts[index].rsplit("+", 3)
        if _exchange_time(pieces[-1]) is not None:  # no random string
            student, assignment, stamp = "+".join(pieces[:-2]), pieces[-2], pieces[-1]
        else:
            student, assignment, stamp = pieces[0], pieces[1], pieces[2]
        folder = "/".join(entry.parts[:index + 1])
        text = self._exchange_times.get(folder)
        time, time_from = _exchange_time(text or ""), "the exchange's timestamp.txt"
        if time is None:
            time, time_from = _exchange_time(stamp), "the exchange folder's name"
        notes = [f"submitted as assignment {assignment!r}"] if assignment not in self.lessons \
            else []
        return Found([Identity("exchange", f"id:{student}", student, course_id=True)],
                     "/".join(entry.parts[index + 1:]), time, time_from if time else "",
                     notes=notes, secret=self._exchange_secrets.get(folder))

    def files(self, entry: Entry) -> Found:
        stem = COPY_OF.sub("", entry.name)
        prefix, _, rest = entry.name.partition("_")
        if rest and prefix not in self.lesson_numbers \
                and not any(stem.startswith(lesson) for lesson in self.lessons):
            raw, original = prefix, rest
        else:
            raw, original = self._student_folder(entry), entry.name
        if any(c.isspace() for c in raw):  # a person's name, not an id
            return Found([Identity("files", f"name:{squash(raw)}", None, raw)], original)
        return Found([Identity("files", f"id:{raw}", raw, course_id=True)], original)

    def _student_folder(self, entry: Entry) -> str:
        """The innermost folder above a file that is not a lesson's, if it is a student's."""
        folders = [p for p in entry.parts[:-1] if p not in self.lessons]
        if not folders:
            raise Skip("neither its name nor a folder says whose file it is")
        folder = folders[-1]
        if folder in self._wrappers():
            raise Skip(f"neither its name nor a folder says whose file it is ({folder}/ holds "
                       f"every file)")
        return folder

    @functools.cache  # noqa: B019 (one Download per collect)
    def _wrappers(self) -> set[str]:
        """Folders that hold every notebook of the download: a wrapper, not a student."""
        notebooks = [e for e in self.entries if e.name.lower().endswith(".ipynb")]
        if len(notebooks) < 2:
            return set()
        shared = set(notebooks[0].parts[:-1])
        for entry in notebooks[1:]:
            shared &= set(entry.parts[:-1])
        return shared


def _read_gradescope(data: bytes) -> dict:
    """submission_metadata.yml as {folder: {"submitters": [...], "created_at": ...}}, with
    Gradescope's Ruby-style ``:key`` names and any Ruby tags read as plain values."""
    try:
        import yaml
    except ImportError:
        raise CollectError("reading a Gradescope export needs PyYAML (pip install pyyaml)") \
            from None

    class Loader(yaml.SafeLoader):
        pass

    def plain(loader, suffix, node):
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node, deep=True)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_scalar(node)

    Loader.add_multi_constructor("!", plain)
    try:
        data = yaml.load(data.decode("utf-8"), Loader=Loader)  # noqa: S506 (a safe loader)
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise CollectError(f"cannot read {GRADESCOPE_METADATA}: {err}") from None

    def unsymbol(value):
        if isinstance(value, dict):
            return {str(k).lstrip(":"): unsymbol(v) for k, v in value.items()}
        if isinstance(value, list):
            return [unsymbol(v) for v in value]
        return value

    return unsymbol(data) if isinstance(data, dict) else {}


def _as_utc(value) -> datetime | None:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)) \
            .astimezone(timezone.utc)
    if isinstance(value, str):
        return _exchange_time(value)
    return None


def _exchange_time(text: str) -> datetime | None:
    """A time as nbgrader writes it (``2024-03-01 12:00:00.000000 UTC``) in UTC, read as
    nbgrader's parse_utc reads it (a time without a zone is UTC); None if it is not one."""
    import dateutil.parser
    import dateutil.tz

    text = text.strip()
    if not re.match(r"\d{4}-\d\d-\d\d", text):
        return None
    parts = text.split(" ")
    try:
        if len(parts) == 3 and re.fullmatch(r"[A-Za-z_/+-]+[A-Za-z]", parts[2]):
            zone = dateutil.tz.gettz(parts[2])
            if zone is None:
                return None
            time = dateutil.parser.parse(" ".join(parts[:2])).replace(tzinfo=zone)
        else:
            time = dateutil.parser.parse(text)
    except (ValueError, OverflowError):
        return None
    return _as_utc(time)


# ---------------------------------------------------------------- the collect itself

OUTCOMES = ("collected", "renamed", "merged", "unchanged", "superseded", "unpacked", "ignored",
            "skipped")


@dataclass
class Row:
    """One line of the table: a file of the download and what became of it (for a student)."""

    file: str
    student: str = "-"
    lesson: str = "-"
    outcome: str = "skipped"
    details: list[str] = field(default_factory=list)
    submitted: str = ""

    def skip(self, reason: str) -> "Row":
        self.outcome = "skipped"
        self.details.insert(0, reason)
        return self


@dataclass
class Candidate:
    """A notebook of the download for one student."""

    entry: Entry
    data: bytes
    identity: Identity
    found: Found
    row: Row
    lesson: str | None = None
    student: str | None = None
    how: str = ""

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def order(self) -> tuple:
        return (self.found.time or datetime.min.replace(tzinfo=timezone.utc), self.entry.order)


@dataclass
class Collection:
    """What one collect did."""

    source: str
    format: str
    rows: list[Row]
    already: str | None = None  # when the download was collected before
    dry_run: bool = False

    @property
    def skipped(self) -> list[Row]:
        return [r for r in self.rows if r.outcome == "skipped"]

    def table(self) -> str:
        header = ("file", "student", "lesson", "outcome", "submitted", "details")
        lines = [(r.file, r.student, r.lesson, r.outcome, r.submitted, "; ".join(r.details))
                 for r in self.rows]
        widths = [max(len(str(x)) for x in column) for column in zip(header, *lines, strict=True)]
        widths[-1] = 0

        def line(cells) -> str:
            return "  ".join(str(x).ljust(w) for x, w in zip(cells, widths, strict=False)).rstrip()

        return "\n".join([line(header), line([*("-" * w for w in widths[:-1]), "-------"])]
                         + [line(cells) for cells in lines])

    def summary(self) -> str:
        if self.already:
            return f"{self.source} was collected before ({self.already}): nothing to do"
        counts = Counter(r.outcome for r in self.rows)
        students = {r.student for r in self.rows
                    if r.outcome in ("collected", "renamed", "merged")}
        parts = [f"{counts[o]} {o}" for o in OUTCOMES if counts[o]]
        text = (f"{self.source} ({FORMAT_NAMES[self.format]}): {', '.join(parts) or 'no files'}; "
                f"{len(students)} students' notebooks {'would be ' if self.dry_run else ''}"
                f"written")
        if self.skipped:
            text += (f"\n{len(self.skipped)} skipped: those students are NOT collected; see "
                     f"the reasons above")
        return text


def collect(source: Path, workspace: Workspace, roster: Roster | None = None,
            lesson: str | None = None, fmt: str = "auto", dry_run: bool = False,
            again: bool = False) -> Collection:
    """Collect one download into the workspace's submitted/ folder; see the module docstring.
    A download collected before is not read again unless ``again``."""
    source = Path(source)
    lessons = lesson_names()
    if lesson is not None and lesson not in lessons:
        raise CollectError(f"unknown lesson {lesson!r}; the course's lessons: "
                           f"{', '.join(lessons)}")
    if fmt != "auto" and fmt not in FORMATS:
        raise CollectError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    if not source.exists():
        raise CollectError(f"{source} does not exist")
    manifest = Manifest.load(workspace)
    digest = download_hash(source)
    if digest in manifest.archives and not again:
        seen = manifest.archives[digest]
        return Collection(source.name, seen.get("format", "files"), [],
                          already=f"on {seen['collected']} as {seen['name']}")
    with _opened(source) as entries:
        download = Download([e for e in entries if not is_junk(e.path)], lessons)
        fmt = download.detect() if fmt == "auto" else fmt
        rows, candidates, others = _read_files(download, fmt, lesson)
    _identify_students(candidates, others, roster, manifest)
    winners = _supersede(candidates, manifest, workspace)
    _no_notebook(candidates, others)
    if not dry_run:
        _write(winners, workspace, manifest, digest, source.name, fmt)
    return Collection(source.name, fmt, rows, dry_run=dry_run)


class _opened:
    """The entries of a zip or a folder, open while in use."""

    def __init__(self, source: Path):
        self.source, self.archive = source, None

    def __enter__(self) -> list[Entry]:
        if self.source.is_dir():
            return folder_entries(self.source)
        try:
            self.archive = zipfile.ZipFile(self.source)
        except (zipfile.BadZipFile, OSError) as err:
            raise CollectError(f"{self.source} is not a zip file ({err})") from None
        return zip_entries(self.archive)

    def __exit__(self, *exc):
        if self.archive is not None:
            self.archive.close()


def _read_files(download: Download, fmt: str, lesson: str | None
                ) -> tuple[list[Row], list[Candidate], list[tuple[Identity, Row]]]:
    """A row per file; the notebooks as candidates; other files of known students."""
    parse = getattr(download, fmt)
    rows, candidates, others = [], [], []
    for entry in download.entries:
        if fmt == "gradescope" and entry.name == GRADESCOPE_METADATA or \
                fmt == "exchange" and entry.name in EXCHANGE_FILES:
            continue
        row = Row(entry.path)
        rows.append(row)
        try:
            _read_file(entry, parse, row, rows, candidates, others, lesson)
        except Exception as err:  # noqa: BLE001 (one bad file never stops the class)
            row.details = []
            row.skip(f"could not be read ({type(err).__name__}: {err})")
    return rows, candidates, others


def _read_file(entry: Entry, parse, row: Row, rows: list[Row], candidates: list,
               others: list, lesson: str | None) -> None:
    try:
        found = parse(entry)
    except Skip as why:
        if not entry.name.lower().endswith(".ipynb"):
            row.outcome, row.details = "ignored", [f"not a notebook; {why}"]
        else:
            row.skip(str(why))
        return
    except CollectError as err:
        row.skip(str(err))
        return
    row.details += found.notes
    if ".ipynb_checkpoints" in entry.parts:
        row.outcome, row.details = "ignored", ["Jupyter's autosave copy, not the notebook"]
    elif entry.name.lower().endswith(".zip"):
        _nested(entry, found, row, rows, candidates, others, lesson)
    elif not entry.name.lower().endswith(".ipynb"):
        row.outcome = "ignored"
        row.details.insert(0, "not a notebook")
        others += [(identity, row) for identity in found.identities]
    else:
        candidates += _candidates(entry, found, row, rows, lesson)


def _candidates(entry: Entry, found: Found, row: Row, rows: list[Row],
                lesson: str | None) -> list[Candidate]:
    """One candidate per submitter of a notebook (a group submission has several)."""
    if entry.size > MAX_NOTEBOOK_BYTES:
        row.skip(f"{entry.size >> 20} MiB: larger than a notebook can be "
                 f"({MAX_NOTEBOOK_BYTES >> 20} MiB)")
        return []
    try:
        data = entry.read()
    except (zipfile.BadZipFile, OSError, RuntimeError, ValueError) as err:
        row.skip(f"cannot be read from the download ({err})")
        return []
    found.time = found.time or entry.time
    if found.time and not found.time_from:
        found.time_from = entry.time_kind
    of_lesson = _lesson(data, found, row, lesson)
    if of_lesson is None:
        return []
    result = []
    for index, identity in enumerate(found.identities):
        mine = row if index == 0 else Row(row.file, details=list(row.details))
        if index:
            rows.insert(rows.index(row) + index, mine)
        mine.lesson = of_lesson
        mine.submitted = _short(found.time) + (" LATE" if found.late else "")
        result.append(Candidate(entry, data, identity, found, mine, of_lesson))
    return result


def _lesson(data: bytes, found: Found, row: Row, lesson: str | None) -> str | None:
    """The notebook's lesson, by content; None (the row skipped) if it has none."""
    content = lesson_of(data)
    if content.lesson is not None:
        if lesson is not None and content.lesson != lesson:
            row.lesson = content.lesson
            row.skip(f"holds lesson {content.lesson}, not {lesson} (--lesson)")
            return None
        if content.note:
            row.details.append(content.note)
        return content.lesson
    if content.graded:
        row.skip(f"matches no lesson: {content.problem}")
        return None
    named = lesson or lesson_named(found.original, row.file)
    if named is None:
        row.skip(f"{content.problem}, and neither --lesson nor its name says which lesson")
        return None
    by = "--lesson" if lesson else "its file name"
    row.details.append(f"{content.problem}: lesson from {by}" +
                       ("; grading will say what is wrong with it" if not content.readable
                        else ""))
    return named


def _nested(entry: Entry, found: Found, row: Row, rows: list[Row], candidates: list,
            others: list, lesson: str | None) -> None:
    """A zip the student uploaded: its notebooks are that student's, whatever their names."""
    others += [(identity, row) for identity in found.identities]
    row.outcome = "ignored"
    if len(entry.order) > 1:
        row.details.insert(0, "a zip inside a zip: not unpacked")
        return
    if entry.size > MAX_NESTED_ZIP_BYTES:
        row.details.insert(0, f"a zip of {entry.size >> 20} MiB: not unpacked")
        return
    try:
        inner = zipfile.ZipFile(io.BytesIO(entry.read()))
        inner_entries = zip_entries(inner, entry.order)
    except (zipfile.BadZipFile, OSError, RuntimeError, ValueError) as err:
        row.details.insert(0, f"a zip that cannot be opened ({err})")
        return
    inner_entries = [e for e in inner_entries if not is_junk(e.path)]
    if len(inner_entries) > MAX_NESTED_ENTRIES:
        row.details.insert(0, f"a zip of {len(inner_entries)} files: not unpacked")
        return
    row.outcome = "unpacked"
    row.details.insert(0, f"as {', '.join(i.describe() for i in found.identities)}'s files "
                          f"(names inside are not read for students)")
    # the LMS's time for the upload, else the download's entry time; the student's own zip
    # entry times only if neither is known
    outer_time = found.time or entry.time
    outer_from = found.time_from or (entry.time_kind if entry.time else "")
    for inner_entry in inner_entries:
        original = inner_entry.name
        inner_entry.path = f"{entry.path}!{inner_entry.path}"
        inner_row = Row(inner_entry.path)
        rows.insert(rows.index(row) + 1 + sum(1 for r in rows if r.file.startswith(
            entry.path + "!")), inner_row)
        inner_found = dataclasses.replace(
            found, original=original, notes=list(found.notes),
            time=outer_time or inner_entry.time,
            time_from=outer_from or ("the entry's time in the student's zip"
                                     if inner_entry.time else ""))
        if ".ipynb_checkpoints" in inner_entry.parts:
            inner_row.outcome, inner_row.details = "ignored", ["Jupyter's autosave copy"]
        elif inner_entry.name.lower().endswith(".zip"):
            inner_row.outcome, inner_row.details = "ignored", ["a zip inside a zip: not unpacked"]
        elif not inner_entry.name.lower().endswith(".ipynb"):
            inner_row.outcome, inner_row.details = "ignored", ["not a notebook"]
            others += [(identity, inner_row) for identity in found.identities]
        else:
            inner_row.details += inner_found.notes
            candidates += _candidates(inner_entry, inner_found, inner_row, rows, lesson)


def _identify_students(candidates: list[Candidate], others: list[tuple[Identity, Row]],
                       roster: Roster | None, manifest: "Manifest") -> None:
    """Give each candidate its student id, or skip it saying why."""
    identities = {c.identity.key: c.identity for c in candidates}
    identities.update({i.key: i for i, _ in others})
    by_key: dict[str, tuple[str, str] | Skip] = {}
    # one key, several LMS ids (two Moodle participants of one name): cannot tell them apart
    ids_of_key = defaultdict(set)
    for candidate in candidates:
        ids_of_key[candidate.identity.key].add(candidate.identity.lms_id)
    for key, identity in identities.items():
        if len(ids_of_key.get(key, ())) > 1:
            ids = ", ".join(sorted(filter(None, ids_of_key[key])))
            by_key[key] = Skip(f"ambiguous: {len(ids_of_key[key])} students named "
                               f"{identity.name!r} in this download ({ids}), and "
                               f"{FORMAT_NAMES[identity.lms]}'s ids do not carry over to "
                               f"other lessons")
            continue
        try:
            raw, how = resolve(identity, roster)
            student, note = folder_id(raw)
        except Skip as why:
            by_key[key] = why
            continue
        by_key[key] = (student, how, note)
    # two identities, one student: merged if the roster says so by id, otherwise ambiguous
    claims = defaultdict(dict)
    for key, result in by_key.items():
        if not isinstance(result, Skip):
            claims[result[0].casefold()][key] = result[1]
    # Only the roster's ids (its id, lms_id or email columns) merge accounts; an account that
    # reaches a student by name, or by an id that only maps to the same folder, is kept apart.
    def who(student, key):
        return manifest.who(student, key) or identities[key].describe()

    for student, keys in claims.items():
        earlier = manifest.identities(student)
        everyone = earlier | keys
        if len(everyone) < 2:
            continue
        explicit = {k for k, how in everyone.items() if how == "roster-id"}
        for key in keys:
            rivals = [who(student, k) for k in everyone if k != key]
            if key in explicit and len(explicit) > 1:
                merged = [who(student, k) for k in explicit if k != key]
                by_key[key] = (*by_key[key][:2], f"merged: the roster also gives this student "
                                                 f"to {', '.join(merged)}")
            elif key not in explicit and (explicit or key not in earlier):
                by_key[key] = Skip(f"{identities[key].describe()} and {', '.join(rivals)} would "
                                   f"both be student {by_key[key][0]}: not merged")
    for candidate in candidates:
        result = by_key[candidate.identity.key]
        row = candidate.row
        if isinstance(result, Skip):
            row.skip(str(result))
            continue
        candidate.student, candidate.how = result[0], result[1]
        row.student = candidate.student
        row.outcome = "collected"
        if result[1] == "roster-name":
            row.details.append(f"{candidate.identity.describe()} matched on the roster by name")
        elif result[1] == "lms-name":
            row.details.append(f"id from the name: {FORMAT_NAMES[candidate.identity.lms]} "
                               f"gives no id")
        if len(result) > 2 and result[2]:
            note = result[2]
            if note.startswith("merged"):
                row.outcome = "merged"
            row.details.append(note)
    for identity, row in others:
        result = by_key.get(identity.key)
        if result is not None and not isinstance(result, Skip) and row.student == "-":
            row.student = result[0]


def _supersede(candidates: list[Candidate], manifest: "Manifest",
               workspace: Workspace) -> list[Candidate]:
    """The newest notebook per student and lesson; the others marked superseded."""
    groups = defaultdict(list)
    for candidate in candidates:
        if candidate.student is not None and candidate.row.outcome != "skipped":
            groups[candidate.student, candidate.lesson].append(candidate)
    winners = []
    for (student, lesson), group in groups.items():
        group.sort(key=lambda c: c.order)
        winner = group[-1]
        for loser in group[:-1]:
            loser.row.outcome = "superseded"
            why = "the same file" if loser.sha256 == winner.sha256 else \
                "newer" if loser.found.time and winner.found.time and \
                loser.found.time < winner.found.time else \
                "same time or none known: the later in the download"
            if not loser.identity.lms_id:
                why += f"; or a second student named {loser.identity.name!r}, which " \
                       f"{FORMAT_NAMES[loser.identity.lms]} cannot tell: check"
            loser.row.details.insert(0, f"by {winner.entry.path} ({why})")
        notebook = workspace.submitted / student / lesson / f"{lesson}.ipynb"
        current = hashlib.sha256(notebook.read_bytes()).hexdigest() \
            if notebook.is_file() else None
        record = manifest.submissions.get(f"{student}/{lesson}")
        if current == winner.sha256:
            winner.row.outcome = "unchanged"
            winner.row.details.insert(0, f"already collected from {record['archive_name']}"
                                      if record else "already in submitted/")
            manifest.adopt(winner)
            continue
        if record is not None and record["sha256"] != current:
            record = None  # submitted/ was changed by hand since: what is there now counts
        if record is not None:
            before = _as_utc(record.get("time"))
            if before and winner.found.time and winner.found.time <= before:
                winner.row.outcome = "superseded"
                winner.row.details.insert(0, f"by {record['entry']} from "
                                             f"{record['archive_name']} ({_short(before)}, "
                                             f"newer), collected before")
                continue
            winner.row.details.append(
                f"replaces {record['entry']} from {record['archive_name']}"
                + ("" if before and winner.found.time else " (times unknown: the later download"
                   " wins)"))
        elif current is not None:
            winner.row.details.append("replaces a notebook this command did not collect")
        original = winner.found.original.rsplit("/", 1)[-1]
        if original != f"{lesson}.ipynb":
            winner.row.details.insert(0, f"the student's file was {original!r}")
            if winner.row.outcome == "collected":
                winner.row.outcome = "renamed"
        winners.append(winner)
    return winners


def _no_notebook(candidates: list[Candidate], others: list[tuple[Identity, Row]]) -> None:
    """A student whose files are all ignored has lost nothing silently: their rows say so."""
    with_notebook = {c.identity.key for c in candidates}
    for identity, row in others:
        if identity.key not in with_notebook and row.outcome in ("ignored", "unpacked"):
            row.skip(f"no notebook from {identity.describe()}")


def _write(winners: list[Candidate], workspace: Workspace, manifest: "Manifest", digest: str,
           name: str, fmt: str) -> None:
    now = datetime.now(timezone.utc)
    for candidate in winners:
        folder = workspace.submitted / candidate.student / candidate.lesson
        folder.mkdir(parents=True, exist_ok=True)
        _atomic_write(folder / f"{candidate.lesson}.ipynb", candidate.data)
        stamp = folder / "timestamp.txt"
        if candidate.found.time:
            _atomic_write(stamp, candidate.found.time.strftime(TIMESTAMP_FORMAT).encode())
        elif stamp.exists():
            stamp.unlink()  # it was the replaced notebook's time
        secret = folder / "submission_secret.txt"
        if candidate.found.secret is not None:
            _atomic_write(secret, candidate.found.secret)
        elif secret.exists():
            secret.unlink()  # it was the replaced submission's
        manifest.record(candidate, digest, name, now)
    manifest.archives[digest] = {"name": name, "format": fmt,
                                 "collected": now.isoformat(timespec="seconds")}
    manifest.save()


def _atomic_write(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.collecting")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def _short(time: datetime | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC") if time else ""


class Manifest:
    """``collected.json`` in the workspace: what was collected from where, and from whom."""

    def __init__(self, path: Path, data: dict):
        self.path = path
        self.archives: dict[str, dict] = data.get("archives", {})
        self.students: dict[str, dict[str, dict]] = data.get("students", {})
        self.submissions: dict[str, dict] = data.get("submissions", {})

    @classmethod
    def load(cls, workspace: Workspace) -> "Manifest":
        path = workspace.root / MANIFEST
        try:
            data = json.loads(path.read_text()) if path.is_file() else {}
        except (OSError, json.JSONDecodeError) as err:
            raise CollectError(f"cannot read {path} ({err}): move it away to start over, "
                               f"knowing that downloads collected before would be collected "
                               f"again") from None
        return cls(path, data if isinstance(data, dict) else {})

    def identities(self, student: str) -> dict[str, str]:
        """{identity key: how} of everyone collected before as this student (case folded)."""
        found = {}
        for name, keys in self.students.items():
            if name.casefold() == student:
                found.update({key: value["how"] for key, value in keys.items()})
        return found

    def who(self, student: str, key: str) -> str | None:
        for name, keys in self.students.items():
            if name.casefold() == student and key in keys:
                return keys[key]["who"]
        return None

    def record(self, candidate: Candidate, digest: str, name: str, now: datetime) -> None:
        self.students.setdefault(candidate.student, {})[candidate.identity.key] = {
            "how": candidate.how, "who": candidate.identity.describe()}
        time = candidate.found.time
        self.submissions[f"{candidate.student}/{candidate.lesson}"] = {
            "archive": digest, "archive_name": name, "entry": candidate.entry.path,
            "sha256": candidate.sha256, "time": time.isoformat() if time else None,
            "time_from": candidate.found.time_from, "late": candidate.found.late,
            "collected": now.isoformat(timespec="seconds")}

    def adopt(self, candidate: Candidate) -> None:
        """A notebook already in submitted/ is this one: remember who it belongs to."""
        self.students.setdefault(candidate.student, {}).setdefault(
            candidate.identity.key, {"how": candidate.how, "who": candidate.identity.describe()})

    def save(self) -> None:
        data = {"archives": self.archives, "students": self.students,
                "submissions": self.submissions}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(self.path, json.dumps(data, indent=1, sort_keys=True).encode())

