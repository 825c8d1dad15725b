"""The watching service: collect what arrived, queue it, grade it on warm runners, record it,
hand its feedback back; one log line per submission and a health line (see the package's
docstring). Only the main thread touches the gradebook and the workspace's records; each worker
thread owns one warm runner and grades what the backlog gives it.
"""

import logging
import queue
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .. import intake
from ..course import COURSE_ID, Lesson, lesson_names, read_lesson
from ..grading.batch import Graded, Handin, grade_safely, keep
from ..grading.submissions import find_submissions
from ..intake.manifest import Collected
from ..records import database, gradebook, standings
from ..records.lateness import CourseFile, CourseFileError
from ..sandbox import bwrap
from ..sandbox.client import Limits, Runner
from ..workspace import Workspace, folder_digest
from .arrivals import Unreadable, Watched
from .backlog import Backlog, Waiting
from .handback import (
    FULL,
    Ledger,
    ReleaseFailed,
    Views,
    early_page,
    full_page,
    release,
    write_page,
)
from .judging import Observed
from .settings import WatchSettings

log = logging.getLogger("grader.watch")


@dataclass(frozen=True)
class Options:
    exchange: Path | None  # nbgrader's exchange root (its <course>/inbound/ is watched)
    lms_folder: Path | None = None  # a folder an LMS sync fills
    workers: int = 1
    limits: Limits = Limits()
    sandboxed: bool = True
    poll: float = 2.0  # seconds between looks at the folders
    health: float = 60.0  # seconds between health lines
    recheck: float = 30.0  # seconds between checks of what is handed back (due dates)


