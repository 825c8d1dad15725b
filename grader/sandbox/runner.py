"""The only part of grading that runs student code: a warm interpreter that forks one process
per submission.

Started once per grading worker (``python -I grader/sandbox/runner.py --scratch DIR --package-root
ROOT``), in the sandbox where there is one, it imports torch, IPython, matplotlib and the part
of the course package every lesson shares (``ROOT``, built by ``package.py``: the
utilities and the student's half of the checks) once, then reads jobs from stdin, one JSON line
each:

    {"cell_timeout": 120, "budget": 600, "output_kept": 262144, "record_limit": 67108864,
     "limits": {"memory": ..., "cpu_seconds": ..., "file_size": ..., "open_files": ...},
     "modules": {"attention": "<source>", ...},
     "cells": [{"kind": "code", "source": "..."}, {"kind": "graded", "grade_id": "..."}, ...]}

For each job it forks a fresh process, confined before any student code runs (``confinement``:
resource limits, no new processes or threads, no reaching other processes), that runs the code
cells in order in an IPython shell (the engine inside ipykernel), on one thread. The job's
``modules`` (name -> source: what the lesson's notebook may import from the package, see
``package.py``) are importable there as
``attention_course.<name>``, from memory: the next job's lesson cannot see them. Where a
graded cell stood, it stops and the grader judges: this process relays, as framed messages on
stdout and stdin,

    -> {"event": "at", "grade_id": "..."}          the student's process waits here
    <- {"request": N} + N bytes                    a check's cases (``checks.student.wire``)
    -> {"event": "reply", "sizes": [n, ...]} + bytes   one reply per case
    <- {"continue": true}                          on to the next cell

and the student's process answers each request with ``checks.student.observing.answer`` (it
calls the student's code on the cases; nothing is judged there). It talks to this process over pipes
only: its output (the first ``output_kept`` bytes kept), the cell it starts, its replies
(``record_limit`` bytes at most each) and the requests it reads. Anything else on its channel,
or anything out of turn (``Channel``), ends it; a request or go-ahead for a submission that has
already ended is dropped. A cell past ``cell_timeout`` (not counting the time the grader takes
to judge) is interrupted (SIGINT), then killed if it does not stop, and the whole job is killed
past ``budget``.

Each job ends with a JSON line, {"status": "finished" | "timed out" | "crashed", "reason": "...",
"files": {name: size}}, followed by the files' bytes (output.txt). After each job the scratch
directory (home, temporary files, working directory) is emptied and, in the
sandbox's own PID namespace (``--own-pid-namespace``), every other process is killed.

This file imports nothing from the grader but ``confinement`` and ``framing`` next to it, so it
can run where the grader's files are not visible.
"""

import argparse
import fcntl
import importlib
import importlib.abc
import importlib.util
import os
import select
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

try:  # imported as grader.sandbox.runner (tests), or run as a file where the grader is not seen
    from . import confinement, framing
except ImportError:
    sys.path.append(str(Path(__file__).parent))
    import confinement
    import framing

SCRATCH_LAYOUT = ("home", "tmp", "work")
GRACE_SECONDS = 5.0  # after SIGINT, how long a cell has to stop before it is killed
# reads of its progress pipe once it has ended (128 KiB at most): a pipe write over 4 KiB may be
# split, so its "done" can still wait behind a flood when the process is gone
FINAL_READS = 32
# the forked process's pipes: its output, the cell it starts, its channel to the grader (its
# waits and replies), and the grader's requests to it
OUTPUT_FD, PROGRESS_FD, CHANNEL_FD, REQUEST_FD = 1, 3, 4, 5
JOBS_FD = 0  # the warm runner's stdin: jobs and requests from the grader
UNCONFINED = 71  # its exit status when the limits could not be set: no student code ran


@dataclass(frozen=True)
class Setup:
    """What the warm runner prepared once: its scratch directory and the student's side of
    the checks (from the lesson's package)."""

    scratch: Path
    own_pid_namespace: bool
    observing: object  # attention_course.checks.student.observing


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scratch", type=Path, required=True, help="private writable directory")
    parser.add_argument("--package-root", type=Path, required=True,
                        help="the folder holding the lesson's attention_course package")
    parser.add_argument("--own-pid-namespace", action="store_true",
                        help="alone in a PID namespace: kill every other process after each job")
    return parser


