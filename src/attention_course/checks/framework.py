"""The machinery behind every check.

A check runs the student's function on seeded cases (``observing.observe``: the only step that
runs student code), then judges what came back against the reference (``judge``: pure, trusted), or
by a rule when no reference output exists (``Exercise.assess``: a trained model's accuracy).
When an output is wrong, ``diagnose`` recomputes the exercise's known wrong variants (each
catalogued mistake alone, then pairs of them) and names the one the student's output matches.

Tolerance policy: outputs match when ``torch.allclose(got, expected, rtol, atol)`` holds with
rtol=1e-7, atol=1e-10 in float64 and rtol=1e-4, atol=1e-5 in float32 (loose enough for any
correct summation order: einsum, loops, float64 internals); 16-bit outputs may differ by about
one unit in the last place (a float32 result rounded once, either way); NaN must sit where the
expected output has NaN; bool outputs must be equal.
"""

import inspect
import itertools
import os
import re
import traceback
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import Tensor

from .errors import explain_error
from .student.observing import Case, Observation, as_tuple, clone, detach, observe
from .student.shortcuts import Forbidden

CHECKS_FOLDER = os.path.dirname(os.path.abspath(__file__))  # the checker's own frames
TOLERANCES = {torch.float64: (1e-7, 1e-10), torch.float16: (2e-3, 1e-4),
              torch.bfloat16: (1e-2, 1e-3)}
DEFAULT_TOLERANCE = (1e-4, 1e-5)


@dataclass(frozen=True)
class Mistake:
    """A known wrong way to solve an exercise: a name, a hint, and how to recognise it.

    ``knobs`` are the settings of the exercise's variant function that reproduce the mistake;
    ``sign``, if given, recognises it from the outputs directly: sign(got, expected) -> bool.
    """

    name: str
    hint: str
    knobs: dict = field(default_factory=dict)
    sign: Callable | None = None


@dataclass
class Exercise:
    """Everything a check needs to know about one practice function."""

    name: str
    reference: Callable | None
    inputs: tuple[str, ...]  # names of the positional arguments
    outputs: tuple[tuple[str, str], ...]  # (name, shape in words) of each returned tensor
    mistakes: tuple[Mistake, ...] = ()
    variant: Callable | None = None  # variant(*args, **knobs, **kwargs) -> a wrong output
    forbidden: Forbidden = Forbidden()
    assess: Callable | None = None  # assess(case, outputs) -> a problem in words, or None
    nan_gradient: Mistake | None = None  # named when a gradient is NaN where the reference's is not

    def __post_init__(self):
        # the exercise's own variant is the reference when no knob is set: a shortcut too
        if self.variant is not None and self.variant not in self.forbidden.functions:
            self.forbidden = replace(self.forbidden,
                                     functions=(*self.forbidden.functions, self.variant))


@dataclass
class Verdict:
    ok: bool
    message: str = ""
    mistake: str | None = None


# ---------------------------------------------------------------- the student's side

class Target:
    """Stands in for one of the student's objects, by name, where it does not exist: in the
    grader's own process, which judges what the student's process observed."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"Target({self.name!r})"


@dataclass(frozen=True)
class Harnessed:
    """What is called on each case when it is more than the student's function itself: a
    function of ``checks.student.harness`` applied to the student's objects and plain values
    (e.g. the student's class built with the reference's weights). It is built where the
    student's code runs; it may offer ``probe_parameters()`` for the gradient checks."""

    function: Callable
    args: tuple = ()

    def build(self) -> Callable:
        return self.function(*self.args)


# ---------------------------------------------------------------- judging, no student code

