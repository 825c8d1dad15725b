"""Grading a batch of submissions in parallel, each ending in exactly one outcome.

Each worker owns one warm runner process in its own sandbox (``grader.sandbox``: torch already
imported, one fresh confined process per submission), so a submission costs its own cells, not a
sandbox, a kernel start and an ``import torch``; what the submission's lesson may import from
the course comes with it (``sandbox.package``). At each graded cell the student's process waits
while the checks run here, in the trusted process, which asks it only to call the student's code
on the cases it sends (``verdicts``). Workers run side by side (default: one per core). Outcomes:

- graded: every graded cell judged (points may be 0; what the source shows is flagged for a
  human, see ``inspection``);
- ungradable: the file could not be read as this lesson's notebook (see ``submissions``), or
  the student's process answered a check with something that is not a record of observations;
- timed out: a cell would not stop when interrupted, or the submission ran past its budget;
- crashed: the kernel died (``os._exit``, a segfault, killed) before grading finished.

A failure of any kind is confined to its own submission: the batch goes on. A submission is read
once, as a ``Handin``: the notebook's bytes, with the digest and time of the folder they were
read from, which travel with its result to the gradebook (a notebook changed during grading is
graded again next time), and to Dask workers that do not see the workspace (``cluster``).
"""

import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime

from attention_course import lessons as registry

from ..course import Lesson
from ..sandbox import bwrap, package
from ..sandbox.client import Exchange, Limits, Runner, RunnerDied
from ..timestamps import parse_time
from ..workspace import EXCHANGE_FILES, Workspace, atomic_write, digest, folder_files
from .inspection import answer_tokens, inspect_submission
from .results import Outcome, Result, not_graded
from .submissions import Submission, Ungradable, notebook_in, parse_notebook, plan
from .verdicts import Unreadable, judge_cell


@dataclass(frozen=True)
class Handin:
    """All that grading and recording need of a submission, read from its folder at once: who,
    which lesson, the notebook's bytes (None when there is none: ``missing`` says why), the
    digest of the folder's files, the time it was submitted and nbgrader's exchange files."""

    student: str
    lesson: str
    notebook: bytes | None
    missing: str = ""
    digest: str | None = None
    timestamp: datetime | None = None
    exchange: dict[str, bytes] = field(default_factory=dict)

    @classmethod
    def read(cls, submission: Submission) -> "Handin":
        files = folder_files(submission.folder)
        exchange = {name: files[name] for name in EXCHANGE_FILES if name in files}
        stamp = exchange.get("timestamp.txt", b"")[:256].decode("utf-8", "replace")
        kept = dict(digest=digest(files.items()), timestamp=parse_time(stamp),
                    exchange=exchange)
        try:
            return cls(submission.student, submission.lesson,
                       notebook_in(files, submission.lesson), **kept)
        except Ungradable as err:
            return cls(submission.student, submission.lesson, None, str(err), **kept)


@dataclass(frozen=True)
class Graded:
    """A submission's result, and the kernel's printed output (kept beside the result)."""

    result: Result
    output: bytes | None = None


