"""The student's half of a check: run the student's code on one case and record what it did.

This is the only part of a check that calls student code. It knows nothing of the reference or
of the mistakes: under the grader it runs in the student's process, where neither exists
(``answer``: a request of plain values in, one reply per case out, each written down as soon as
its case ran), and its ``Observation`` (plain tensors and strings) is judged elsewhere.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import torch
from torch import Tensor

from . import harness, wire
from .shortcuts import Forbidden, watch_calls

PROBE_SEED = 1234  # the gradient probe's weights; the judging side uses the same ones


@dataclass
class Case:
    """One test input: what it exercises, in words, and the arguments."""

    description: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    grad: bool = False  # also check that gradients flow back to the float inputs
    default_device: str | None = None  # where tensors made without a device argument go

    def defaults(self):
        """The call's surroundings: torch's default device set to ``default_device``, if any."""
        return torch.device(self.default_device) if self.default_device else nullcontext()


@dataclass
class Observation:
    """What the student's code did on one case: plain tensors and strings, no code."""

    outputs: tuple | None = None
    error: str | None = None  # "NotImplementedError" or "TypeError: ..." if it raised
    shortcuts: list[str] = field(default_factory=list)
    modified_inputs: list[str] = field(default_factory=list)
    grads: dict[str, Tensor | None] = field(default_factory=dict)


def observe(inputs: tuple[str, ...], forbidden: Forbidden, student: Callable, case: Case,
            parameters: Callable[[], dict[str, Tensor]] | None = None) -> Observation:
    """Run ``student`` on ``case`` and record its outputs, errors, shortcuts and gradients
    (with respect to the float inputs and to ``parameters()``, when the case asks for them).
    ``inputs`` names the positional arguments; ``forbidden`` is what it may not call."""
    args = clone(case.args, grad=case.grad)
    snapshot = clone(args, grad=False)
    observation = Observation()
    try:
        with watch_calls(forbidden, observation.shortcuts), case.defaults():
            result = student(*args, **case.kwargs)
    except NotImplementedError as err:  # the stub has no message; torch's own errors do
        observation.error = f"NotImplementedError: {err}" if err.args else "NotImplementedError"
        return observation
    except Exception as err:  # the student's bug, reported in words
        observation.error = f"{type(err).__name__}: {err}"
        return observation
    observation.outputs = as_tuple(result)
    observation.modified_inputs = [
        name for name, a, b in zip(inputs, args, snapshot, strict=False)
        if isinstance(a, Tensor) and not torch.equal(a.detach().nan_to_num(), b.nan_to_num())]
    if case.grad:
        targets = {name: a for name, a in zip(inputs, args, strict=False)
                   if isinstance(a, Tensor) and a.requires_grad}
        try:
            observation.grads = gradients(observation.outputs,
                                          targets | (parameters() if parameters else {}))
        except Exception as err:  # an operation without a gradient, say
            observation.error = f"{type(err).__name__} while computing gradients: {err}"
            observation.outputs = None
            return observation
    observation.outputs = tuple(detach(o) for o in observation.outputs)
    return observation


def gradients(outputs: tuple, targets: dict[str, Tensor]) -> dict[str, Tensor | None]:
    """The gradient of sum(probe * output) over the differentiable outputs, per target."""
    differentiable = [o for o in outputs if isinstance(o, Tensor) and o.requires_grad]
    if not differentiable:
        return {name: None for name in targets}
    # entries that are not finite (-inf where a mask hides a score) have no meaningful
    # gradient: scores + (-inf) and scores.masked_fill(hidden, -inf) are both right
    loss = sum((o.where(o.isfinite(), 0.0) * probe_weights(o)).sum() for o in differentiable)
    grads = torch.autograd.grad(loss, list(targets.values()), allow_unused=True)
    return dict(zip(targets, grads, strict=True))


def probe_weights(output: Tensor) -> Tensor:
    """Fixed random weights, so the gradient of sum(weights * output) checks every entry."""
    generator = torch.Generator().manual_seed(PROBE_SEED)
    return torch.rand(output.shape, generator=generator, dtype=output.dtype).to(output.device)


def clone(args: tuple, grad: bool = False) -> tuple:
    def copy(a):
        if not isinstance(a, Tensor):
            return a
        a = a.detach().clone()
        return a.requires_grad_() if grad and a.is_floating_point() else a
    return tuple(copy(a) for a in args)


def as_tuple(result) -> tuple:
    return tuple(result) if isinstance(result, tuple | list) else (result,)


def detach(x):
    return x.detach() if isinstance(x, Tensor) else x


# ---------------------------------------------------------------- under the grader

def answer(request: bytes, namespace: dict) -> list[bytes]:
    """Observe the student's objects in ``namespace`` on a request's cases (see
    ``grader/grading/verdicts.py``); one reply per case, serialised before the next case runs."""
    asked = wire.loads(request)
    inputs, cases = tuple(asked["inputs"]), [Case(**case) for case in asked["cases"]]
    forbidden = Forbidden(builtin_names=frozenset(asked["forbidden"]["builtins"]),
                          function_names=frozenset(asked["forbidden"]["functions"]))
    with fresh_torch():
        try:
            student = _student(asked["student"], namespace)
        except Exception as err:  # not defined, or it cannot be built
            failed = Observation(error=f"{type(err).__name__}: {err}"[:2000])
            return [wire.dumps(vars(failed), lenient=True) for _ in cases]
        parameters = getattr(student, "probe_parameters", None)
        return [wire.dumps(vars(observe(inputs, forbidden, student, case, parameters)),
                           lenient=True) for case in cases]


@contextmanager
def fresh_torch() -> Iterator[None]:
    """torch's global settings as a fresh kernel has them, where the reference is computed,
    whatever the student's cells set (float64 by default, gradients off in a demo cell): the
    default dtype float32 and device the CPU, gradients on, no inference mode."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        with torch.device("cpu"), torch.enable_grad(), torch.inference_mode(False):
            yield
    finally:
        torch.set_default_dtype(default)


def _student(described: dict, namespace: dict) -> Callable:
    """The student's object a request names, or a harness built around such objects."""
    def target(name: str):
        if name not in namespace:
            raise NameError(f"`{name}` is not defined: did the cell that defines it run "
                            f"without errors?")
        return namespace[name]

    args = [target(a["target"]) if isinstance(a, dict) and set(a) == {"target"} else a
            for a in described["args"]]
    if described["harness"] is None:
        return args[0]
    if described["harness"] not in harness.__all__:
        raise ValueError(f"no harness {described['harness']!r}")
    return getattr(harness, described["harness"])(*args)