class Watcher:
    def __init__(self, workspace: Workspace, options: Options, clock=time.time):
        self.workspace, self.options, self.clock = workspace, options, clock
        self.names = lesson_names()
        self.settings = WatchSettings.read(workspace.root, self.names)
        self.sources = [Watched(options.exchange / COURSE_ID / "inbound", "exchange")
                        ] if options.exchange else []
        if options.lms_folder:
            self.sources.append(Watched(options.lms_folder, "lms"))
        self.backlog = Backlog(self._limit_of, clock)
        self.finished: queue.Queue = queue.Queue()
        self.ledger, self.views = Ledger(workspace), Views(workspace)
        self.lessons: dict[str, Lesson] = {}
        self.judging = threading.Lock()
        self.counts: Counter = Counter()
        self.problems: dict[str, str] = {}  # what is wrong now, by where: for the health line
        self.skips: set[tuple] = set()  # rows collect skipped, each logged once
        self.course, self.course_seen = CourseFile(), None
        self.rescan = self.refresh_due = True
        self.last_health = self.last_recheck = 0.0

    # -- the loop ------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Watch until ``stop`` is set; graded submissions in flight then are not recorded (the
        next start grades them)."""
        if self.options.sandboxed:
            bwrap.check(self.options.limits.disk)
        stopping = threading.Event()
        runners = [Runner(self.workspace.scratch / f"watch-{n}", self.options.limits,
                          self.options.sandboxed) for n in range(max(1, self.options.workers))]
        threads = [threading.Thread(target=self._work, args=(runner, stopping), daemon=True,
                                    name=f"watch-worker-{n}") for n, runner in enumerate(runners)]
        for thread in threads:
            thread.start()
        log.info("watching %s with %d worker(s)", ", ".join(str(s.path) for s in self.sources)
                 or "nothing (no exchange, no LMS folder)", len(runners))
        try:
            while not stop.is_set():
                self.tick()
                stop.wait(self.options.poll)
            self._record_finished()
        finally:
            stopping.set()
            for runner in runners:
                runner.close()
            for thread in threads:
                thread.join(timeout=30)
            log.info("stopped: %s", self._state())

    def tick(self) -> None:
        """One round: collect, queue, record and hand back, recheck, say how it goes."""
        now = self.clock()
        self._read_course()
        if self._collect() or self.rescan:
            self._queue_new()
        self._record_finished()
        if now - self.last_recheck >= self.options.recheck:
            self._hand_back_missing()
            self.last_recheck = now
        if now - self.last_health >= self.options.health:
            log.info("health: %s", self._state())
            self.last_health = now

    def _state(self) -> str:
        problems = "; ".join(f"{where}: {what}" for where, what in self.problems.items())
        return (f"{len(self.backlog)} waiting, {len(self.backlog.running)} grading, "
                f"{self.counts['recorded']} recorded ({self.counts['not graded']} not graded), "
                f"{self.counts['handed back']} handed back, "
                f"{self.counts['not recorded']} failed to record; "
                + (f"problems: {problems}" if problems else "all folders readable"))

    def _problem(self, where: str, what: str | None) -> None:
        """Log a problem when it starts and when it ends, not at every look."""
        before = self.problems.get(where)
        if what and what != before:
            log.warning("%s: %s (looking again)", where, what)
            self.problems[where] = what
        elif not what and before:
            log.info("%s: fine again", where)
            del self.problems[where]

    # -- arrivals ------------------------------------------------------------------------------

    def _read_course(self) -> None:
        path = self.workspace.course_file
        stamp = path.stat().st_mtime if path.is_file() else None
        if stamp == self.course_seen:
            return
        try:
            self.course = CourseFile.read(self.workspace)
            self._problem("course.toml", None)
        except CourseFileError as err:
            self._problem("course.toml", f"{err}; keeping what it said before")
        self.course_seen, self.rescan, self.refresh_due = stamp, True, True

    def _collect(self) -> bool:
        """Collect every watched folder with something new; True if any was collected."""
        collected = False
        for source in self.sources:
            try:
                if not source.ready(self.clock()):
                    self._problem(str(source.path), None)
                    continue
                done = intake.collect(source.path, self.workspace,
                                      fmt="exchange" if source.kind == "exchange" else "auto")
            except (Unreadable, OSError, intake.CollectError) as err:
                self._problem(str(source.path), str(err))
                continue
            self._problem(str(source.path), None)
            source.done()
            collected = True
            for row in done.rows:
                if row.outcome == "skipped" and (row.file, *row.details[:1]) not in self.skips:
                    self.skips.add((row.file, *row.details[:1]))
                    log.warning("not collected: %s (%s)", row.file, "; ".join(row.details))
        return collected

    def _queue_new(self) -> None:
        """Offer every submission the gradebook does not hold from the files it has now."""
        self.rescan = False
        found = find_submissions(self.workspace.submitted, self.names)
        if not found:
            return
        url = self.workspace.db_url
        with database.gradebook(url) as book:
            new = sorted({s.lesson for s in found} - set(self.lessons))
            if new:
                gradebook.ensure_lessons(book, url, new)
                self.lessons.update({name: read_lesson(name) for name in new})
            if self.refresh_due:
                gradebook.refresh(book, url, self.course, Collected.read(self.workspace))
                self.refresh_due = False
            pending, _ = gradebook.to_grade(book, found, again=False)
            for submission in pending:
                key = (submission.student, submission.lesson)
                if key not in self.backlog.graded:
                    self.backlog.seen_graded(key, _recorded_times(book, key))
                self.backlog.offer(submission, folder_digest(submission.folder))

    def _limit_of(self, lesson: str) -> int | None:
        """Graded per student and hour for ``lesson`` now: its setting before the due date,
        none after it."""
        due = self.course.due.get(lesson)
        if due is not None and datetime.now(UTC) > due:
            return None
        return self.settings.of(lesson).per_hour

    # -- grading (worker threads) ----------------------------------------------------------------

    def _work(self, runner: Runner, stopping: threading.Event) -> None:
        while not stopping.is_set():
            waiting = self.backlog.take(timeout=0.5)
            if waiting is None:
                continue
            try:
                handin = Handin.read(waiting.submission)
                lesson = self.lessons[handin.lesson]
                observed = Observed(runner, lesson, self.judging)
                graded = grade_safely(handin, lesson, observed, self.judging)
                outcome = (handin, graded, observed.visible)
            except Exception as err:  # its folder went away, say: it is offered again
                outcome = err
            if stopping.is_set():
                return  # a runner stopped under it: no grade
            self.finished.put((waiting, outcome))

    # -- recording and handing back (main thread) ------------------------------------------------

    def _record_finished(self) -> None:
        done = []
        while not self.finished.empty():
            done.append(self.finished.get())
        if not done:
            return
        url = self.workspace.db_url
        with database.gradebook(url) as book:
            collected = Collected.read(self.workspace)
            recorder = gradebook.Recorder(book, url, self.workspace, self.lessons, self.course,
                                          collected)
            for waiting, outcome in done:
                self._record_one(book, recorder, waiting, outcome, collected)

    def _record_one(self, book, recorder, waiting: Waiting, outcome, collected) -> None:
        key = (waiting.submission.student, waiting.submission.lesson)
        try:
            if isinstance(outcome, Exception):
                raise outcome
            handin, graded, visible = outcome
            graded = Graded(graded.result.printable(), graded.output)
            keep(graded, self.workspace)
            self.views.save(*key, handin.digest, visible)
            recorder.record(handin, graded.result)
            self.counts["recorded"] += 1
            self.counts["not graded"] += graded.result.outcome.value != "graded"
            shown = self._hand_back(book, key, graded.result, handin.digest, collected)
            log.info("%s %s: %s, %g / %g in %.1f s; feedback %s; %s after submitting",
                     *key, graded.result.outcome.value, graded.result.score,
                     graded.result.max_score, graded.result.seconds, shown,
                     _since(handin.timestamp))
        except Exception as err:  # this submission only: it is offered again next round
            self.counts["not recorded"] += 1
            self.rescan = True
            log.error("%s %s: not recorded (%s: %s); trying again", *key, type(err).__name__,
                      str(err)[:300])
        finally:
            self.backlog.finished(key)

    def _hand_back(self, book, key, result, digest: str, collected) -> str:
        """Write the page this submission gets now and release it; what was done, in words."""
        standing = standings.standings(book, self.course, collected).get(key)
        if standing is None:
            return "not written (the gradebook holds no such submission)"
        due = standing.lateness.due
        past = due is not None and datetime.now(UTC) > due
        view = FULL if past else self.settings.of(key[1]).before_due
        page = full_page(result, standing) if past else early_page(
            result, self.lessons[key[1]], self.views.load(*key, digest), view, due)
        write_page(self.workspace, result, page)
        try:
            released = release(self.workspace, self.options.exchange, *key) \
                if self.options.exchange else False
        except ReleaseFailed as err:
            self._problem("feedback exchange", str(err))
            return f"{view}, written, not released ({err})"
        self.ledger.put(key, digest, view)
        self.counts["handed back"] += released
        return f"{view}, " + ("released" if released else "written (no exchange secret)")

    def _hand_back_missing(self) -> None:
        """Hand back what the gradebook holds and the ledger does not (a restart between
        recording and releasing), and the full page of every lesson now past its due date."""
        if not self.lessons:
            return
        url = self.workspace.db_url
        with database.gradebook(url) as book:
            collected = Collected.read(self.workspace)
            found = standings.standings(book, self.course, collected)
            for key, entry in database.newest(book, list(found)).items():
                if key[1] not in self.lessons or key in self.backlog.running:
                    continue
                handed = self.ledger.get(key)
                due = found[key].lateness.due
                past = due is not None and datetime.now(UTC) > due
                if handed and handed["digest"] == entry["submission"] and (
                        handed["view"] == FULL or not past):
                    continue
                try:
                    result = standings.recorded_results(book, [key])[0]
                    shown = self._hand_back(book, key, result, entry["submission"], collected)
                    log.info("%s %s: feedback handed back again: %s", *key, shown)
                except Exception as err:
                    log.error("%s %s: feedback not handed back (%s: %s)", *key,
                              type(err).__name__, str(err)[:300])


def _recorded_times(book, key) -> list[float]:
    times = []
    for entry in database.entries(book, *key):
        try:
            times.append(datetime.fromisoformat(entry["recorded"]).timestamp())
        except (TypeError, ValueError):
            continue
    return times


def _since(when: datetime | None) -> str:
    if when is None:
        return "time of submission unknown"
    return f"{(datetime.now(UTC) - when).total_seconds():.1f} s"


def watch(workspace: Workspace, options: Options) -> int:
    """``python -m grader watch``: run until SIGTERM or Ctrl-C; 0 when stopped that way."""
    logging.basicConfig(format="%(asctime)s %(message)s", level=logging.INFO)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    Watcher(workspace, options).run(stop)
    return 0
