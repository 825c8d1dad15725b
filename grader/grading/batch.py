"""Grading a batch of submissions in parallel, each ending in exactly one recorded outcome.

Each worker owns one warm runner process in its own sandbox (``runner.py`` in ``sandbox``:
torch already imported, one fresh confined process per submission), so a submission costs its
own cells, not a sandbox, a kernel start and an ``import torch``; what the submission's lesson
may import from the course comes with it (``package``). At each graded cell the student's
process waits while the checks run here, in the trusted process, which asks it only to call
the student's code on the cases it sends (``verdicts``). Workers run side by side (default: one
per core). Outcomes:

- graded: every graded cell judged (points may be 0; what the source shows is flagged for a
  human, see ``inspection``);
- ungradable: the file could not be read as this lesson's notebook (see ``submissions``), or
  the student's process answered a check with something that is not a record of observations;
- timed out: a cell would not stop when interrupted, or the submission ran past its budget;
- crashed: the kernel died (``os._exit``, a segfault, killed) before grading finished.

A failure of any kind is confined to its own submission: the batch goes on, and every other
student's results and grades are written as usual. ``grade_one`` grades from a ``Handin`` (the
notebook's bytes) and returns a ``Graded``, so ``cluster`` grades the same way on Dask workers
that do not see the workspace.
"""

import json
import math
import os
import queue
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from attention_course import lessons as registry

from ..course import Lesson
from ..sandbox import bwrap, package
from ..workspace import Workspace
from .inspection import answer_tokens, inspect_submission
from .results import Outcome, Result, not_graded
from .submissions import Submission, Ungradable, notebook_bytes, parse_notebook, plan
from .verdicts import MAX_RECORD_BYTES, Exchange, ExchangeFailed, Unreadable, judge_cell

RUNNER = Path(bwrap.__file__).with_name("runner.py")
GiB, MiB = 2**30, 2**20


@dataclass(frozen=True)
class Limits:
    cell_timeout: float = 120.0  # seconds one cell may run before it is interrupted
    budget: float = 600.0  # seconds a whole submission may run (and CPU seconds it may use)
    start_timeout: float = 120.0  # seconds a runner may take to import torch and get ready
    memory: int = 4 * GiB  # address space of a submission's process (torch alone takes ~1 GiB)
    disk: int = 512 * MiB  # its private scratch space (memory-backed, in the sandbox)
    file_size: int = 256 * MiB  # the largest file it may write
    open_files: int = 256
    output_kept: int = 256 * 1024  # bytes of its printed output kept for the instructor

    def job(self, cells: list[dict], modules: dict[str, str]) -> dict:
        """What the runner needs to run one submission (``runner.py`` documents the format)."""
        return {"cells": cells, "modules": modules, "cell_timeout": self.cell_timeout,
                "budget": self.budget,
                "output_kept": self.output_kept, "record_limit": MAX_RECORD_BYTES,
                "limits": {"memory": self.memory, "cpu_seconds": math.ceil(self.budget),
                           "file_size": self.file_size, "open_files": self.open_files}}


class RunnerDied(ExchangeFailed):
    pass


class Ended(ExchangeFailed):
    """The submission's process ended while a check was waiting for its reply."""

    def __init__(self, answer: dict):
        super().__init__(answer.get("reason", ""))
        self.answer = answer


OnGraded = Callable[[str, Exchange], None]  # (grade_id, exchange) at each graded cell


