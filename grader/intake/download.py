"""A download's files, from a zip or a folder, as collect reads them: names, sizes, times and
the owners of a folder's subfolders; each file read through a stream that stops at a limit.

Zip names are read as their writers meant them (UTF-8 where most tools write it without the
flag that says so), folders with ``/``; the junk operating systems add (``__MACOSX/``,
``.DS_Store``, ``Thumbs.db``) is left out. A download is known by its hash, so the same download
is never collected twice.

What collect holds in memory is bounded whatever a download says, since a zip's sizes can lie
and a folder such as nbgrader's exchange is written by the students themselves:

- a zip's central directory is checked before ``zipfile`` reads it (at most
  ``MAX_DIRECTORY_BYTES``, ``MAX_ENTRIES`` files), and a folder is listed up to ``MAX_ENTRIES``
  files: more is not a class's hand-in, and the download is refused whole;
- a file is read a chunk at a time (``Entry.read``, ``Entry.copy``) up to the limit its use sets
  (a notebook, a student's zip, an exchange file), counting the bytes that come out, never what
  the zip's header says; a zip entry compressed with bzip2 or LZMA is not read at all, since
  ``zipfile`` decompresses those without a bound (LMS downloads use deflate);
- one download reads at most ``MAX_DOWNLOAD_BYTES`` in all (``Reading``), nested zips included:
  past it, each file is refused with a row saying so.

A folder's files are opened one folder at a time without following a symbolic link anywhere on
the way (``O_NOFOLLOW``), and only regular files are read: a link or a named pipe a student left
in the exchange gets a row saying why it was not read. The owner of each subfolder is kept, for
the exchange's check (``formats/exchange.py``).
"""

import contextlib
import hashlib
import os
import stat
import tempfile
import unicodedata
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import BinaryIO

from .errors import CollectError, Skip

JUNK_NAMES = {".DS_Store", "Thumbs.db", "desktop.ini"}
MiB = 1 << 20
CHUNK = MiB  # what one read takes from a file, decompressed
MAX_ENTRIES = 20_000  # files of one download: a class of a thousand, several files each
MAX_DIRECTORY_BYTES = 4 * MiB  # a zip's list of files; 20,000 names take about 2 MiB
MAX_DOWNLOAD_BYTES = 4 << 30  # read from one download in all: a class's notebooks, outputs kept
MAX_HASHED_BYTES = 256 * MiB  # the largest file collect reads (a student's zip)
MAX_DEPTH = 16  # folders inside a folder download: nbgrader's exchange uses two
READ = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)  # compressions read a bounded chunk at a time
COMPRESSIONS = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "LZMA"}


def mib(size: int) -> str:
    return f"{size / MiB:,.1f} MiB" if size < 10 * MiB else f"{size // MiB:,} MiB"


