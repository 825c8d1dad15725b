"""Grading a batch of submissions in parallel, each ending in exactly one recorded outcome.

Each worker owns one warm runner process (``runner.py``: torch already imported, one fresh
forked process per submission), so a submission costs its own cells, not a kernel start and an
``import torch``. Workers run side by side (default: one per core); points are decided here, in
the trusted process, one submission at a time. Outcomes:

- graded: every graded cell judged (points may be 0; tampering evidence is kept for a human);
- ungradable: the file could not be read as this lesson's notebook (see ``submissions``);
- timed out: a cell would not stop when interrupted, or the submission ran past its budget;
- crashed: the kernel died (``os._exit``, a segfault, killed) before grading finished.

A failure of any kind is confined to its own submission: the batch goes on, and every other
student's results and grades are written as usual.
"""

import json
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .course import Lesson, Workspace
from .submissions import Submission, Ungradable, plan, read_notebook
from .verdicts import Unreadable, exercise_result, judge_lesson, read_record

RUNNER = Path(__file__).with_name("runner.py")
OUTPUT_KEPT = 256 * 1024  # bytes of each submission's printed output kept for the instructor


@dataclass(frozen=True)
class Limits:
    cell_timeout: float = 120.0  # seconds one cell may run before it is interrupted
    budget: float = 600.0  # seconds a whole submission may run
    start_timeout: float = 120.0  # seconds a runner may take to import torch and get ready


class RunnerDied(Exception):
    pass


class Runner:
    """One warm runner process; restarted whenever it dies or stops answering."""

    def __init__(self, scratch: Path, limits: Limits, command: list[str] | None = None):
        self.scratch, self.limits = scratch, limits
        self.command = command or [sys.executable, "-I", str(RUNNER)]
        self.process: subprocess.Popen | None = None
        self.buffer = b""

    def start(self) -> None:
        home = self.scratch / "home"
        home.mkdir(parents=True, exist_ok=True)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
               "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
        self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, cwd=self.scratch, env=env,
                                        start_new_session=True)
        self.buffer = b""
        self._answer(self.limits.start_timeout)

    def run(self, job: dict) -> dict:
        try:
            if self.process is None or self.process.poll() is not None:
                self.start()
            self.process.stdin.write(json.dumps(job).encode() + b"\n")
            self.process.stdin.flush()
            return self._answer(job["budget"] + 30)
        except (RunnerDied, OSError) as err:
            self.stop()
            return {"status": "crashed", "reason": f"the grading kernel stopped answering "
                                                   f"({err})"}

    def _answer(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        out = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                raise RunnerDied(f"no answer within {timeout:g} s")
            chunk = os.read(out, 65536)
            if not chunk:
                raise RunnerDied("the runner exited")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def stop(self) -> None:
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()
            self.process = None


def grade_one(submission: Submission, lesson: Lesson, runner: Runner, workspace: Workspace,
              judging: threading.Lock) -> dict:
    """Grade one submission; always returns its result, never raises for the student's sake."""
    started = time.monotonic()
    outcome, reason, exercises, tampering = "graded", "", None, []
    try:
        steps = plan(read_notebook(submission), lesson)
    except Ungradable as err:
        outcome, reason = "ungradable", str(err)
    else:
        out = workspace.scratch / "runs" / submission.student / submission.lesson
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        answer = runner.run({"out": str(out), "cells": steps,
                             "cell_timeout": runner.limits.cell_timeout,
                             "budget": runner.limits.budget})
        _keep_output(out, workspace.result_file(submission.student, submission.lesson))
        if answer["status"] != "finished":
            outcome, reason = answer["status"], answer["reason"]
        else:
            try:
                data, recorded = read_record(out)
                with judging:
                    exercises = judge_lesson(lesson, recorded)
                tampering = [str(e) for e in data.get("tampering", [])]
            except Unreadable as err:
                outcome, reason = "crashed", str(err)
        shutil.rmtree(out, ignore_errors=True)
    if exercises is None:
        return failed(submission, lesson, outcome, reason, time.monotonic() - started)
    return result(submission, lesson, outcome, reason, exercises, tampering,
                  time.monotonic() - started)


def result(submission: Submission, lesson: Lesson, outcome: str, reason: str,
           exercises: list[dict], tampering: list[str], seconds: float) -> dict:
    return {"student": submission.student, "lesson": submission.lesson, "outcome": outcome,
            "reason": reason, "seconds": round(seconds, 2), "tampering": tampering,
            "exercises": exercises, "score": sum(e["points"] for e in exercises),
            "max_score": lesson.max_score}


def failed(submission: Submission, lesson: Lesson, outcome: str, reason: str,
           seconds: float = 0.0) -> dict:
    """The result of a submission that could not be graded: 0 points, and why."""
    exercises = [exercise_result(cell, False, f"not graded: {reason}") for cell in lesson.cells]
    return result(submission, lesson, outcome, reason, exercises, [], seconds)


def _keep_output(out: Path, result_file: Path) -> None:
    log = out / "output.txt"
    if log.is_file():
        result_file.parent.mkdir(parents=True, exist_ok=True)
        with log.open("rb") as source:
            result_file.with_suffix(".output.txt").write_bytes(source.read(OUTPUT_KEPT))


def save_result(result: dict, workspace: Workspace) -> None:
    path = workspace.result_file(result["student"], result["lesson"])
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(result, indent=1))
    temporary.replace(path)


def grade_batch(submissions: list[Submission], lessons: dict[str, Lesson], workspace: Workspace,
                workers: int, limits: Limits = Limits(),
                on_result: Callable[[dict], None] = lambda result: None) -> list[dict]:
    """Grade ``submissions`` with ``workers`` runners side by side; results in input order."""
    workers = max(1, min(workers, len(submissions)))
    runners: queue.Queue[Runner] = queue.Queue()
    for n in range(workers):
        scratch = workspace.scratch / f"worker-{n}"
        scratch.mkdir(parents=True, exist_ok=True)
        runners.put(Runner(scratch, limits))
    judging = threading.Lock()

    def grade(submission: Submission) -> dict:
        runner = runners.get()
        try:
            result = grade_one(submission, lessons[submission.lesson], runner, workspace,
                               judging)
        except Exception as err:  # a grader bug must not cost the rest of the class
            runner.stop()
            result = failed(submission, lessons[submission.lesson], "crashed",
                            f"internal grader error ({type(err).__name__}: {err})")
        finally:
            runners.put(runner)
        save_result(result, workspace)
        on_result(result)
        return result

    try:
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(grade, submissions))
    finally:
        while not runners.empty():
            runners.get().stop()
