"""Noticing new submissions: a watched folder (nbgrader's exchange ``inbound/``, or a folder an
LMS sync fills) is worth collecting when what it holds changed and has settled.

A folder of the exchange has settled once ``nbgrader submit`` wrote ``submission_secret.txt``,
its last file; one that never gets it (a submit that died) is taken as it is after
``ABANDONED_S``. In an LMS folder a file has settled when its size and time did not change
between two looks. A folder that cannot be read (a network file system that hiccups) is said
so, and looked at again next time: nothing is collected from a half-seen folder.
"""

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

ABANDONED_S = 60.0
SECRET = "submission_secret.txt"


class Unreadable(OSError):
    """The watched folder could not be listed."""


@dataclass
class Watched:
    """One folder, and what it held when it was last collected."""

    path: Path
    kind: str  # "exchange" or "lms"
    collected: tuple = ()
    _last_look: tuple = field(default=(), repr=False)

    def ready(self, now: float | None = None) -> bool:
        """True when it holds something new that has settled (it is then to be collected)."""
        now = time.time() if now is None else now
        try:
            seen = self._look()
        except OSError as err:
            raise Unreadable(err.strerror or str(err)) from None
        settled = (self._exchange_settled(seen, now) if self.kind == "exchange"
                   else seen == self._last_look)
        self._last_look = seen
        return settled and seen != self.collected

    def done(self) -> None:
        """What was seen last has been collected."""
        self.collected = self._last_look

    def _look(self) -> tuple:
        if self.kind == "exchange":
            entries = []
            with os.scandir(self.path) as folders:
                for folder in folders:
                    if folder.is_dir(follow_symlinks=False):
                        entries.append((folder.name, folder.stat().st_mtime,
                                        os.path.exists(os.path.join(folder.path, SECRET))))
            return tuple(sorted(entries))
        return tuple(sorted((str(p.relative_to(self.path)), s.st_size, s.st_mtime)
                            for p in self.path.rglob("*")
                            if (s := p.lstat()) and p.is_file()))

    @staticmethod
    def _exchange_settled(seen: tuple, now: float) -> bool:
        return all(secret or now - mtime > ABANDONED_S for _, mtime, secret in seen)