@dataclass
class Reading:
    """What one download may still cost collect, and what it keeps open while it is read (a
    student's zip, spooled to a temporary file)."""

    left: int = MAX_DOWNLOAD_BYTES
    owners: dict[str, int] = field(default_factory=dict)  # folder ("/"-separated) -> its uid
    open: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def take(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise Skip(f"not read: this download's files add up to more than "
                       f"{mib(MAX_DOWNLOAD_BYTES)}, more than a class hands in (collect the "
                       f"rest from a smaller download)")


@dataclass
class Entry:
    """One file of the download."""

    path: str  # inside the download, "/"-separated
    size: int  # as the zip or the folder says: a zip's may lie
    time: datetime | None  # UTC
    opener: Callable[[], BinaryIO]
    order: tuple = ()
    time_kind: str = "the zip entry's time"
    reading: Reading = field(default_factory=Reading)
    regular: bool = True  # False: a link or a special file in a folder, never read

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

    def owner(self, folder: str) -> int | None:
        """The uid owning ``folder`` (a folder above this file); None in a zip."""
        return self.reading.owners.get(folder)

    def read(self, limit: int, what: str) -> bytearray:
        """The file's bytes, if it holds at most ``limit`` of them (``what``: "a notebook", for
        messages); Skip saying why not."""
        data = bytearray()
        for chunk in self.chunks(limit, what):
            data += chunk
        return data

    def copy(self, into: BinaryIO, limit: int, what: str, charge: bool = True) -> str:
        """The file written to ``into`` (at most ``limit`` bytes); its SHA-256."""
        digest = hashlib.sha256()
        for chunk in self.chunks(limit, what, charge):
            digest.update(chunk)
            into.write(chunk)
        return digest.hexdigest()

    def chunks(self, limit: int, what: str, charge: bool = True) -> Iterator[bytes]:
        """The file a chunk at a time, stopping past ``limit`` bytes (Skip: larger than ``what``
        can be), whatever its size said; each chunk taken from the download's budget."""
        if self.size > limit:
            raise Skip(f"{mib(self.size)}: larger than {what} can be ({mib(limit)})")
        seen = 0
        with self.opener() as stream:
            while chunk := stream.read(CHUNK):
                seen += len(chunk)
                if seen > limit:
                    raise Skip(f"larger than {what} can be ({mib(limit)}), though the download "
                               f"says {mib(self.size)}")
                if charge:
                    self.reading.take(len(chunk))
                yield chunk


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


def open_zip(file: BinaryIO | Path, label: str) -> zipfile.ZipFile:
    """``file`` as a zip, once its end record says its list of files is of a class's size
    (zipfile reads that list whole); CollectError saying why not."""
    with contextlib.ExitStack() as stack:
        handle = stack.enter_context(open(file, "rb")) if isinstance(file, Path) else file
        try:
            end = zipfile._EndRecData(handle)  # the end record ZipFile itself goes by
        except OSError as err:
            raise CollectError(f"{label} cannot be read ({err})") from None
        if end is None:
            raise CollectError(f"{label} is not a zip file")
        files, size = end[zipfile._ECD_ENTRIES_TOTAL], end[zipfile._ECD_SIZE]
        if files > MAX_ENTRIES or size > MAX_DIRECTORY_BYTES:
            raise CollectError(f"{label} says it holds {files:,} files in a list of "
                               f"{mib(size)}: more files than a class hands in "
                               f"({MAX_ENTRIES:,}); not read")
    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise CollectError(f"{label} is not a zip file ({err})") from None
    if len(archive.infolist()) > MAX_ENTRIES:
        archive.close()
        raise CollectError(f"{label} holds more files than a class hands in ({MAX_ENTRIES:,})")
    return archive


def _zip_opener(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Callable[[], BinaryIO]:
    def opener() -> BinaryIO:
        if info.compress_type not in READ:
            method = COMPRESSIONS.get(info.compress_type, f"method {info.compress_type}")
            raise Skip(f"compressed with {method}, which collect does not read: it cannot "
                       f"be decompressed a bounded piece at a time (LMS downloads use deflate)")
        return archive.open(info)
    return opener


def zip_entries(archive: zipfile.ZipFile, reading: Reading, order: tuple = ()) -> list[Entry]:
    entries = []
    for index, info in enumerate(archive.infolist()):
        if info.is_dir():
            continue
        entries.append(Entry(_zip_name(info).strip("/"), info.file_size, _zip_time(info),
                             _zip_opener(archive, info), (*order, index), reading=reading))
    times = {e.time for e in entries}
    if len(entries) > 1 and None not in times and max(times) - min(times) <= timedelta(seconds=2):
        # every entry has the same time: it says when the zip was made, not when each file was
        # submitted (Canvas, for one, writes the download's time)
        for entry in entries:
            entry.time = None
    return entries


# -- folders -----------------------------------------------------------------------------------

def _open_at(root: Path, parts: tuple[str, ...], directory: bool) -> int:
    """A file descriptor for ``root/parts``, opened one name at a time, following no link."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1] if parts else ():
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        if not parts:
            return os.dup(fd)
        kind = os.O_DIRECTORY if directory else os.O_NONBLOCK  # a named pipe must not block
        return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | kind, dir_fd=fd)
    finally:
        os.close(fd)


def _file_opener(root: Path, parts: tuple[str, ...]) -> Callable[[], BinaryIO]:
    def opener() -> BinaryIO:
        try:
            fd = _open_at(root, parts, directory=False)
        except OSError as err:
            raise Skip(f"cannot be opened without following a link ({err.strerror})") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise Skip("not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    return opener


def _refused(why: str) -> Callable[[], BinaryIO]:
    def opener() -> BinaryIO:
        raise Skip(why)
    return opener


def _kind(mode: int) -> str | None:
    """Why a file of this mode is not read; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link: collect follows none (the exchange is writable by every student)"
    if stat.S_ISDIR(mode):
        return f"a folder nested more than {MAX_DEPTH} deep: not read"
    return "not a regular file (a named pipe, socket or device)"


def folder_entries(folder: Path, reading: Reading) -> list[Entry]:
    """The folder's files, sorted by path; a link or a special file as an entry that cannot be
    read. Every subfolder's owner goes into ``reading.owners``."""
    listed: list[tuple[tuple[str, ...], os.stat_result]] = []
    per_top: Counter = Counter()
    pending: list[tuple[str, ...]] = [()]
    while pending:
        parts = pending.pop()
        try:
            fd = _open_at(folder, parts, directory=True)
        except OSError as err:
            raise CollectError(f"cannot read {folder.joinpath(*parts)} ({err.strerror})") from None
        try:
            if parts:
                reading.owners["/".join(parts)] = os.fstat(fd).st_uid
            with os.scandir(fd) as found:
                children = [(entry.name, entry.stat(follow_symlinks=False)) for entry in found]
        finally:
            os.close(fd)
        for name, info in children:
            path = (*parts, name)
            per_top[path[0]] += 1
            if sum(per_top.values()) > MAX_ENTRIES:
                (top, count), = per_top.most_common(1)
                raise CollectError(f"{folder} holds more files than a class hands in "
                                   f"({MAX_ENTRIES:,}), {count:,} of them under {top}/: not "
                                   f"read; move away what does not belong there")
            if stat.S_ISDIR(info.st_mode) and len(path) < MAX_DEPTH:
                pending.append(path)
            else:
                listed.append((path, info))
    entries = []
    for index, (parts, info) in enumerate(sorted(listed, key=lambda item: item[0])):
        why = _kind(info.st_mode)
        entries.append(Entry("/".join(parts), info.st_size,
                             datetime.fromtimestamp(info.st_mtime, UTC),
                             _refused(why) if why else _file_opener(folder, parts), (index,),
                             "the file's modification time", reading, regular=not why))
    return entries


def is_junk(path: str) -> bool:
    parts = path.split("/")
    return parts[0] == "__MACOSX" or parts[-1] in JUNK_NAMES or parts[-1].startswith("._")


@dataclass
class Download:
    """A download's files, readable while it is open (``opened``)."""

    source: Path
    files: list[Entry]  # junk included
    reading: Reading

    @property
    def entries(self) -> list[Entry]:
        """Its files without the junk operating systems add."""
        return [e for e in self.files if not is_junk(e.path)]

    def hash(self) -> str:
        """A zip's bytes, or a folder's files as ``workspace.folder_digest`` hashes them (the
        names and bytes of its regular files not named with a dot), read a chunk at a time; a
        file larger than any collect reads counts by its size and time instead."""
        digest = hashlib.sha256()
        if not self.source.is_dir():
            with self.source.open("rb") as file:
                while block := file.read(CHUNK):
                    digest.update(block)
            return digest.hexdigest()
        for entry in self.files:
            if not entry.name.startswith(".") and entry.regular:
                digest.update(entry.path.encode() + b"\0")
                digest.update(_file_digest(entry))
        return digest.hexdigest()


def _file_digest(entry: Entry) -> bytes:
    try:
        digest = hashlib.sha256()
        for chunk in entry.chunks(MAX_HASHED_BYTES, "a file collect reads", charge=False):
            digest.update(chunk)
        return digest.digest()
    except (Skip, OSError):
        return hashlib.sha256(f"{entry.size} {entry.time}".encode()).digest()


@contextmanager
def opened(source: Path) -> Iterator[Download]:
    """The download in a zip or a folder, readable while open."""
    reading = Reading()
    with reading.open:
        if source.is_dir():
            files = folder_entries(source, reading)
        else:
            files = zip_entries(reading.open.enter_context(open_zip(source, str(source))),
                                reading)
        yield Download(source, files, reading)


def spooled(entry: Entry, limit: int, what: str) -> BinaryIO:
    """``entry`` copied to a temporary file that stays open while its download is read (a
    student's zip, which zipfile must seek in)."""
    file = entry.reading.open.enter_context(tempfile.TemporaryFile())
    entry.copy(file, limit, what)
    file.seek(0)
    return file