def prepare(scratch: Path, package_root: Path, own_pid_namespace: bool = False) -> Setup:
    """Point this process at the scratch directory and import what every submission needs."""
    scratch = scratch.resolve()
    os.environ.update({"HOME": str(scratch / "home"), "TMPDIR": str(scratch / "tmp"),
                       "IPYTHONDIR": str(scratch / "home" / ".ipython"), "MPLBACKEND": "Agg",
                       "TORCHDYNAMO_DISABLE": "1"})  # torch.compile runs the plain function
    sys.path.insert(0, str(package_root))
    importlib.import_module("matplotlib.pyplot")  # once here, not once per submission
    observing = importlib.import_module("attention_course.checks.student.observing")
    _on_one_thread()
    return Setup(scratch, own_pid_namespace, observing)


def _on_one_thread() -> None:
    """A submission's process may start no thread (``confinement``): torch runs on one, and
    tqdm starts no monitor. So honest code never asks for a thread: torch's OpenMP would end
    the process for want of the threads asked for, tqdm would warn. A submission that asks
    torch for more threads is told that grading runs on one."""
    import torch
    from tqdm import std

    std.tqdm.monitor_interval = 0
    torch.set_num_threads(1)

    def one_thread(n: int) -> None:
        print(f"(grading runs on one thread: torch.set_num_threads({n}) has no effect)",
              file=sys.stderr)

    torch.set_num_threads = torch.set_num_interop_threads = one_thread


# ---------------------------------------------------------------- in the forked process

class LessonModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``attention_course.<name>`` from a job's sources, held in memory."""

    def __init__(self, sources: dict[str, str]):
        self.sources = {f"attention_course.{name}": source for name, source in sources.items()}

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.sources:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=f"<{fullname}>")

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        code = compile(self.sources[module.__name__], f"<{module.__name__}>", "exec")
        exec(code, vars(module))  # the course's own source, sent by the grader


def run_submission(job: dict, setup: Setup, progress, channel, requests: int) -> None:
    """Runs in the forked process: execute the cells; at each graded cell, answer the
    grader's requests until it says to go on."""
    sys.meta_path.insert(0, LessonModules(job["modules"]))
    os.chdir(setup.scratch / "work")
    for stream in (sys.stdout, sys.stderr):  # what it printed survives its being killed
        stream.reconfigure(line_buffering=True)
    shell = InteractiveShell.instance(config=Config(  # plain tracebacks: read in a text file
        HistoryManager={"enabled": False}, InteractiveShell={"colors": "nocolor"}))
    for index, cell in enumerate(job["cells"]):
        progress.write(f"{index}\n")
        progress.flush()
        if cell["kind"] == "code":
            _run_cell(shell, cell["source"])
        else:
            framing.send(channel, {"at": cell["grade_id"]})
            serve_requests(setup.observing, shell.user_ns, channel, requests)
    framing.send(channel, {"done": True})
    sys.stdout.flush()
    sys.stderr.flush()
    progress.write("done\n")
    progress.flush()


def serve_requests(observing, namespace: dict, channel, requests: int) -> None:
    """Answer the grader's requests (read from the fd ``requests``) on the student's objects
    until it says to go on."""
    frames = framing.Frames(_request_size, max_header=None)
    while True:
        header, request = frames.receive(requests)
        if header.get("continue"):
            return
        try:
            replies = observing.answer(request, namespace)
        except BaseException as err:  # noqa: BLE001 (interrupted past the cell's time limit)
            failed = observing.Observation(error=_describe_error(err))
            cases = observing.wire.loads(request)["cases"]
            replies = [observing.wire.dumps(vars(failed)) for _ in cases]
        framing.send(channel, {"reply": [len(r) for r in replies]}, b"".join(replies))


def _request_size(header: dict) -> int:
    return header.get("request", 0)


