"""Reading a download's files: a row for each, and each notebook as a candidate for a student.

A notebook's lesson is read from its content (``lessons``); a group submission gives one
candidate per member; a student's own zip inside the download is unpacked as that student's
files, never read for other students' names. Files that are not notebooks are kept with their
students, so that a student whose files are all ignored gets a row saying so.
"""

import dataclasses
import hashlib
import io
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime

from .download import Entry, is_junk, zip_entries
from .errors import CollectError, Skip
from .formats import Format, Found
from .lessons import lesson_named, lesson_of
from .students import Identity
from .table import Row, short

MAX_NOTEBOOK_BYTES = 64 << 20
MAX_NESTED_ZIP_BYTES = 256 << 20
MAX_NESTED_ENTRIES = 1000


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
    if ".ipynb_checkpoints" in entry.parts:
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
        mine.submitted = short(found.time) + (" LATE" if found.late else "")
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


def _nested(entry: Entry, found: Found, row: Row, read: Read, lesson: str | None) -> None:
    """A zip the student uploaded: its notebooks are that student's, whatever their names."""
    read.others += [(identity, row) for identity in found.identities]
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