def judge(exercise: Exercise, case: Case, observation: Observation, expected: Observation,
          others: Sequence[tuple[Case, Observation]] = (),
          right: Sequence[tuple[Case, Observation]] = ()) -> Verdict:
    """Compare an observation of the student's code with the reference's on the same case.

    ``others`` are the student's observations on the other cases; they settle a diagnosis when
    several catalogued mistakes explain this case equally well.
    """
    name, where = exercise.name, _describe(exercise, case)
    if observation.error == "NotImplementedError":
        return Verdict(False, f"{name}: not implemented yet. Replace `raise "
                              f"NotImplementedError()` with your code, then run this cell again.")
    if observation.shortcuts:
        return Verdict(False, f"{name}: your code calls {observation.shortcuts[0]}, which is what "
                              f"this exercise asks you to write yourself. Shortcut refused: use "
                              f"basic tensor operations (earlier lessons' functions are fine). "
                              f"Stuck? Import the reference under this exercise's name (the "
                              f"lesson shows the line) to go on.",
                       mistake="shortcut")
    if observation.error:
        message = f"{name} raised {observation.error}\n  tested: {where}"
        known = explain_error(name, observation.error)
        if known is None:
            return Verdict(False, message)
        mistake, hint = known
        return Verdict(False, f"{message}\n  This is a known mistake: \"{mistake}\".\n"
                              f"  Hint: {hint}", mistake=mistake)
    if observation.modified_inputs:
        return Verdict(False, f"{name} modified its input `{observation.modified_inputs[0]}` in "
                              f"place.\n  tested: {where}\n  Hint: use out-of-place operations "
                              f"(masked_fill, not masked_fill_; x = x - m, not x -= m).")
    if exercise.assess is not None:
        problem = exercise.assess(case, observation.outputs)
        return Verdict(False, f"{name}: {problem}\n  tested: {where}") if problem else Verdict(True)
    problem = _output_problem(exercise, observation.outputs, expected.outputs)
    if problem:
        return _explain(exercise, case, observation, expected, problem, others, right)
    if case.grad:
        problem = _gradient_problem(observation.grads, expected.grads)
        if problem:
            return _gradient_verdict(exercise, problem, where, observation.grads, expected.grads)
    return Verdict(True)


def _output_problem(exercise: Exercise, got: tuple, expected: tuple) -> str | None:
    if len(got) != len(expected):
        names = ", ".join(n for n, _ in exercise.outputs)
        return f"returned {len(got)} value(s), expected {len(expected)}: {names}"
    for (name, shape_words), g, e in zip(exercise.outputs, got, expected, strict=True):
        if not isinstance(g, Tensor):
            return f"`{name}` is a {type(g).__name__}, expected a tensor"
        if g.device.type != e.device.type:
            return (f"`{name}` is on the device {g.device.type}, expected {e.device.type}: "
                    f"create new tensors on the device you are given (device=...), or on the "
                    f"device of the inputs")
        if g.shape != e.shape:
            return (f"`{name}` has shape {tuple(g.shape)}, expected {tuple(e.shape)} "
                    f"{shape_words}: {_axes_problem(g.shape, e.shape, shape_words)}")
        if g.dtype != e.dtype:
            return f"`{name}` has dtype {g.dtype}, expected {e.dtype}: {_dtype_hint(e.dtype)}"
        if not matches(g, e):
            return f"`{name}` has wrong values: {_difference(g, e)}"
    return None


def _axes_problem(got: torch.Size, expected: torch.Size, shape_words: str) -> str:
    """Which axes are wrong, named from ``shape_words`` ("(B, H, T, S): ...") when it names
    every axis."""
    named = re.match(r"\(([^)]*)\)", shape_words)
    names = [n.strip() for n in named.group(1).split(",")] if named else []
    if len(got) != len(expected):
        more = "one more axis" if len(got) == len(expected) + 1 else \
            "one axis fewer" if len(got) + 1 == len(expected) else \
            f"{len(got)} axes instead of {len(expected)}"
        return (f"{more}. A reduction without keepdim=True, or indexing with a number, drops "
                f"an axis; broadcasting two tensors whose axes do not line up adds one")
    names = names if len(names) == len(expected) else [f"axis {i}" for i in range(len(got))]
    wrong = [i for i, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e]
    words = ", ".join(f"{names[i]} is {got[i]} instead of {expected[i]}" for i in wrong)
    swapped = (len(wrong) == 2 and got[wrong[0]] == expected[wrong[1]]
               and got[wrong[1]] == expected[wrong[0]])
    return words + (f" ({names[wrong[0]]} and {names[wrong[1]]} swapped)" if swapped else "")


def _dtype_hint(expected: torch.dtype) -> str:
    if expected == torch.bool:
        return "a mask is bool (True = may attend); build it with comparisons or dtype=torch.bool"
    return ("follow the dtype of the float inputs, or torch's default float32 when there are "
            "none (do not hard-code a dtype)")


