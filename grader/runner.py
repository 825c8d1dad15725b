"""The only part of grading that runs student code: a warm interpreter that forks one process
per submission.

Started once per grading worker (``python -I grader/runner.py --scratch DIR --package-root
SRC``), in the sandbox where there is one, it imports torch, IPython, matplotlib and the course
package (the one under SRC, which the grader uses too) once, then reads jobs from stdin, one
JSON line each:

    {"cell_timeout": 120, "budget": 600, "output_kept": 262144, "record_limit": 67108864,
     "limits": {"memory": ..., "cpu_seconds": ..., "file_size": ..., "open_files": ...},
     "cells": [{"kind": "code", "source": "..."},
               {"kind": "record", "grade_id": "check_softmax",
                "calls": [["check_softmax", ["softmax"], 0], ["check_softmax", ["softmax"], 1]]},
               ...]}

For each job it forks a fresh process, confined before any student code runs (``confinement``:
resource limits, no new processes), that runs the code cells in order in an IPython shell (the
engine inside ipykernel) and, where a graded test cell stood, records what the student's objects
do on the check's seeded inputs (``attention_course.checks.recording``); nothing is judged here.
It talks to this process over pipes only: its output (the first ``output_kept`` bytes kept),
the cell it starts, and at the end what it observed (``record_limit`` bytes at most). A cell
past ``cell_timeout`` is interrupted (SIGINT), then killed if it does not stop, and the whole
job is killed past ``budget``.

Each answer is a JSON line, {"status": "finished" | "timed out" | "crashed", "reason": "...",
"files": {name: size}}, followed by the files' bytes: output.txt, and when it finished,
observations.json and observations.npz (plain arrays, no pickles). After each job the scratch
directory (home, temporary files, working directory) is emptied and, in the sandbox's own PID
namespace (``--own-pid-namespace``), every other process is killed.

This file imports nothing from the grader but ``confinement`` next to it, so it can run where
the grader's files are not visible.
"""

import argparse
import fcntl
import importlib
import io
import json
import os
import select
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

try:  # imported as grader.runner (tests), or run as a file where the grader is not visible
    from . import confinement
except ImportError:
    sys.path.append(str(Path(__file__).parent))
    import confinement

SCRATCH_LAYOUT = ("home", "tmp", "work")
GRACE_SECONDS = 5.0  # after SIGINT, how long a cell has to stop before it is killed
# the forked process's pipes to the runner: its output, the cell it starts, what it observed
OUTPUT_FD, PROGRESS_FD, RECORD_FD = 1, 3, 4
UNCONFINED = 71  # its exit status when the limits could not be set: no student code ran


@dataclass(frozen=True)
class Setup:
    """What the warm runner prepared once: its scratch directory, the course's checks and the
    original of everything a forged check would patch."""

    scratch: Path
    own_pid_namespace: bool
    checks: dict  # check name -> function
    guarded: dict  # (owner, attribute) -> original object
    codes: dict  # function -> its original code object


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scratch", type=Path, required=True, help="private writable directory")
    parser.add_argument("--package-root", type=Path, required=True,
                        help="the folder holding the attention_course package the grader uses")
    parser.add_argument("--own-pid-namespace", action="store_true",
                        help="alone in a PID namespace: kill every other process after each job")
    return parser


def prepare(scratch: Path, package_root: Path, own_pid_namespace: bool = False) -> Setup:
    """Point this process at the scratch directory and import what every submission needs."""
    scratch = scratch.resolve()
    os.environ.update({"HOME": str(scratch / "home"), "TMPDIR": str(scratch / "tmp"),
                       "IPYTHONDIR": str(scratch / "home" / ".ipython"), "MPLBACKEND": "Agg"})
    sys.path.insert(0, str(package_root))
    importlib.import_module("matplotlib.pyplot")  # once here, not once per submission
    checks = importlib.import_module("attention_course.checks")
    guarded = _guarded(checks)
    codes = {obj: obj.__code__ for obj in guarded.values() if hasattr(obj, "__code__")}
    return Setup(scratch, own_pid_namespace, dict(checks.CHECKS), guarded, codes)


# ---------------------------------------------------------------- what student code may tamper with

def _guarded(checks) -> dict[tuple[object, str], object]:
    """(owner, attribute) -> original object, for everything a forged check would patch."""
    from attention_course.checks import framework, recording, shortcuts

    owners = [torch, torch.testing, torch.Tensor, checks, framework, recording, shortcuts,
              *checks.MODULES]
    names = {torch: ("allclose", "equal", "isclose", "eq"), torch.testing: ("assert_close",),
             torch.Tensor: ("__eq__", "equal", "allclose", "detach", "cpu", "contiguous",
                            "reshape", "view", "numpy")}
    guarded = {}
    for owner in owners:
        for name in names.get(owner, [n for n in vars(owner) if not n.startswith("__")]):
            guarded[owner, name] = getattr(owner, name)
    return guarded


