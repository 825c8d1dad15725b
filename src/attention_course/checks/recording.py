"""Checks under the grader: record observations in one process, judge them in another.

A student's check cell observes and judges in the student's own kernel, where code that ran
before it can forge the verdict (a patched ``torch.allclose``, a tensor that claims equality).
The grader splits the two halves of ``run_check``:

- ``recording()``: every ``run_check`` only observes the student's code and keeps the
  ``Observation``s; ``to_arrays`` turns them into JSON-able metadata plus plain numpy arrays
  (saved with ``allow_pickle=False``: no code can travel with them);
- ``replaying(calls)``: in a process that never ran student code, every ``run_check`` takes
  the recorded observations instead of calling the student's code, and judges them against the
  reference exactly as the check cell would (same messages, same diagnosis, same shortcut rule).
"""

from contextlib import contextmanager

import numpy as np
import torch
from torch import Tensor, nn

from . import framework
from .framework import Observation, judge_all, observe

# Taken at import, before any student code runs: a student who patches these later does not
# change how observations are copied out.
_PLAIN_TENSOR_TYPES = (Tensor, nn.Parameter)
_detach, _cpu, _contiguous = Tensor.detach, Tensor.cpu, Tensor.contiguous
_reshape, _view = Tensor.reshape, Tensor.view


class Recorder:
    """Observes the student's code for every ``run_check`` call, judges nothing."""

    def __init__(self):
        self.calls: list[list[Observation]] = []

    def run(self, exercise, student, cases, student_parameters, reference, reference_parameters):
        self.calls.append([observe(exercise, student, case, student_parameters)
                           for case in cases])


class Replayer:
    """Judges recorded observations for every ``run_check`` call, runs no student code."""

    def __init__(self, calls: list[list[Observation]]):
        self.calls = iter(calls)

    def run(self, exercise, student, cases, student_parameters, reference, reference_parameters):
        seen = next(self.calls, None)
        if seen is None or len(seen) != len(cases):
            raise AssertionError(f"{exercise.name}: no record of your code's results on these "
                                 f"{len(cases)} cases (the grader could not observe it)")
        judge_all(exercise, cases, seen, reference, reference_parameters)


@contextmanager
def _session(session):
    previous, framework._session = framework._session, session
    try:
        yield session
    finally:
        framework._session = previous


def recording():
    """``with recording() as recorder:`` checks called inside fill ``recorder.calls``."""
    return _session(Recorder())


def replaying(calls: list[list[Observation]]):
    """``with replaying(calls):`` checks called inside judge ``calls`` instead of running code."""
    return _session(Replayer(calls))


# ---------------------------------------------------------------- observations as arrays

def to_arrays(calls: list[list[Observation]]) -> tuple[list, dict[str, np.ndarray]]:
    """Observations -> (JSON-able metadata, named uint8 arrays holding every tensor's bytes)."""
    arrays: dict[str, np.ndarray] = {}

    def store(value) -> dict:
        if value is None:
            return {"kind": "none"}
        if type(value) not in _PLAIN_TENSOR_TYPES:  # subclasses may lie about their data
            return {"kind": "other", "type": type(value).__name__}
        tensor = _contiguous(_cpu(_detach(value)))
        key = f"t{len(arrays)}"
        arrays[key] = _view(_reshape(tensor, (-1,)), torch.uint8).numpy().copy()
        return {"kind": "tensor", "key": key, "dtype": str(tensor.dtype).removeprefix("torch."),
                "shape": list(tensor.shape)}

    metadata = [[{
        "outputs": None if o.outputs is None else [store(x) for x in o.outputs],
        "error": o.error,
        "shortcuts": list(o.shortcuts),
        "modified_inputs": list(o.modified_inputs),
        "grads": {name: store(g) for name, g in o.grads.items()},
    } for o in call] for call in calls]
    return metadata, arrays


def from_arrays(metadata: list, arrays) -> list[list[Observation]]:
    """The inverse of ``to_arrays``; raises ValueError on anything malformed."""

    def load(entry: dict):
        kind = entry.get("kind")
        if kind == "none":
            return None
        if kind == "other":  # stands in for the student's non-tensor: judged by its type name
            return type(str(entry["type"]), (), {})()
        if kind != "tensor":
            raise ValueError(f"unknown kind of recorded value: {kind!r}")
        dtype = getattr(torch, str(entry["dtype"]), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown dtype {entry['dtype']!r}")
        raw = np.asarray(arrays[entry["key"]])
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ValueError("a recorded tensor is not stored as bytes")
        flat = torch.from_numpy(raw.copy()).view(dtype)
        return flat.reshape([int(n) for n in entry["shape"]])

    def observation(entry: dict) -> Observation:
        outputs = entry["outputs"]
        return Observation(
            outputs=None if outputs is None else tuple(load(x) for x in outputs),
            error=None if entry["error"] is None else str(entry["error"]),
            shortcuts=[str(s) for s in entry["shortcuts"]],
            modified_inputs=[str(s) for s in entry["modified_inputs"]],
            grads={str(k): load(v) for k, v in entry["grads"].items()})

    try:
        return [[observation(entry) for entry in call] for call in metadata]
    except (KeyError, TypeError, AttributeError, RuntimeError) as err:
        raise ValueError(f"malformed observations: {type(err).__name__}: {err}") from None