def _describe_error(err: BaseException) -> str:
    if isinstance(err, KeyboardInterrupt):
        return "interrupted: it ran past the time limit for one cell"
    if isinstance(err, NotImplementedError):
        return "NotImplementedError: a function it needs is not written yet"
    return f"{type(err).__name__}: {err}"[:2000]


def _run_cell(shell: InteractiveShell, source: str) -> None:
    """One cell; its errors are in its output, as in a notebook, and the next cell runs."""
    try:
        shell.run_cell(source, store_history=False)
    except BaseException:  # noqa: BLE001, S110 (an interrupt between two cells: go on)
        pass


def confine(job: dict, pipes: dict[int, int]) -> None:
    """In the forked process, before any student code: its own process group, stdin from
    /dev/null, ``pipes`` (fd here -> its end of a pipe) and no other descriptor, then the
    limits."""
    os.setpgid(0, 0)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    above = {fd: fcntl.fcntl(end, fcntl.F_DUPFD, 10) for fd, end in pipes.items()}
    for fd, copy in above.items():  # (an end may itself sit on one of the target fds)
        os.dup2(copy, fd)
    os.closerange(max(pipes) + 1, os.sysconf("SC_OPEN_MAX"))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        confinement.limit_resources(**job["limits"])
        confinement.confine()
    except (OSError, ValueError):
        os._exit(UNCONFINED)


# ---------------------------------------------------------------- the warm parent

def inbox() -> framing.Frames:
    """The grader's side of the pipes: jobs, requests and go-aheads (trusted: no size limit)."""
    return framing.Frames(_request_size, max_header=None)


class ProtocolBroken(Exception):
    """The student's process wrote to its channel what no honest runner writes."""


class Channel:
    """The student's process's channel, read as it comes: its waits, its replies and its last
    words, each relayed to the grader once whole, and each in its turn: the process may stop
    at a graded cell or end only while it runs its cells (``turn`` "child"), and reply only to
    a request passed on to it ("reply"); while the grader judges ("grader") it may say nothing.
    So the grader and the process never both write at once."""

    def __init__(self, fd: int, limit: int, answers):
        self.fd, self.answers, self.done, self.turn = fd, answers, False, "child"
        self.frames = framing.Frames(lambda header: framing.sizes(header, "reply"),
                                     max_size=limit)

    def drain(self) -> bool:
        """Read, relay whole messages; True when the grader now has something to answer."""
        if not self.frames.read_from(self.fd):
            return False
        relayed = False
        try:
            while (message := self.frames.pop()) is not None:
                relayed |= self._relay(*message)
        except framing.FramingError as err:
            raise ProtocolBroken(str(err)) from None
        return relayed

    def _relay(self, header: dict, data: bytes) -> bool:
        if set(header) == {"at"} and type(header["at"]) is str and self.turn == "child":
            self.turn = "grader"
            framing.send(self.answers, {"event": "at", "grade_id": header["at"][:200]})
            return True
        if set(header) == {"reply"} and self.turn == "reply":
            self.turn = "grader"
            framing.send(self.answers, {"event": "reply", "sizes": header["reply"]}, data)
            return True
        if header == {"done": True} and self.turn == "child" and not self.done:
            self.done = True
            return False
        raise ProtocolBroken("a message out of turn")


def serve(setup: Setup, jobs: framing.Frames, answers) -> None:
    """One final answer per job read from stdin: a JSON line, then the bytes of the files it
    lists."""
    while True:
        try:
            job, _ = jobs.receive(JOBS_FD)
        except EOFError:
            return
        if "cells" not in job:  # the grader's word for a submission that has ended since
            continue
        answer, files = supervise(job, setup, jobs, answers)
        answer["files"] = {name: len(data) for name, data in files.items()}
        framing.send(answers, answer, b"".join(files.values()))


