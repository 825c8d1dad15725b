"""The grader's handle on one warm runner: start it in its sandbox, send it a submission's job,
pass the checks' requests to the student's process and bring back its replies.

Everything read from the runner is checked before it is used (sizes announced, messages in
turn); a runner that answers with anything else, or not in time, is stopped, and the submission
it was running is "crashed". The protocol is documented in ``runner.py``.
"""

import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import bwrap, framing, package

RUNNER = Path(__file__).with_name("runner.py")
GiB, MiB = 2**30, 2**20
MAX_RECORD_BYTES = 64 * MiB  # what the student's process may send back for one check
FILES_SLACK = 4096  # the note added to a cut output

Exchange = Callable[[bytes], list[bytes]]  # a request out, the replies (one per case) back
OnGraded = Callable[[str, Exchange], None]  # (grade_id, exchange) at each graded cell


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


class ExchangeFailed(Exception):
    """No reply came: the student's process ended, or the runner stopped answering."""


class RunnerDied(ExchangeFailed):
    pass


class Ended(ExchangeFailed):
    """The submission's process ended while a check was waiting for its reply."""

    def __init__(self, answer: dict, files: bytes):
        super().__init__(answer.get("reason", ""))
        self.answer, self.files = answer, files




class Runner:
    """One warm runner process, in its own sandbox unless ``sandboxed`` is false (then with the
    grader's rights, in ``scratch``); restarted whenever it dies or stops answering."""

    def __init__(self, scratch: Path, limits: Limits, sandboxed: bool = True):
        self.scratch, self.limits, self.sandboxed = scratch, limits, sandboxed
        self.process: subprocess.Popen | None = None
        self.frames = framing.Frames(self._announced)
        self.deadline = 0.0
        self.lock, self.closed = threading.Lock(), False

    def _announced(self, header: dict) -> int:
        """The bytes after a runner's message (a check's replies, or a job's files), refused
        before they are read when they are more than it may send."""
        replies, files = framing.sizes(header, "sizes"), framing.sizes(header, "files", dict)
        if replies > MAX_RECORD_BYTES or files > self.limits.output_kept + FILES_SLACK:
            raise ValueError("more than the runner may send")
        return replies + files

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
        with self.lock:
            if self.closed:
                raise RunnerDied("the batch was stopped")
            self.process = subprocess.Popen(self.command(root), stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, env=env,
                                            cwd=None if self.sandboxed else self.scratch,
                                            start_new_session=True)
        self.frames = framing.Frames(self._announced)
        self._receive(time.monotonic() + self.limits.start_timeout)  # {"ready": ...}

    def run(self, job: dict, on_graded: OnGraded) -> tuple[dict, dict[str, bytes]]:
        """The runner's answer to ``job`` and the files that came with it; ``on_graded`` is
        called at each graded cell, and may exchange requests for replies meanwhile."""
        try:
            if self.process is None or self.process.poll() is not None:
                self.start()
            self.deadline = time.monotonic() + job["budget"] + 30
            self._send(job)
            try:
                while "event" in (message := self._receive(self.deadline))[0]:
                    header = message[0]
                    if header["event"] != "at" or type(header.get("grade_id")) is not str:
                        raise RunnerDied(f"an unexpected message {header.get('event')!r}")
                    on_graded(header["grade_id"], self.exchange)
                    self._send({"continue": True})
            except Ended as ended:  # it ended while a check waited for its replies
                message = ended.answer, ended.files
            return self._final(*message)
        except (RunnerDied, framing.FramingError, OSError, EOFError, TimeoutError, ValueError,
                KeyError, AttributeError) as err:  # or garbage
            self.stop()
            return {"status": "crashed", "reason": f"the grading kernel stopped answering "
                                                   f"({err})"}, {}

    def exchange(self, request: bytes) -> list[bytes]:
        """Send a check's request to the waiting submission; its replies, one per case."""
        self._send({"request": len(request)}, request)
        header, data = self._receive(self.deadline)
        if header.get("event") != "reply":
            raise Ended(header, data)
        replies, start = [], 0
        for size in header["sizes"]:
            replies.append(data[start:start + size])
            start += size
        return replies

    def _final(self, answer: dict, data: bytes) -> tuple[dict, dict[str, bytes]]:
        sizes = answer.pop("files", None)
        if type(sizes) is not dict:
            raise RunnerDied("its last answer lists no files")
        files, start = {}, 0
        for name, size in sizes.items():
            files[name], start = data[start:start + size], start + size
        return answer, files

    def _send(self, header: dict, data: bytes = b"") -> None:
        framing.send(self.process.stdin, header, data)

    def _receive(self, deadline: float) -> tuple[dict, bytes]:
        try:
            return self.frames.receive(self.process.stdout.fileno(), deadline)
        except TimeoutError:
            raise RunnerDied("no answer in time") from None
        except EOFError:
            raise RunnerDied("the runner exited") from None

    def stop(self) -> None:
        """Kill the runner and everything it started (also while a thread waits on it)."""
        with self.lock:
            process, self.process = self.process, None
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()

    def close(self) -> None:
        """Stop the runner for good: it is not started again."""
        with self.lock:
            self.closed = True
        self.stop()
