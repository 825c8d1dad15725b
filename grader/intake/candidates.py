"""Reading a download's files: a row for each, and each notebook as a candidate for a student.

A notebook's lesson is read from its content (``lessons``); a group submission gives one
candidate per member; a student's own zip inside the download is unpacked as that student's
files, never read for other students' names. Files that are not notebooks are kept with their
students, so that a student whose files are all ignored gets a row saying so: a link, online
text or a receipt stands for a submission without a notebook, and a draft the student never
submitted (Microsoft Teams' ``Working files/``) is never a candidate.

A notebook is read once, a chunk at a time up to ``MAX_NOTEBOOK_BYTES`` (``download``), for its
hash and its lesson, then let go: a candidate keeps neither its bytes nor its JSON, and the one
written is read from the download again (``submitted``). A student's zip is copied to a
temporary file, at most ``MAX_NESTED_ZIP_BYTES`` and ``MAX_NESTED_ENTRIES`` files, and read from
there as the download is.
"""

import dataclasses
import hashlib
import zipfile
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime

from .download import Entry, is_junk, open_zip, spooled, zip_entries
from .errors import CollectError, Skip
from .formats import Format, Found
from .lessons import lesson_named, lesson_of
from .students import Identity
from .table import Row, short

MAX_NOTEBOOK_BYTES = 64 << 20
MAX_NESTED_ZIP_BYTES = 256 << 20
MAX_NESTED_ENTRIES = 1000
NO_NOTEBOOK = "no notebook submitted"
UNREADABLE = (zipfile.BadZipFile, OSError, RuntimeError, ValueError, EOFError, zlib.error)


@dataclass
class Candidate:
    """A notebook of the download for one student: where it is and what it is, not its bytes."""

    entry: Entry
    sha256: str
    identity: Identity
    found: Found
    row: Row
    lesson: str | None = None
    holds_cells: bool = False  # it holds the lesson's nbgrader cells (its lesson is by content)
    student: str | None = None
    how: str = ""

    @property
    def order(self) -> tuple:
        return (self.found.time or datetime.min.replace(tzinfo=UTC), self.entry.order)


@dataclass
class Read:
    """A download read: a row per file, the notebooks as candidates, and the other files of
    known students (identity, its row)."""

    rows: list[Row] = dataclasses.field(default_factory=list)
    candidates: list[Candidate] = dataclasses.field(default_factory=list)
    others: list[tuple[Identity, Row]] = dataclasses.field(default_factory=list)


def read_files(fmt: Format, lesson: str | None) -> Read:
    """Every file of the download, read as ``fmt`` names them (``lesson``: --lesson)."""
    read = Read()
    for entry in fmt.entries:
        if fmt.is_own_file(entry):
            continue
        row = Row(entry.path)
        read.rows.append(row)
        try:
            _read_file(entry, fmt, row, read, lesson)
        except Exception as err:  # noqa: BLE001 (one bad file never stops the class)
            row.details = []
            row.skip(f"could not be read ({type(err).__name__}: {err})")
    return read


def _read_file(entry: Entry, fmt: Format, row: Row, read: Read, lesson: str | None) -> None:
    try:
        found = fmt.parse(entry)
    except Skip as why:
        if not entry.is_notebook():
            row.ignore(f"not a notebook; {why}")
        else:
            row.skip(str(why))
        return
    except CollectError as err:
        row.skip(str(err))
        return
    row.details += found.notes
    if found.draft:
        row.ignore(f"a draft, never graded: {found.draft}")
        read.others += [(identity, row) for identity in found.identities]
    elif found.instead:
        row.outcome = "ignored"
        row.details.insert(0, f"{NO_NOTEBOOK}: {found.instead}")
        read.others += [(identity, row) for identity in found.identities]
    elif ".ipynb_checkpoints" in entry.parts:
        row.ignore("Jupyter's autosave copy, not the notebook")
    elif entry.is_zip():
        _nested(entry, found, row, read, lesson)
    elif not entry.is_notebook():
        row.outcome = "ignored"
        row.details.insert(0, "not a notebook")
        read.others += [(identity, row) for identity in found.identities]
    else:
        read.candidates += _candidates(entry, found, row, read.rows, lesson)