def supervise(job: dict, setup: Setup, jobs: framing.Frames, answers
              ) -> tuple[dict, dict[str, bytes]]:
    """Fork a process for ``job``, relay the grader's requests, enforce its limits, say how it
    ended, collect its output."""
    pipes = {fd: os.pipe() for fd in (OUTPUT_FD, PROGRESS_FD, CHANNEL_FD, REQUEST_FD)}
    theirs = {fd: (read if fd == REQUEST_FD else write) for fd, (read, write) in pipes.items()}
    pid = os.fork()
    if pid == 0:  # the submission's process
        code = 0
        try:
            confine(job, theirs | {2: theirs[OUTPUT_FD]})
            run_submission(job, setup, os.fdopen(PROGRESS_FD, "w"),
                           os.fdopen(CHANNEL_FD, "wb"), REQUEST_FD)
        except BaseException:  # noqa: BLE001 (any failure ends the process; the parent reports)
            code = 70
        os._exit(code)
    for end in theirs.values():
        os.close(end)
    output = Stream(pipes[OUTPUT_FD][0], job["output_kept"])
    channel = Channel(pipes[CHANNEL_FD][0], job["record_limit"], answers)
    try:
        outcome = _watch(pid, pipes[PROGRESS_FD][0], output, channel,
                         Relay(jobs, pipes[REQUEST_FD][1], channel), job)
    finally:  # whatever happened, the submission's processes end here
        _kill_group(pid)
        for fd in (pipes[PROGRESS_FD][0], pipes[CHANNEL_FD][0], pipes[REQUEST_FD][1]):
            os.close(fd)
    if setup.own_pid_namespace:
        _kill_strays()
    reset_scratch(setup.scratch)
    files = {"output.txt": output.finish()}
    if output.total > len(files["output.txt"]):
        files["output.txt"] += f"\n[output cut: {output.total:,} bytes in all]\n".encode()
    if outcome["status"] == "finished" and not channel.done:
        outcome = {"status": "crashed", "reason": "the kernel ended without saying so"}
    return outcome, files


class Relay:
    """The grader's requests and go-aheads, passed on to the student's process as they come;
    each gives the channel its next turn."""

    def __init__(self, frames: framing.Frames, fd: int, channel: Channel):
        self.frames, self.fd, self.channel, self.pending = frames, fd, channel, b""
        os.set_blocking(fd, False)

    def take(self) -> None:
        """Queue whole messages the grader has sent."""
        while (message := self.frames.pop()) is not None:
            self.channel.turn = "reply" if "request" in message[0] else "child"
            self.pending += framing.encode(*message)

    def push(self) -> None:
        try:
            written = os.write(self.fd, self.pending[:1 << 16])
        except (BlockingIOError, BrokenPipeError):
            return
        self.pending = self.pending[written:]


class Stream:
    """A pipe from the submission's process, read as it comes: the first ``limit`` bytes are
    kept, the rest only counted."""

    def __init__(self, fd: int, limit: int):
        self.fd, self.limit, self.data, self.total = fd, limit, bytearray(), 0

    def drain(self) -> bool:
        """Read what is there; False at end of file."""
        chunk = os.read(self.fd, 1 << 16)
        self.total += len(chunk)
        self.data += chunk[:max(0, self.limit - len(self.data))]
        return bool(chunk)

    def finish(self) -> bytes:
        """Read to the end (its writers are gone), close, return what was kept."""
        while select.select([self.fd], [], [], GRACE_SECONDS)[0] and self.drain():
            pass
        os.close(self.fd)
        return bytes(self.data)


