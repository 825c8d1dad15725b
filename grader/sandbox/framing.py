"""Messages on the grading pipes, the same on both sides of each: a header, one line of JSON,
then the bytes it announces.

Which bytes a header announces depends on the pipe (``size_of``): a check's request, its
replies, a job's files. A reader keeps what has come so far and hands out whole messages only,
refusing what no honest writer sends: a line that is not a JSON object, a header line longer
than ``max_header`` or data larger than ``max_size``. Standard library only: the runner imports
this file inside the sandbox, where the grader's other files are not visible.
"""

import json
import os
import select
import time
from collections.abc import Callable

MAX_HEADER = 1 << 20  # the longest header line a reader takes


class FramingError(ValueError):
    """Bytes on a pipe that are not a message of the protocol."""


def encode(header: dict, data: bytes = b"") -> bytes:
    return json.dumps(header).encode() + b"\n" + data


def send(stream, header: dict, data: bytes = b"") -> None:
    """Write one message to a binary stream, and flush it."""
    stream.write(encode(header, data))
    stream.flush()


class Frames:
    """Whole messages out of the bytes read so far from one pipe: each header is parsed once,
    as soon as its line is whole, and the bytes after it are kept until the message is."""

    def __init__(self, size_of: Callable[[dict], int], max_header: int | None = MAX_HEADER,
                 max_size: int | None = None):
        self.size_of, self.max_header, self.max_size = size_of, max_header, max_size
        self.buffer = bytearray()
        self.scanned = 0  # bytes of the buffer known to hold no newline
        self.header: tuple[dict, int] | None = None  # the message being read, and its size

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk

    def read_from(self, fd: int) -> bool:
        """Take what the pipe holds now (one read); False at its end."""
        chunk = os.read(fd, 1 << 20)
        self.feed(chunk)
        return bool(chunk)

    def pop(self) -> tuple[dict, bytes] | None:
        """The next whole message, or None until it has all come; FramingError if the bytes
        cannot be one."""
        if self.header is None:
            end = self.buffer.find(b"\n", self.scanned)
            self.scanned = len(self.buffer) if end < 0 else 0
            if self.max_header is not None and (end if end >= 0 else len(self.buffer)) \
                    > self.max_header:
                raise FramingError("an endless line")
            if end < 0:
                return None
            line = bytes(self.buffer[:end])
            del self.buffer[:end + 1]
            self.header = self._parse(line)
        header, size = self.header
        if len(self.buffer) < size:
            return None
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        self.header = None
        return header, data

    def _parse(self, line: bytes) -> tuple[dict, int]:
        try:
            header = json.loads(line)
            size = self.size_of(header)
        except (ValueError, TypeError, AttributeError, KeyError, RecursionError):
            raise FramingError("a line that is not a message") from None
        if type(header) is not dict or type(size) is not int or size < 0:
            raise FramingError("a line that is not a message")
        if self.max_size is not None and size > self.max_size:
            raise FramingError(f"a message of {size:,} bytes (at most {self.max_size:,})")
        return header, size

    def receive(self, fd: int, deadline: float | None = None) -> tuple[dict, bytes]:
        """The next whole message from ``fd``, waiting for it until ``deadline`` (a
        ``time.monotonic()``; None: as long as it takes). TimeoutError past the deadline,
        EOFError if the pipe ends first."""
        while (message := self.pop()) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and (left <= 0 or not select.select([fd], [], [], left)[0]):
                raise TimeoutError("no answer in time")
            if not self.read_from(fd):
                raise EOFError("the pipe was closed")
        return message


def sizes(header: dict, key: str, shape: type = list) -> int:
    """The number of bytes a header announces as ``header[key]``: a list of sizes (or the
    sizes of a dict's values), each a non-negative int; 0 when the key is absent."""
    value = header.get(key, shape())
    numbers = value.values() if type(value) is dict else value
    if type(value) is not shape or any(type(n) is not int or n < 0 for n in numbers):
        raise ValueError(f"{key!r} is not a list of sizes")
    return sum(numbers)
