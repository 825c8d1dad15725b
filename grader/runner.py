"""The only part of grading that runs student code: a warm interpreter that forks one process
per submission.

Started once per grading worker (``python -I grader/runner.py``), it imports torch, IPython,
matplotlib and the course package once, then reads jobs from stdin, one JSON line each:

    {"out": DIR, "cell_timeout": 120, "budget": 600,
     "cells": [{"kind": "code", "source": "..."},
               {"kind": "record", "grade_id": "check_softmax",
                "calls": [["check_softmax", "softmax", 0], ["check_softmax", "softmax", 1]]},
               {"kind": "copy_accuracy", "grade_id": "check_copy_accuracy"}, ...]}

For each job it forks a fresh process that runs the code cells in order in an IPython shell
(the engine inside ipykernel) and, where a graded test cell stood, records what the student's
objects do on the check's seeded inputs (``attention_course.checks.recording``). Observations
go to DIR/observations.json and DIR/observations.npz; nothing is judged here. The forked process
reports each cell as it starts; a cell past ``cell_timeout`` is interrupted (SIGINT), then
killed if it does not stop, and the whole job is killed past ``budget``. One JSON line answers
each job: {"status": "finished" | "timed out" | "crashed", "reason": "..."}.

This file imports nothing from the grader, so it can run where the grader's files are not
visible (the sandbox).
"""

import json
import os
import select
import signal
import sys
import time
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib.pyplot  # noqa: E402, F401  (imported once here, not per submission)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from torch import nn  # noqa: E402
from traitlets.config import Config  # noqa: E402

import attention_course  # noqa: E402
from attention_course import checks  # noqa: E402
from attention_course.checks import framework, recording, shortcuts  # noqa: E402
from attention_course.checks.framework import Observation  # noqa: E402
from attention_course.data import CopyTask, seeded_generator  # noqa: E402
from attention_course.model import DecoderOnlyTransformer  # noqa: E402

# lesson 05's held-out test: the seeds its graded cell decodes, the task it is about
COPY_SEEDS, COPY_TASK, COPY_SEQUENCES = (2024, 4242), CopyTask(seq_len=10, vocab_size=10), 1000
GRACE_SECONDS = 5.0  # after SIGINT, how long a cell has to stop before it is killed

# ---------------------------------------------------------------- what student code may tamper with

def _guarded() -> dict[tuple[object, str], object]:
    """(owner, attribute) -> original object, for everything a forged check would patch."""
    owners = [torch, torch.testing, torch.Tensor, checks, framework, recording, shortcuts]
    owners += [getattr(checks, f"lesson0{n}") for n in range(1, 6)]
    names = {torch: ("allclose", "equal", "isclose", "eq"), torch.testing: ("assert_close",),
             torch.Tensor: ("__eq__", "equal", "allclose", "detach", "cpu", "contiguous",
                            "reshape", "view", "numpy")}
    guarded = {}
    for owner in owners:
        for name in names.get(owner, [n for n in vars(owner) if not n.startswith("__")]):
            guarded[owner, name] = getattr(owner, name)
    return guarded


GUARDED = _guarded()
CODES = {obj: obj.__code__ for obj in GUARDED.values() if hasattr(obj, "__code__")}
CHECKS = {name: getattr(checks, name) for name in checks.__all__}


def _label(owner, name: str) -> str:
    return f"{getattr(owner, '__name__', type(owner).__name__)}.{name}"


def restore_guarded() -> list[str]:
    """Put back every guarded object student code replaced; say what was replaced."""
    evidence = []
    for (owner, name), original in GUARDED.items():
        if getattr(owner, name, None) is not original:
            evidence.append(f"{_label(owner, name)} was replaced")
            setattr(owner, name, original)
    for function, code in CODES.items():
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
        self.calls: list[list[Observation]] = []

    def add(self, entry: dict, calls: list[list[Observation]]) -> None:
        self.entries.append(entry | {"first": len(self.calls), "count": len(calls)})
        self.calls.extend(calls)

    def save(self, out: Path, extra: dict) -> None:
        metadata, arrays = recording.to_arrays(self.calls)
        np.savez(out / "observations.npz", **arrays)
        (out / "observations.json").write_text(json.dumps(
            {"entries": self.entries, "observations": metadata} | extra))


def record_checks(cell: dict, namespace: dict, record: Record) -> None:
    for check, target, seed in cell["calls"]:
        entry = {"grade_id": cell["grade_id"], "check": check, "target": target, "seed": seed,
                 "error": None}
        student = namespace.get(target)
        with recording.recording() as recorder:
            try:
                if student is None:
                    raise NameError(f"`{target}` is not defined: did the cell that defines it "
                                    f"run without errors?")
                CHECKS[check](student, seed=seed)
            except BaseException as err:  # noqa: BLE001 (the student's code, interrupted too)
                entry["error"] = _describe_error(err)
        record.add(entry, recorder.calls)