def grade_one(submission: Handin, lesson: Lesson, runner: Runner,
              judging: threading.Lock) -> Graded:
    """Grade one submission; always returns its result, never raises for the student's sake."""
    started = time.monotonic()
    try:
        if submission.notebook is None:
            raise Ungradable(submission.missing)
        notebook = parse_notebook(submission.notebook, f"{submission.lesson}.ipynb")
        steps = plan(notebook, lesson)
    except Ungradable as err:
        return Graded(failed(submission, lesson, Outcome.UNGRADABLE, str(err)))
    expected = [step["grade_id"] for step in steps if step["kind"] == "graded"]
    cells = {cell.grade_id: cell for cell in lesson.cells}
    judged = {}

    def on_graded(grade_id: str, exchange: Exchange) -> None:
        if len(judged) == len(expected) or grade_id != expected[len(judged)]:
            raise RunnerDied(f"the kernel stopped at {grade_id[:60]!r}, not at the next graded "
                             f"cell")

        def waiting(request: bytes) -> list[bytes]:  # others judge while this one computes
            judging.release()
            try:
                return exchange(request)
            finally:
                judging.acquire()

        with judging:
            judged[grade_id] = judge_cell(cells[grade_id], waiting)

    try:
        job = runner.limits.job(steps, package.modules(registry.lesson(lesson.name)))
        answer, files = runner.run(job, on_graded)
    except Unreadable as err:
        runner.stop()
        return Graded(failed(submission, lesson, Outcome.UNGRADABLE, f"ungradable record: {err}",
                             time.monotonic() - started))
    output = files.get("output.txt")
    if answer["status"] != "finished":
        return Graded(failed(submission, lesson, Outcome(answer["status"]), answer["reason"],
                             time.monotonic() - started), output)
    return Graded(Result(submission.student, submission.lesson, Outcome.GRADED, "",
                         tuple(judged[cell.grade_id] for cell in lesson.cells), lesson.max_score,
                         tuple(inspect_submission(notebook, lesson)),
                         round(time.monotonic() - started, 2), answer_tokens(notebook, lesson)),
                  output)


def grade_safely(submission: Handin, lesson: Lesson, runner: Runner,
                 judging: threading.Lock) -> Graded:
    """``grade_one``, where a bug of the grader's own costs only this submission."""
    try:
        return grade_one(submission, lesson, runner, judging)
    except Exception as err:  # a grader bug must not cost the rest of the class
        runner.stop()
        return Graded(failed(submission, lesson, Outcome.CRASHED,
                             f"internal grader error ({type(err).__name__}: {err})"))


def failed(submission: Handin, lesson: Lesson, outcome: Outcome, reason: str,
           seconds: float = 0.0) -> Result:
    """The result of a submission that could not be graded: 0 points, and why."""
    return not_graded(submission.student, submission.lesson, lesson.points, outcome, reason,
                      seconds)


def keep(graded: Graded, workspace: Workspace) -> None:
    """Write a result to the workspace's results/, and the kernel's printed output beside it
    as ``<lesson>.output.txt`` (grading's output; the gradebook is what counts)."""
    path = workspace.result_file(graded.result.student, graded.result.lesson)
    path.parent.mkdir(parents=True, exist_ok=True)
    if graded.output is not None:
        atomic_write(path.with_suffix(".output.txt"), graded.output)
    atomic_write(path, graded.result.to_json().encode())


def grade_batch(submissions: list[Submission], lessons: dict[str, Lesson], workspace: Workspace,
                workers: int, limits: Limits, sandboxed: bool = True
                ) -> Iterator[tuple[Handin, Graded]]:
    """Grade ``submissions`` with ``workers`` runners side by side: each one as it finishes,
    with the handin it was graded from. Raises SandboxUnavailable before running anything when
    ``sandboxed`` and it cannot be. Closing the iterator (on Ctrl-C, say) stops the batch at
    once: runners are stopped under the submissions they run, which are never yielded."""
    if sandboxed:
        bwrap.check(limits.disk)
    workers = max(1, min(workers, len(submissions)))
    started = [Runner(workspace.scratch / f"worker-{n}", limits, sandboxed)
               for n in range(workers)]
    runners: queue.Queue[Runner] = queue.Queue()
    for runner in started:
        runners.put(runner)
    judging, stopped = threading.Lock(), threading.Event()

    def grade(submission: Submission) -> tuple[Handin, Graded] | None:
        if stopped.is_set():
            return None
        handin = Handin.read(submission)
        runner = runners.get()
        try:
            if stopped.is_set():
                return None
            return handin, grade_safely(handin, lessons[submission.lesson], runner, judging)
        finally:
            runners.put(runner)

    pool = ThreadPoolExecutor(workers)
    try:
        futures = [pool.submit(grade, submission) for submission in submissions]
        for future in as_completed(futures):
            if (done := future.result()) is not None and not stopped.is_set():
                yield done
    finally:  # the end, or the caller stopped early: what is running now is no grade
        stopped.set()
        pool.shutdown(wait=False, cancel_futures=True)
        for runner in started:
            runner.close()
        pool.shutdown(wait=True)