def matches(got: Tensor, expected: Tensor) -> bool:
    """True when ``got`` equals ``expected`` within the tolerance policy."""
    if got.shape != expected.shape or got.dtype != expected.dtype \
            or got.device.type != expected.device.type:
        return False
    if expected.is_meta:  # no values: shape, dtype and device are all there is
        return True
    if expected.dtype == torch.bool or not expected.is_floating_point():
        return torch.equal(got, expected)
    rtol, atol = TOLERANCES.get(expected.dtype, DEFAULT_TOLERANCE)
    return torch.allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)


def _difference(got: Tensor, expected: Tensor, causes: bool = True) -> str:
    if not expected.is_floating_point():
        wrong = (got != expected).nonzero()
        return f"{len(wrong)} entries differ, the first at index {tuple(wrong[0].tolist())}"
    if got.isnan().any() and not expected.isnan().any():
        where = tuple(got.isnan().nonzero()[0].tolist())
        cause = f" {_nan_cause(got, expected)}" if causes else ""
        return (f"it contains NaN (first at index {where}) where the expected output has "
                f"none.{cause}")
    factor = _constant_factor(got, expected)
    if factor is not None:
        return (f"every value is {factor:.4g} times the expected one: a constant factor too "
                f"many or too few (a scale?)")
    error = torch.where(got == expected, 0.0, (got - expected).abs()).nan_to_num(nan=float("inf"))
    # numpy's unravel_index: torch's imports sympy on first use (a second before the message)
    index = tuple(int(i) for i in np.unravel_index(int(error.argmax()), error.shape))
    return (f"largest difference {error.max().item():.3g} at index {index} "
            f"(got {got[index].item():.4g}, expected {expected[index].item():.4g})")


def _nan_cause(got: Tensor, expected: Tensor) -> str:
    """Where the NaN come from, in words, when their place says it."""
    if expected.ndim >= 1 and expected.shape[-1] > 0:
        empty = (expected == 0).all(dim=-1)  # rows where every key is hidden
        if empty.any() and not got[~empty].isnan().any():
            return ("They sit in the rows where every key is hidden: softmax over a row of -inf "
                    "is 0/0. Such rows get weights 0 and output 0.")
    if got.isinf().any():
        return "It also has inf: exp() of a large number overflows, and inf / inf is NaN."
    return ("NaN comes from inf - inf or 0 / 0: exp() of large scores overflows (subtract the "
            "maximum first), exp() of scores far below 0 underflows to 0 for a whole row (a "
            "running maximum that starts at 0), or every score of a row is -inf.")


def _constant_factor(got: Tensor, expected: Tensor) -> float | None:
    """r when got = r * expected for one r != 1 (within the tolerance), else None."""
    finite = expected.isfinite() & got.isfinite() & (expected.abs() > 1e-6)
    if finite.sum() < 2 or not (got.isfinite() == expected.isfinite()).all():
        return None
    ratio = got[finite] / expected[finite]
    r = ratio.median()
    if not torch.isfinite(r) or abs(r.item() - 1.0) < 1e-3 or r.item() == 0.0:
        return None
    return r.item() if matches(got, expected * r) else None


def _gradient_verdict(exercise: Exercise, problem: str, where: str, got: dict,
                      expected: dict) -> Verdict:
    message = f"{exercise.name}: {problem}\n  tested: {where}"
    mistake = exercise.nan_gradient
    nan_where_finite = any(g is not None and e is not None and g.isnan().any()
                           and not e.isnan().any() for g, e in
                           ((got.get(name), e) for name, e in expected.items()))
    if mistake is None or not nan_where_finite:
        return Verdict(False, message)
    return Verdict(False, f"{message}\n  This is a known mistake: \"{mistake.name}\".\n"
                          f"  Hint: {mistake.hint}", mistake=mistake.name)


def _gradient_problem(got: dict, expected: dict) -> str | None:
    for name, e in expected.items():
        g = got.get(name)
        if e is None:
            continue
        if g is None:
            return (f"no gradient reaches `{name}`: the output is cut off from it. Avoid "
                    f".detach(), .item(), .numpy(), torch.no_grad() and rebuilding tensors "
                    f"from values (torch.tensor(...)).")
        if not matches(g, e):
            return (f"the gradient with respect to `{name}` is wrong: "
                    f"{_difference(g, e, causes=False)}")
    return None


