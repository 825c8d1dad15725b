"""Catching shortcuts: a student's function must not call what it is meant to re-implement."""

import inspect
import sys
import types
import warnings
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

from . import harness


@dataclass(frozen=True)
class Forbidden:
    """What an exercise may not call: Python functions (by code object, or by qualified name
    where only the name travels: the grader sends names), and torch built-ins by a part of
    their name (``softmax`` catches ``torch.softmax``, ``F.softmax``, ``x.softmax``, and the
    private ``torch._safe_softmax`` and ``torch._masked_softmax`` too)."""

    functions: tuple[Callable, ...] = ()
    builtin_names: frozenset[str] = frozenset()
    function_names: frozenset[str] = frozenset()  # "module.Class.method"

    def forbids_builtin(self, name: object) -> bool:
        """Whether a torch built-in called ``name`` is forbidden (None for a nameless one)."""
        return isinstance(name, str) and any(part in name for part in self.builtin_names)

    @property
    def qualified_names(self) -> list[str]:
        """Every forbidden Python function by name: what the grader sends."""
        return sorted(self.function_names | {_qualname(fn) for fn in self.functions})


ENGINE = type(torch.autograd.variable.Variable._execution_engine)  # torch._C._EngineBase
# the harness's own call of the autograd engine, by which lesson 08's check runs the student's
# backward pass, made from its one caller: not the student's call (by code object, which a
# student cannot forge as a name or a file name can be)
ENGINE_CALL = harness._engine_backward.__code__
ENGINE_CALLER = next(code for code in harness.ForwardAndBackward.__call__.__code__.co_consts
                     if isinstance(code, types.CodeType) and code.co_name == "forward_and_backward")


def _the_harness_engine(frame) -> bool:
    return (frame is not None and frame.f_code is ENGINE_CALL and frame.f_back is not None
            and frame.f_back.f_code is ENGINE_CALLER)


def _is_torch_builtin(fn) -> bool:
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.Tensor | ENGINE):  # ENGINE: the autograd engine's methods
        return True
    module = getattr(fn, "__module__", None) or getattr(owner, "__name__", None) or ""
    return isinstance(module, str) and module.startswith("torch")


def _code_of(fn) -> types.CodeType | None:
    # unwrap decorators: a wrapper's code (torch.no_grad's, say) is shared by every function
    # it decorates, the student's own included; the wrapped function runs when the wrapper does
    fn = inspect.unwrap(getattr(fn, "__func__", fn))
    return getattr(fn, "__code__", None)


@contextmanager
def watch_calls(forbidden: Forbidden, called: list[str]):
    """Record in ``called`` every forbidden function called inside the ``with`` block."""
    codes = {code: _qualname(fn) for fn in forbidden.functions if (code := _code_of(fn))}
    if not codes and not forbidden.builtin_names and not forbidden.function_names:
        yield called
        return

    function_names = forbidden.function_names
    forbids_builtin = _remembered(forbidden)

    # called on every call and return of Python and C functions while the block runs: the
    # cheap tests first (a name is built only when names are forbidden, a built-in's name
    # looked up once)
    def profile(frame, event, arg):
        if event == "call":
            if frame.f_code in codes and not _the_harness_engine(frame):
                called.append(codes[frame.f_code])
            elif (function_names and _frame_name(frame) in function_names
                  and not _the_harness_engine(frame)):
                called.append(_frame_name(frame))
        elif (event == "c_call" and forbids_builtin(getattr(arg, "__name__", None))
              and _is_torch_builtin(arg) and not _the_harness_engine(frame)):
            called.append(f"torch's built-in {arg.__name__}")

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        with _TorchCalls(forbidden, called, forbids_builtin):
            yield called
    finally:
        _restore_profiler(previous)


class _TorchCalls(TorchFunctionMode):
    """Every torch function a forbidden built-in's name calls, however it is reached: the
    profile above sees no call that C code makes for Python (``map``, ``functools.partial``,
    ``operator.methodcaller``), this does."""

    def __init__(self, forbidden: Forbidden, called: list[str],
                 forbids_builtin: Callable[[object], bool] | None = None):
        super().__init__()
        self.forbidden, self.called = forbidden, called
        self.forbids_builtin = forbids_builtin or forbidden.forbids_builtin

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", None)
        if self.forbids_builtin(name):
            self.called.append(f"torch's built-in {name}")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = func(*args, **(kwargs or {}))
        for warning in caught:
            _warn_again(warning)
        return result


_REGISTRY: dict = {}  # what was warned again, so that "default" shows each warning once


def _warn_again(warning: warnings.WarningMessage) -> None:
    """A warning that torch raised while this mode ran ``func``, where it belongs: a warning of
    torch's C++ code names the Python line running at the time, which is this module's, not the
    student's line that called torch (``x.T`` on a batch, say)."""
    if warning.filename != __file__:
        warnings.warn_explicit(warning.message, warning.category, warning.filename,
                               warning.lineno, registry=_REGISTRY)
        return
    caller = sys._getframe(2)  # 0: here, 1: __torch_function__, 2: the code that called torch
    warnings.warn_explicit(warning.message, warning.category, caller.f_code.co_filename,
                           caller.f_lineno, module=caller.f_globals.get("__name__"),
                           registry=caller.f_globals.setdefault("__warningregistry__", {}))


def _remembered(forbidden: Forbidden) -> Callable[[object], bool]:
    """``forbidden.forbids_builtin``, each name's answer kept (it depends on the name alone)."""
    answers: dict[str, bool] = {}

    def forbids_builtin(name: object) -> bool:
        if type(name) is not str:  # None, or a str subclass (whose hash may be its own)
            return forbidden.forbids_builtin(name)
        answer = answers.get(name)
        if answer is None:
            answer = answers[name] = forbidden.forbids_builtin(name)
        return answer
    return forbids_builtin


def _restore_profiler(previous) -> None:
    """Put back what profiled before: a function, or cProfile's profiler (which
    ``sys.getprofile`` returns as an object, not a function: it is enabled again)."""
    if previous is not None and not callable(previous) and hasattr(previous, "enable"):
        previous.enable()
    else:
        sys.setprofile(previous)


def _frame_name(frame) -> str:
    return f"{frame.f_globals.get('__name__')}.{frame.f_code.co_qualname}"


def _qualname(fn) -> str:
    fn = getattr(fn, "__func__", fn)
    return f"{fn.__module__}.{fn.__qualname__}"


def forbid(functions: Iterable[Callable] = (), builtins: Iterable[str] = ()) -> Forbidden:
    """What an exercise may not call."""
    return Forbidden(tuple(functions), frozenset(builtins))