def _candidates(entry: Entry, found: Found, row: Row, rows: list[Row],
                lesson: str | None) -> list[Candidate]:
    """One candidate per submitter of a notebook (a group submission has several)."""
    try:
        data = entry.read(MAX_NOTEBOOK_BYTES, "a notebook")
    except Skip as why:
        row.skip(str(why))
        return []
    except UNREADABLE as err:
        row.skip(f"cannot be read from the download ({err})")
        return []
    sha256 = hashlib.sha256(data).hexdigest()
    found.time = found.time or entry.time
    if found.time and not found.time_from:
        found.time_from = entry.time_kind
    of_lesson, by_content = _lesson(data, found, row, lesson)
    del data  # a candidate keeps where its notebook is, not its bytes
    if of_lesson is None:
        return []
    result = []
    for index, identity in enumerate(found.identities):
        mine = row if index == 0 else Row(row.file, details=list(row.details))
        if index:
            rows.insert(rows.index(row) + index, mine)
        mine.lesson = of_lesson
        mine.submitted = short(found.time) + (" LATE" if found.late else "")
        result.append(Candidate(entry, sha256, identity, found, mine, of_lesson, by_content))
    return result


def _lesson(data: bytearray, found: Found, row: Row,
            lesson: str | None) -> tuple[str | None, bool]:
    """(the notebook's lesson, whether its content says so); None (the row skipped) if it
    has none."""
    content = lesson_of(data)
    if content.lesson is not None:
        if lesson is not None and content.lesson != lesson:
            row.lesson = content.lesson
            row.skip(f"holds lesson {content.lesson}, not {lesson} (--lesson)")
            return None, True
        if content.note:
            row.details.append(content.note)
        return content.lesson, True
    if content.graded or content.refused:
        row.skip(content.problem if content.refused else f"matches no lesson: {content.problem}")
        return None, False
    named = lesson or lesson_named(found.original, row.file)
    if named is None:
        row.skip(f"{content.problem}, and neither --lesson nor its name says which lesson")
        return None, False
    by = "--lesson" if lesson else "its file name"
    row.details.append(f"{content.problem}: lesson from {by}" +
                       ("; grading will say what is wrong with it" if not content.readable
                        else ""))
    return named, False


def _nested(entry: Entry, found: Found, row: Row, read: Read, lesson: str | None) -> None:
    """A zip the student uploaded: its notebooks are that student's, whatever their names."""
    read.others += [(identity, row) for identity in found.identities]
    row.outcome = "ignored"
    if len(entry.order) > 1:
        row.details.insert(0, "a zip inside a zip: not unpacked")
        return
    try:
        file = spooled(entry, MAX_NESTED_ZIP_BYTES, "a student's zip")
        inner = entry.reading.open.enter_context(open_zip(file, "the zip"))
        inner_entries = zip_entries(inner, entry.reading, entry.order)
    except (Skip, CollectError) as why:
        row.details.insert(0, f"not unpacked: {why}")
        return
    except UNREADABLE as err:
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
        read.rows.insert(read.rows.index(row) + 1 + sum(
            1 for r in read.rows if r.file.startswith(entry.path + "!")), inner_row)
        inner_found = dataclasses.replace(
            found, original=original, notes=list(found.notes),
            time=outer_time or inner_entry.time,
            time_from=outer_from or ("the entry's time in the student's zip"
                                     if inner_entry.time else ""))
        if ".ipynb_checkpoints" in inner_entry.parts:
            inner_row.ignore("Jupyter's autosave copy")
        elif inner_entry.is_zip():
            inner_row.ignore("a zip inside a zip: not unpacked")
        elif not inner_entry.is_notebook():
            inner_row.ignore("not a notebook")
            read.others += [(identity, inner_row) for identity in found.identities]
        else:
            inner_row.details += inner_found.notes
            read.candidates += _candidates(inner_entry, inner_found, inner_row, read.rows,
                                           lesson)