# ---------------------------------------------------------------- diagnosis

def diagnose(exercise: Exercise, case: Case, got: tuple, expected: tuple,
             others: Sequence[tuple[Case, Observation]] = (),
             right: Sequence[tuple[Case, Observation]] = ()) -> list[Mistake] | None:
    """The catalogued mistake (or pair of mistakes) that explains ``got``, if any.

    Single mistakes are preferred to pairs; a mistake that would have spoiled a case the
    student got ``right`` is never named; among several that explain ``got``, the one that also
    explains the student's outputs on most ``others`` wins.
    """
    for mistake in exercise.mistakes:
        if mistake.sign is not None and _shows_sign(mistake, got, expected):
            return [mistake]
    if exercise.variant is None:
        return None
    variants = [m for m in exercise.mistakes if m.knobs]
    singles = [[m] for m in variants]
    pairs = [[a, b] for a, b in itertools.combinations(variants, 2)
             if not a.knobs.keys() & b.knobs.keys()]
    outputs: dict = {}  # (case, mistakes) -> the variant's outputs: ``right`` and ``others``
    # share cases, and the variants are the course's own, deterministic: each is run once

    def explains(combination: list[Mistake], on: Case, seen: tuple) -> bool:
        key = (id(on), *map(id, combination))
        if key not in outputs:
            outputs[key] = _variant_outputs(exercise, on, _knobs(combination))
        return _same_outputs(outputs[key], seen)

    for combinations in (singles, pairs):
        found = [c for c in combinations if explains(c, case, got)
                 and all(explains(c, other, seen.outputs) for other, seen in right)]
        if found:
            return max(found, key=lambda c: sum(explains(c, other, seen.outputs)
                                                for other, seen in others))
    return None


def _knobs(combination: list[Mistake]) -> dict:
    return {k: v for mistake in combination for k, v in mistake.knobs.items()}


def _shows_sign(mistake: Mistake, got: tuple, expected: tuple) -> bool:
    try:
        return len(got) == len(expected) and bool(mistake.sign(got, expected))
    except Exception:  # a sign that does not apply to these outputs
        return False


def _variant_outputs(exercise: Exercise, case: Case, knobs: dict) -> tuple | None:
    """The outputs of the variant with ``knobs`` on ``case``; None if it cannot even run."""
    try:
        with case.defaults():
            return as_tuple(exercise.variant(*clone(case.args), **case.kwargs, **knobs))
    except Exception:  # this variant cannot run on this case
        return None


def _same_outputs(wrong: tuple | None, got: tuple) -> bool:
    return wrong is not None and len(wrong) == len(got) and all(
        isinstance(g, Tensor) and matches(g, detach(w)) for g, w in zip(got, wrong, strict=True))


def _explain(exercise: Exercise, case: Case, observation: Observation, expected: Observation,
             problem: str, others: Sequence[tuple[Case, Observation]],
             right: Sequence[tuple[Case, Observation]] = ()) -> Verdict:
    message = f"{exercise.name}: {problem}\n  tested: {_describe(exercise, case)}"
    found = diagnose(exercise, case, observation.outputs, expected.outputs, others, right)
    if not found:
        return Verdict(False, message)
    names = " + ".join(f'"{m.name}"' for m in found)
    hints = "\n".join(f"  Hint: {m.hint}" for m in found)
    return Verdict(False, f"{message}\n  This is a known mistake: {names}.\n{hints}",
                   mistake=" + ".join(m.name for m in found))


# ---------------------------------------------------------------- running a whole check