def record_copy_accuracy(cell: dict, namespace: dict, record: Record) -> None:
    """The trained model's weights, and the student's decoding of the held-out prompts."""
    entry = {"grade_id": cell["grade_id"], "kind": "copy_accuracy", "error": None}
    observation = Observation()
    try:
        model, decode = namespace.get("model"), namespace.get("greedy_decode")
        if type(model) is not DecoderOnlyTransformer:
            raise TypeError("`model` is not the lesson's DecoderOnlyTransformer")
        model = model.cpu().eval()
        decoded = []
        for seed in COPY_SEEDS:
            test = COPY_TASK.batch(COPY_SEQUENCES, seeded_generator(seed))
            decoded.append(decode(model, COPY_TASK.prompt(test.source), COPY_TASK.seq_len))
        state = model.state_dict()
        entry["config"] = model_config(model)
        entry["parameters"] = list(state)
        observation.outputs = (*decoded, *state.values())
    except BaseException as err:  # noqa: BLE001
        entry["error"] = _describe_error(err)
    record.add(entry, [[observation]])


def model_config(model: DecoderOnlyTransformer) -> dict:
    block = model.blocks[0]
    return {"vocab_size": model.head.out_features, "max_len": model.embed.max_len,
            "d_model": model.head.in_features, "n_heads": block.attn.n_heads,
            "n_layers": len(model.blocks), "d_ff": block.mlp[0].out_features,
            "learned_positions": isinstance(model.embed.position, nn.Parameter)}


def _describe_error(err: BaseException) -> str:
    if isinstance(err, KeyboardInterrupt):
        return "interrupted: it ran past the time limit for one cell"
    if isinstance(err, NotImplementedError):
        return "NotImplementedError: a function it needs is not written yet"
    return f"{type(err).__name__}: {err}"[:2000]


# ---------------------------------------------------------------- one submission

def run_submission(job: dict, progress) -> None:
    """Runs in the forked process: execute the cells, record at the graded cells, save."""
    out = Path(job["out"])
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)
    log = os.open(out / "output.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.environ["IPYTHONDIR"] = str(out / "ipython")  # no profile, no startup files, no history
    shell = InteractiveShell.instance(config=Config(HistoryManager={"enabled": False}))
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
        tampering += [e for e in restore_guarded() + shell_tampering(shell, pristine)
                      if e not in tampering]
        if cell["kind"] == "record":
            record_checks(cell, shell.user_ns, record)
        else:
            record_copy_accuracy(cell, shell.user_ns, record)
    record.save(out, {"cell_errors": cell_errors, "tampering": tampering})
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


# ---------------------------------------------------------------- the warm parent

def serve(jobs=sys.stdin, answers=sys.stdout) -> None:
    for line in jobs:
        if line.strip():
            answers.write(json.dumps(supervise(json.loads(line))) + "\n")
            answers.flush()


def supervise(job: dict) -> dict:
    """Fork a process for ``job``, enforce its time limits, say how it ended."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the submission's process
        os.close(read_end)
        os.setpgid(0, 0)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        code = 0
        try:
            run_submission(job, os.fdopen(write_end, "w"))
        except BaseException:  # noqa: BLE001 (any failure ends the process; the parent reports)
            code = 70
        os._exit(code)
    os.close(write_end)
    outcome = _watch(pid, read_end, job)
    os.close(read_end)
    try:
        os.killpg(pid, signal.SIGKILL)  # whatever it left running in its process group
    except ProcessLookupError:
        pass
    return outcome


def _watch(pid: int, progress_fd: int, job: dict) -> dict:
    started = cell_started = time.monotonic()
    cell, done, interrupted, buffer = None, False, False, b""
    while True:
        ready, _, _ = select.select([progress_fd], [], [], 0.05)
        if ready:
            chunk = os.read(progress_fd, 4096)
            buffer += chunk
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
            _kill(pid)
            return {"status": "timed out", "reason": f"the submission ran past its budget of "
                                                     f"{job['budget']:g} s (in cell {_n(cell)})"}
        if now - cell_started > job["cell_timeout"] + (GRACE_SECONDS if interrupted else 0):
            if interrupted:
                _kill(pid)
                return {"status": "timed out", "reason": f"cell {_n(cell)} ran past "
                        f"{job['cell_timeout']:g} s and did not stop when interrupted"}
            os.kill(pid, signal.SIGINT)
            interrupted = True


def _ended(status: int, done: bool, cell: int | None) -> dict:
    if done and os.waitstatus_to_exitcode(status) == 0:
        return {"status": "finished", "reason": ""}
    code = os.waitstatus_to_exitcode(status)
    how = (f"killed by signal {signal.Signals(-code).name}" if code < 0
           else f"exited with status {code}")
    return {"status": "crashed", "reason": f"the kernel died in cell {_n(cell)} ({how})"}


def _kill(pid: int) -> None:
    os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def _n(cell: int | None) -> str:
    return "?" if cell is None else str(cell + 1)


if __name__ == "__main__":
    print(json.dumps({"ready": attention_course.__name__}), flush=True)
    serve()