def _watch(pid: int, progress_fd: int, output: Stream, channel: Channel, relay: Relay,
           job: dict) -> dict:
    started = cell_started = time.monotonic()
    cell, done, interrupted, waiting, buffer = None, False, False, False, b""
    while True:
        writing = [relay.fd] if relay.pending else []
        ready, can_write, _ = select.select(
            [progress_fd, output.fd, channel.fd, JOBS_FD], writing, [], 0.05)
        if output.fd in ready:
            output.drain()
        if channel.fd in ready:
            try:
                waiting = channel.drain() or waiting
            except ProtocolBroken as err:
                _kill_group(pid)
                return {"status": "crashed", "reason": f"the kernel broke the grading protocol "
                                                       f"({err}) in cell {_n(cell)}"}
        if JOBS_FD in ready:
            if not relay.frames.read_from(JOBS_FD):
                _kill_group(pid)
                return {"status": "crashed", "reason": "the grader went away"}
            relay.take()
            if relay.pending:  # the grader answered: the cell's clock runs again
                waiting, cell_started = False, time.monotonic()
        if can_write:
            relay.push()
        finished, status = os.waitpid(pid, os.WNOHANG)
        if progress_fd in ready or finished:  # once it has ended, what it wrote last too
            lines, buffer = _progress(progress_fd, buffer, FINAL_READS if finished else 1)
            for line in lines:
                done = done or line == b"done"
                if line.isdigit() and len(line) <= 6:
                    cell, cell_started, interrupted = int(line), time.monotonic(), False
        if finished:
            while _readable(channel.fd) and channel.drain():
                pass  # its last words
            return _ended(status, done, cell)
        now = time.monotonic()
        if now - started > job["budget"]:
            _kill_group(pid)
            return {"status": "timed out", "reason": f"the submission ran past its budget of "
                                                     f"{job['budget']:g} s (in cell {_n(cell)})"}
        if waiting:
            continue
        if now - cell_started > job["cell_timeout"] + (GRACE_SECONDS if interrupted else 0):
            if interrupted:
                _kill_group(pid)
                return {"status": "timed out", "reason": f"cell {_n(cell)} ran past "
                        f"{job['cell_timeout']:g} s and did not stop when interrupted"}
            os.kill(pid, signal.SIGINT)
            interrupted = True


def _readable(fd: int) -> bool:
    return fd in select.select([fd], [], [], 0)[0]


def _progress(fd: int, buffer: bytes, reads: int) -> tuple[list[bytes], bytes]:
    """At most ``reads`` reads of what waits on the progress pipe: its whole lines, and the
    start of the next one (a cell number or "done": nothing longer is one)."""
    lines = []
    for _ in range(reads):
        chunk = os.read(fd, 4096) if _readable(fd) else b""
        if not chunk:
            break
        *whole, buffer = (buffer + chunk).split(b"\n")
        lines, buffer = lines + whole, buffer[-16:]
    return lines, buffer


def _ended(status: int, done: bool, cell: int | None) -> dict:
    code = os.waitstatus_to_exitcode(status)
    if done and code == 0:
        return {"status": "finished", "reason": ""}
    if code == UNCONFINED:
        return {"status": "crashed", "reason": "the kernel could not be confined (resource "
                                               "limits or seccomp refused): nothing was run"}
    if code == -signal.SIGXCPU:
        return {"status": "timed out", "reason": f"cell {_n(cell)} used up the submission's "
                                                 f"CPU time"}
    how = (f"killed by signal {signal.Signals(-code).name}" if code < 0
           else f"exited with status {code}")
    return {"status": "crashed", "reason": f"the kernel died in cell {_n(cell)} ({how})"}


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _kill_strays() -> None:
    """Alone in the sandbox's PID namespace: kill every process but this one (and init)."""
    for _ in range(1000):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return  # nothing left to kill
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        time.sleep(0.01)


def reset_scratch(scratch: Path) -> None:
    """Empty the private scratch directory (whatever a submission did to it), then lay it out."""
    scratch.chmod(0o700)
    for path, folders, _ in os.walk(scratch):
        for folder in (os.path.join(path, name) for name in folders):
            if not os.path.islink(folder):  # a folder the submission locked stops rmtree
                os.chmod(folder, 0o700)
    for entry in os.scandir(scratch):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    for name in SCRATCH_LAYOUT:
        (scratch / name).mkdir()


def _n(cell: int | None) -> str:
    return "?" if cell is None else str(cell + 1)


def main(argv: list[str] | None = None) -> None:
    options = arguments().parse_args(argv)
    confinement.keep_memory_private()
    setup = prepare(options.scratch, options.package_root, options.own_pid_namespace)
    reset_scratch(setup.scratch)
    framing.send(sys.stdout.buffer, {"ready": "attention_course"})
    try:
        serve(setup, inbox(), sys.stdout.buffer)
    except BrokenPipeError:  # the grader stopped listening: it has stopped this runner
        os._exit(0)


if __name__ == "__main__":
    main()
