"""Times as nbgrader's exchange writes them into ``timestamp.txt``, and reading any time a
download or the course file gives.

nbgrader writes ``2025-03-07 12:00:00.000000 UTC`` (``Exchange.timestamp_format``) and reads a
time with ``nbgrader.utils.parse_utc``, which is what reads a time ending in a zone name here.
parse_utc takes a trailing numeric offset (``-0800``) as seconds and drops a zone it does not
know: those are read here instead (an offset as an offset, an unknown zone as no time).
"""

import re
from datetime import UTC, datetime
from pathlib import Path

import dateutil.parser
import dateutil.tz
from nbgrader.utils import parse_utc

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"  # nbgrader's Exchange.timestamp_format, in UTC
DATE = re.compile(r"\d{4}-\d\d-\d\d")
ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z_/+-]*")


def as_utc(value: datetime | None) -> datetime | None:
    """An aware UTC datetime; a naive one (as nbgrader's gradebook stores them) is UTC."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def parse_time(text: str) -> datetime | None:
    """A time that starts with its date (nbgrader's format, ISO 8601, a trailing zone name or
    offset), in UTC; a time without a zone is UTC. None if it is not one."""
    text = text.strip()
    if not DATE.match(text):
        return None
    zone = text.rpartition(" ")[2]
    try:
        if " " in text and ZONE_NAME.fullmatch(zone):
            return as_utc(parse_utc(text)) if dateutil.tz.gettz(zone) is not None else None
        return as_utc(dateutil.parser.parse(text))
    except (ValueError, OverflowError, TypeError):
        return None


def nbgrader_time(value: datetime) -> str:
    """A time as nbgrader's exchange writes timestamp.txt (UTC)."""
    return as_utc(value).strftime(TIMESTAMP_FORMAT)


def read_timestamp(folder: Path) -> datetime | None:
    """The time in a submission folder's timestamp.txt (UTC), or None."""
    path = Path(folder) / "timestamp.txt"
    if path.is_symlink() or not path.is_file():
        return None
    try:
        with path.open("rb") as file:
            return parse_time(file.read(256).decode("utf-8"))
    except (OSError, UnicodeDecodeError):
        return None
