"""The submissions waiting to be graded: one per student and lesson (the newest the workspace
holds replaces a waiting older one), first come first served, and before the lesson's due date
no more than ``per_hour`` graded per student and lesson in any hour (one over the limit waits
in the backlog until the hour allows it: nothing is dropped).

Workers take from it from their own threads; ``take`` blocks until something is ready.
"""

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ..grading.submissions import Submission

HOUR = 3600.0
Key = tuple[str, str]  # (student, lesson)


@dataclass(frozen=True)
class Waiting:
    submission: Submission
    digest: str  # the files it holds now
    arrived: float  # when the backlog first had it (time.time())


class Backlog:
    def __init__(self, limit_of: Callable[[str], int | None], clock=time.time):
        """``limit_of(lesson)``: graded per student per hour now (None: no limit)."""
        self.limit_of, self.clock = limit_of, clock
        self.waiting: dict[Key, Waiting] = {}
        self.running: dict[Key, str] = {}  # key -> digest being graded
        self.graded: dict[Key, deque[float]] = {}  # key -> times graded (the last hour's)
        self.changed = threading.Condition()

    def offer(self, submission: Submission, digest: str) -> bool:
        """Queue ``submission`` unless these very files are waiting or being graded."""
        key = (submission.student, submission.lesson)
        with self.changed:
            if self.running.get(key) == digest or (
                    key in self.waiting and self.waiting[key].digest == digest):
                return False
            arrived = self.waiting[key].arrived if key in self.waiting else self.clock()
            self.waiting[key] = Waiting(submission, digest, arrived)
            self.changed.notify()
            return True

    def seen_graded(self, key: Key, times: list[float]) -> None:
        """Times this student's lesson was graded before (from the gradebook, after a restart)."""
        with self.changed:
            self.graded.setdefault(key, deque()).extend(
                t for t in times if t > self.clock() - HOUR)

    def take(self, timeout: float) -> Waiting | None:
        """The first ready submission (it is then running), or None after ``timeout``."""
        with self.changed:
            ready = self._ready()
            if ready is None:
                self.changed.wait(timeout)
                ready = self._ready()
            if ready is None:
                return None
            del self.waiting[(ready.submission.student, ready.submission.lesson)]
            self.running[(ready.submission.student, ready.submission.lesson)] = ready.digest
            return ready

    def finished(self, key: Key) -> None:
        with self.changed:
            self.running.pop(key, None)
            self.graded.setdefault(key, deque()).append(self.clock())
            self.changed.notify_all()

    def next_allowed(self, key: Key) -> float | None:
        """When ``key`` may be graded again under its limit; None when it may now."""
        limit = self.limit_of(key[1])
        times = self.graded.get(key, deque())
        while times and times[0] <= self.clock() - HOUR:
            times.popleft()
        if limit is None or len(times) < limit:
            return None
        return times[-limit] + HOUR

    def _ready(self) -> Waiting | None:
        for key, waiting in sorted(self.waiting.items(), key=lambda item: item[1].arrived):
            if key not in self.running and self.next_allowed(key) is None:
                return waiting
        return None

    def __len__(self) -> int:
        with self.changed:
            return len(self.waiting)