def run_check(exercise: Exercise, student: Callable | Harnessed | Target, cases: list[Case],
              reference: Callable | None = None,
              reference_parameters: Callable[[], dict] | None = None, *,
              quiet: bool = False, earlier: int = 0) -> None:
    """Judge ``student`` on every case; print one line on success, raise AssertionError else.

    A check that runs in several parts (another object of the student's in each) makes every
    part but the last ``quiet`` and counts their cases in the last one's line (``earlier``).

    Under the grader a session observes in the student's process and judges here (see
    ``grader/grading/verdicts.py``): ``student`` is then a ``Target`` or ``Harnessed`` of
    targets, so a check describes everything of the student's (a module, a model) as
    ``Harnessed``, never builds it itself.
    """
    session = SESSION.get()
    if session is not None:
        session.run(exercise, student, cases, reference, reference_parameters)
        return
    borrowed = _course_object(student)
    if borrowed and not os.environ.get("NBGRADER_EXECUTION"):  # graded: refused as a shortcut
        if not quiet:
            print(REFERENCE_IN_USE.format(name=exercise.name, reference=borrowed))
        return
    built = student.build() if isinstance(student, Harnessed) else student
    parameters = getattr(built, "probe_parameters", None)
    seen = [observe(exercise.inputs, exercise.forbidden, built, case, parameters)
            for case in cases]
    judge_all(exercise, cases, seen, reference, reference_parameters)
    if not quiet:
        passed = earlier + len(cases)
        print(f"ok: {exercise.name} passed {passed} check{'s' * (passed != 1)}")


REFERENCE_IN_USE = (
    "{name}: this is the course's reference ({reference}), not your code. That is fine for "
    "going on with the lesson; the grade needs your own {name}, so come back to it: run its "
    "cell with your code again, then this check.")


def _course_object(student) -> str | None:
    """The qualified name of the course's own function or class given as the student's (the
    "Stuck?" path: a reference imported under the exercise's name), else None."""
    obj = student.args[0] if isinstance(student, Harnessed) and student.args else student
    module = getattr(obj, "__module__", None) or ""
    if (inspect.isfunction(obj) or inspect.isclass(obj)) and module.startswith(
            "attention_course.") and not module.startswith(__package__):
        return f"{module}.{obj.__qualname__}"
    return None


def judge_all(exercise: Exercise, cases: list[Case], seen: list[Observation],
              reference: Callable | None = None,
              reference_parameters: Callable[[], dict] | None = None) -> None:
    """Raise AssertionError with the first failing case's verdict, if any."""
    reference = reference or exercise.reference
    expected = [None if exercise.assess else
                observe(exercise.inputs, Forbidden(), reference, case, reference_parameters)
                for case in cases]
    answered = [(case, o) for case, o in zip(cases, seen, strict=True) if o.outputs is not None]
    right = [(case, o) for case, o, e in zip(cases, seen, expected, strict=True)
             if e is not None and o.outputs is not None and e.outputs is not None
             and _output_problem(exercise, o.outputs, e.outputs) is None]
    for case, observation, reference_seen in zip(cases, seen, expected, strict=True):
        verdict = judge(exercise, case, observation, reference_seen,
                        [(c, o) for c, o in answered if c is not case],
                        [(c, o) for c, o in right if c is not case])
        if not verdict.ok:
            raise CheckFailed(verdict.message, verdict.mistake)


class CheckFailed(AssertionError):
    """A check's failure; ``mistake`` names the catalogued mistake it recognised, if any."""

    def __init__(self, message: str, mistake: str | None = None):
        super().__init__(message)
        self.mistake = mistake

    def _render_traceback_(self) -> list[str]:
        """What IPython shows (JupyterLab, Colab, nbval): the line of the student's cell that
        ran the check, then the check's message; none of the checker's own frames."""
        outside = [frame for frame in traceback.extract_tb(self.__traceback__)
                   if not frame.filename.startswith(CHECKS_FOLDER)]
        cell = [f"----> {outside[-1].lineno} {outside[-1].line}"] if outside else []
        return [*cell, f"{type(self).__name__}: {self}"]


# The grader's session, when one is active in this thread (see ``grader/grading/verdicts.py``).
SESSION: ContextVar = ContextVar("attention_course_check_session", default=None)


# ---------------------------------------------------------------- small helpers

def _describe(exercise: Exercise, case: Case) -> str:
    named = list(zip(exercise.inputs, case.args, strict=False)) + list(case.kwargs.items())
    arguments = ", ".join(f"{name}={_show(value)}" for name, value in named)
    return f"{case.description}\n  called with: {arguments}"


def _show(x) -> str:
    if isinstance(x, Tensor):
        dtype = str(x.dtype).removeprefix("torch.")
        return f"<{dtype} {tuple(x.shape)}>" if x.numel() > 6 else f"tensor({x.tolist()})"
    return repr(x)


def randn(*shape: int, generator: torch.Generator, dtype=torch.float32) -> Tensor:
    """Seeded standard-normal test input."""
    return torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)
