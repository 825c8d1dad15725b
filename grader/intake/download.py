"""A download's files, from a zip or a folder, as collect reads them: names, sizes and times.

Zip names are read as their writers meant them (UTF-8 where most tools write it without the
flag that says so), folders with ``/``; the junk operating systems add (``__MACOSX/``,
``.DS_Store``, ``Thumbs.db``) is left out. A download is known by its hash, so the same download
is never collected twice.
"""

import functools
import hashlib
import unicodedata
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ..workspace import folder_digest
from .errors import CollectError

JUNK_NAMES = {".DS_Store", "Thumbs.db", "desktop.ini"}


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

    @property
    def folder(self) -> str:
        return "/".join(self.parts[:-1])

    def is_notebook(self) -> bool:
        return self.name.lower().endswith(".ipynb")

    def is_zip(self) -> bool:
        return self.name.lower().endswith(".zip")


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
        return datetime(*info.date_time).astimezone().astimezone(UTC)
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
                             datetime.fromtimestamp(stat.st_mtime, UTC),
                             path.read_bytes, (index,), "the file's modification time"))
    return entries


def is_junk(path: str) -> bool:
    parts = path.split("/")
    return parts[0] == "__MACOSX" or parts[-1] in JUNK_NAMES or parts[-1].startswith("._")


@contextmanager
def opened(source: Path) -> Iterator[list[Entry]]:
    """The entries of a zip or a folder, without junk, readable while open."""
    if source.is_dir():
        yield [e for e in folder_entries(source) if not is_junk(e.path)]
        return
    try:
        archive = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError) as err:
        raise CollectError(f"{source} is not a zip file ({err})") from None
    with archive:
        yield [e for e in zip_entries(archive) if not is_junk(e.path)]


def download_hash(source: Path) -> str:
    """A zip's bytes, or a folder's files, as a hash."""
    if source.is_dir():
        return folder_digest(source)
    digest = hashlib.sha256()
    with source.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