class Runner:
    """One warm runner process, in its own sandbox unless ``sandboxed`` is false (then with the
    grader's rights, in ``scratch``); restarted whenever it dies or stops answering."""

    def __init__(self, scratch: Path, limits: Limits, sandboxed: bool = True):
        self.scratch, self.limits, self.sandboxed = scratch, limits, sandboxed
        self.process: subprocess.Popen | None = None
        self.buffer, self.deadline = b"", 0.0

    def command(self, package_root: Path) -> list[str]:
        if self.sandboxed:
            return bwrap.runner_command(self.limits.disk, package_root)
        self.scratch.mkdir(parents=True, exist_ok=True)
        return [bwrap.PYTHON, "-I", str(RUNNER), "--scratch", str(self.scratch),
                "--package-root", str(package_root)]

    def start(self) -> None:
        self.stop()
        root = package.build(self.scratch.parent / "packages" / self.scratch.name)
        env = {} if self.sandboxed else {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
                                         "OMP_NUM_THREADS": "1"}  # none of the grader's
        self.process = subprocess.Popen(self.command(root), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env,
                                        cwd=None if self.sandboxed else self.scratch,
                                        start_new_session=True)
        self.buffer = b""
        self._line(time.monotonic() + self.limits.start_timeout)

    def run(self, job: dict, on_graded: OnGraded) -> tuple[dict, dict[str, bytes]]:
        """The runner's answer to ``job`` and the files that came with it; ``on_graded`` is
        called at each graded cell, and may exchange requests for replies meanwhile."""
        try:
            if self.process is None or self.process.poll() is not None:
                self.start()
            self.deadline = time.monotonic() + job["budget"] + 30
            self._send(job)
            while "event" in (message := self._line(self.deadline)):
                if message["event"] != "at" or type(message.get("grade_id")) is not str:
                    raise RunnerDied(f"an unexpected message {message.get('event')!r}")
                on_graded(message["grade_id"], self.exchange)
                self._send({"continue": True})
            return self._final(message)
        except Ended as ended:
            return self._final(ended.answer)
        except (RunnerDied, OSError, ValueError, KeyError, AttributeError) as err:  # or garbage
            self.stop()
            return {"status": "crashed", "reason": f"the grading kernel stopped answering "
                                                   f"({err})"}, {}

    def exchange(self, request: bytes) -> list[bytes]:
        """Send a check's request to the waiting submission; its replies, one per case."""
        self._send({"request": len(request)}, request)
        message = self._line(self.deadline)
        if message.get("event") != "reply":
            raise Ended(message)
        sizes = message["sizes"]
        if any(type(n) is not int or n < 0 for n in sizes) or sum(sizes) > MAX_RECORD_BYTES:
            raise RunnerDied("it announced replies larger than a check may send")
        return [self._bytes(size, self.deadline) for size in sizes]

    def _final(self, answer: dict) -> tuple[dict, dict[str, bytes]]:
        sizes = answer.pop("files")
        if sum(sizes.values()) > self.limits.output_kept + 4096:
            raise RunnerDied("it announced more data than it may send")
        return answer, {name: self._bytes(size, self.deadline) for name, size in sizes.items()}

    def _send(self, header: dict, data: bytes = b"") -> None:
        self.process.stdin.write(json.dumps(header).encode() + b"\n" + data)
        self.process.stdin.flush()

    def _line(self, deadline: float) -> dict:
        while b"\n" not in self.buffer:
            self._read(deadline)
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def _bytes(self, size: int, deadline: float) -> bytes:
        while len(self.buffer) < size:
            self._read(deadline)
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def _read(self, deadline: float) -> None:
        out = self.process.stdout.fileno()
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([out], [], [], left)[0]:
            raise RunnerDied("no answer in time")
        chunk = os.read(out, 1 << 20)
        if not chunk:
            raise RunnerDied("the runner exited")
        self.buffer += chunk

    def stop(self) -> None:
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()
            self.process = None


@dataclass(frozen=True)
class Handin:
    """All that grading needs of a submission, so it can travel to another machine: who, which
    lesson, and the notebook's bytes (None when there is no notebook: ``missing`` says why)."""

    student: str
    lesson: str
    notebook: bytes | None
    missing: str = ""

    @classmethod
    def read(cls, submission: Submission) -> "Handin":
        try:
            return cls(submission.student, submission.lesson, notebook_bytes(submission))
        except Ungradable as err:
            return cls(submission.student, submission.lesson, None, str(err))


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


def failed(submission: Submission | Handin, lesson: Lesson, outcome: Outcome, reason: str,
           seconds: float = 0.0) -> Result:
    """The result of a submission that could not be graded: 0 points, and why."""
    return not_graded(submission.student, submission.lesson, lesson.points, outcome, reason,
                      seconds)


def keep(graded: Graded, workspace: Workspace) -> None:
    """Write a result to the workspace's results/, and the kernel's printed output beside it
    as ``<lesson>.output.txt``."""
    path = workspace.result_file(graded.result.student, graded.result.lesson)
    path.parent.mkdir(parents=True, exist_ok=True)
    if graded.output is not None:
        path.with_suffix(".output.txt").write_bytes(graded.output)
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(graded.result.to_json())
    temporary.replace(path)


def grade_batch(submissions: list[Submission], lessons: dict[str, Lesson], workspace: Workspace,
                workers: int, limits: Limits = Limits(), sandboxed: bool = True,
                on_result: Callable[[Result], None] = lambda result: None) -> list[Result]:
    """Grade ``submissions`` with ``workers`` runners side by side; results in input order.
    Raises SandboxUnavailable before running anything when ``sandboxed`` and it cannot be. An
    interrupt (Ctrl-C) stops the batch at once: each result was saved and passed to
    ``on_result`` as it finished, and nothing finishing after the interrupt is."""
    if sandboxed:
        bwrap.check(limits.disk)
    workers = max(1, min(workers, len(submissions)))
    runners: queue.Queue[Runner] = queue.Queue()
    for n in range(workers):
        runners.put(Runner(workspace.scratch / f"worker-{n}", limits, sandboxed))
    judging, interrupted = threading.Lock(), threading.Event()

    def grade(submission: Submission) -> Result | None:
        if interrupted.is_set():
            return None
        runner = runners.get()
        try:
            graded = grade_safely(Handin.read(submission), lessons[submission.lesson], runner,
                                  judging)
        finally:
            runners.put(runner)
        if interrupted.is_set():  # its runner was stopped under it: that is no grade
            return None
        keep(graded, workspace)
        on_result(graded.result)
        return graded.result

    pool = ThreadPoolExecutor(workers)
    try:
        futures = [pool.submit(grade, submission) for submission in submissions]
        return [future.result() for future in futures]
    except BaseException:  # Ctrl-C: stop now; what was recorded stays, the rest waits
        interrupted.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        while not runners.empty():
            runners.get().stop()
        pool.shutdown(wait=True)