def _label(owner, name: str) -> str:
    return f"{getattr(owner, '__name__', type(owner).__name__)}.{name}"


def restore_guarded(setup: Setup) -> list[str]:
    """Put back every guarded object student code replaced; say what was replaced."""
    evidence = []
    for (owner, name), original in setup.guarded.items():
        if getattr(owner, name, None) is not original:
            evidence.append(f"{_label(owner, name)} was replaced")
            setattr(owner, name, original)
    for function, code in setup.codes.items():
        if function.__code__ is not code:
            evidence.append(f"the code of {function.__module__}.{function.__qualname__} was "
                            f"changed")
            function.__code__ = code
    return evidence


def shell_tampering(shell: InteractiveShell, pristine: dict) -> list[str]:
    """Changes to the IPython shell a notebook has no reason to make."""
    seen = _shell_state(shell)
    evidence = [f"{what} changed ({pristine[what]} -> {seen[what]})"
                for what in seen if seen[what] != pristine[what]]
    if "showtraceback" in vars(shell):
        evidence.append("the shell's showtraceback was replaced")
    return evidence


def _shell_state(shell: InteractiveShell) -> dict:
    return {
        "input transformers": len(shell.input_transformers_cleanup)
        + len(shell.input_transformers_post) + len(shell.input_transformer_manager.line_transforms),
        "AST transformers": len(shell.ast_transformers),
        "custom exception handlers": len(shell.custom_exceptions),
        # post_execute is matplotlib's (it draws figures); pre-run hooks are nobody's
        "pre-run callbacks": sum(len(shell.events.callbacks[e])
                                 for e in ("pre_run_cell", "pre_execute")),
    }


# ---------------------------------------------------------------- recording, in the forked process

class Record:
    """Everything recorded for one submission: per graded cell, the calls and their errors."""

    def __init__(self):
        self.entries: list[dict] = []
        self.calls: list = []  # per check call, its list of Observations

    def add(self, entry: dict, calls: list) -> None:
        self.entries.append(entry | {"first": len(self.calls), "count": len(calls)})
        self.calls.extend(calls)

    def send(self, pipe, extra: dict) -> None:
        """To the runner: the metadata as one JSON line, then the arrays as an .npz file."""
        from attention_course.checks import recording

        metadata, arrays = recording.to_arrays(self.calls)
        pipe.write(json.dumps({"entries": self.entries, "observations": metadata} | extra)
                   .encode() + b"\n")
        arrays_file = io.BytesIO()
        np.savez(arrays_file, **arrays)
        pipe.write(arrays_file.getvalue())
        pipe.flush()


def record_checks(cell: dict, namespace: dict, record: Record, checks: dict) -> None:
    """Call each of the cell's checks on the student's objects, recording, judging nothing."""
    from attention_course.checks import recording

    for check, targets, seed in cell["calls"]:
        entry = {"grade_id": cell["grade_id"], "check": check, "targets": targets, "seed": seed,
                 "error": None}
        with recording.recording() as recorder:
            try:
                missing = [name for name in targets if name not in namespace]
                if missing:
                    raise NameError(f"`{missing[0]}` is not defined: did the cell that defines "
                                    f"it run without errors?")
                checks[check](*(namespace[name] for name in targets), seed=seed)
            except BaseException as err:  # noqa: BLE001 (the student's code, interrupted too)
                entry["error"] = _describe_error(err)
        record.add(entry, recorder.calls)


def _describe_error(err: BaseException) -> str:
    if isinstance(err, KeyboardInterrupt):
        return "interrupted: it ran past the time limit for one cell"
    if isinstance(err, NotImplementedError):
        return "NotImplementedError: a function it needs is not written yet"
    return f"{type(err).__name__}: {err}"[:2000]


# ---------------------------------------------------------------- one submission, confined

def run_submission(job: dict, setup: Setup, progress, record_pipe) -> None:
    """Runs in the forked process: execute the cells, record at the graded cells, send."""
    os.chdir(setup.scratch / "work")
    shell = InteractiveShell.instance(config=Config(  # plain tracebacks: read in a text file
        HistoryManager={"enabled": False}, InteractiveShell={"colors": "nocolor"}))
    pristine = _shell_state(shell)
    record, cell_errors, tampering = Record(), {}, []
    for index, cell in enumerate(job["cells"]):
        progress.write(f"{index}\n")
        progress.flush()
        if cell["kind"] == "code":
            result = _run_cell(shell, cell["source"])
            if result:
                cell_errors[index] = result
            continue
        tampering += [e for e in restore_guarded(setup) + shell_tampering(shell, pristine)
                      if e not in tampering]
        record_checks(cell, shell.user_ns, record, setup.checks)
    record.send(record_pipe, {"cell_errors": cell_errors, "tampering": tampering})
    sys.stdout.flush()
    sys.stderr.flush()
    progress.write("done\n")
    progress.flush()


def _run_cell(shell: InteractiveShell, source: str) -> str | None:
    try:
        result = shell.run_cell(source, store_history=False)
    except BaseException as err:  # noqa: BLE001 (SystemExit, interrupts outside the cell)
        return _describe_error(err)
    err = result.error_before_exec or result.error_in_exec
    return None if err is None else _describe_error(err)


def confine(job: dict, pipes: dict[int, int]) -> None:
    """In the forked process, before any student code: its own process group, stdin from
    /dev/null, ``pipes`` (fd here -> write end) and no other descriptor, then the limits."""
    os.setpgid(0, 0)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    above = {fd: fcntl.fcntl(write_end, fcntl.F_DUPFD, 10) for fd, write_end in pipes.items()}
    for fd, copy in above.items():  # (a write end may itself sit on one of the target fds)
        os.dup2(copy, fd)
    os.closerange(max(pipes) + 1, os.sysconf("SC_OPEN_MAX"))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        confinement.limit_resources(**job["limits"])
        confinement.forbid_new_processes()
    except (OSError, ValueError):
        os._exit(UNCONFINED)


# ---------------------------------------------------------------- the warm parent

def serve(setup: Setup, jobs, answers) -> None:
    """One answer per job: a JSON line, then the bytes of the files it lists, in order."""
    for line in jobs:
        if line.strip():
            answer, files = supervise(json.loads(line), setup)
            answer["files"] = {name: len(data) for name, data in files.items()}
            answers.write(json.dumps(answer).encode() + b"\n" + b"".join(files.values()))
            answers.flush()


def supervise(job: dict, setup: Setup) -> tuple[dict, dict[str, bytes]]:
    """Fork a process for ``job``, enforce its limits, say how it ended, collect what it sent."""
    pipes = {fd: os.pipe() for fd in (OUTPUT_FD, PROGRESS_FD, RECORD_FD)}
    pid = os.fork()
    if pid == 0:  # the submission's process
        code = 0
        try:
            writes = {fd: write for fd, (_, write) in pipes.items()}
            confine(job, writes | {2: writes[OUTPUT_FD]})
            run_submission(job, setup, os.fdopen(PROGRESS_FD, "w"), os.fdopen(RECORD_FD, "wb"))
        except BaseException:  # noqa: BLE001 (any failure ends the process; the parent reports)
            code = 70
        os._exit(code)
    for _, write in pipes.values():
        os.close(write)
    output = Stream(pipes[OUTPUT_FD][0], job["output_kept"])
    record = Stream(pipes[RECORD_FD][0], job["record_limit"])
    outcome = _watch(pid, pipes[PROGRESS_FD][0], (output, record), job)
    os.close(pipes[PROGRESS_FD][0])
    _kill_group(pid)
    if setup.own_pid_namespace:
        _kill_strays()
    reset_scratch(setup.scratch)
    files = {"output.txt": output.finish()}
    if output.total > len(files["output.txt"]):
        files["output.txt"] += f"\n[output cut: {output.total:,} bytes in all]\n".encode()
    observations = record.finish()
    if outcome["status"] != "finished":
        return outcome, files
    if record.total > record.limit or b"\n" not in observations:
        return {"status": "crashed", "reason": f"the kernel did not send what it observed (at "
                f"most {record.limit:,} bytes); it sent {record.total:,}"}, files
    meta, arrays = observations.split(b"\n", 1)
    return outcome, files | {"observations.json": meta, "observations.npz": arrays}


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


def _watch(pid: int, progress_fd: int, streams: tuple[Stream, ...], job: dict) -> dict:
    started = cell_started = time.monotonic()
    cell, done, interrupted, buffer = None, False, False, b""
    while True:
        ready, _, _ = select.select([progress_fd, *(s.fd for s in streams)], [], [], 0.05)
        for stream in streams:
            if stream.fd in ready:
                stream.drain()
        if progress_fd in ready:
            buffer += os.read(progress_fd, 4096)
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                done = done or line == b"done"
                if line.isdigit():
                    cell, cell_started, interrupted = int(line), time.monotonic(), False
        finished, status = os.waitpid(pid, os.WNOHANG)
        if finished:
            return _ended(status, done, cell)
        now = time.monotonic()
        if now - started > job["budget"]:
            _kill_group(pid)
            return {"status": "timed out", "reason": f"the submission ran past its budget of "
                                                     f"{job['budget']:g} s (in cell {_n(cell)})"}
        if now - cell_started > job["cell_timeout"] + (GRACE_SECONDS if interrupted else 0):
            if interrupted:
                _kill_group(pid)
                return {"status": "timed out", "reason": f"cell {_n(cell)} ran past "
                        f"{job['cell_timeout']:g} s and did not stop when interrupted"}
            os.kill(pid, signal.SIGINT)
            interrupted = True


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
    print(json.dumps({"ready": "attention_course"}), flush=True)
    serve(setup, sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
