"""Running a check on a test's answer and reading what it says: the check of an exercise, the
message a failing answer gets, the mistakes that message names, and the lines of a function
that a message must never show."""

import ast
import inspect
import io
import re
import textwrap
from contextlib import redirect_stdout

import pytest

from attention_course import checks
from attention_course.lessons import LESSONS

# every practice the student writes; lesson 05's trained model is tested in checks/test_lesson05
CHECK_NAMES = tuple(p.name for lesson in LESSONS for p in lesson.practice if p.written)


def check_of(name: str):
    """The check function for an exercise name, e.g. "softmax" -> check_softmax."""
    return getattr(checks, f"check_{name}")


def failure(check, student, seed: int = 0) -> str:
    """The message of the AssertionError ``check`` raises for ``student``; no ``ok:`` printed."""
    printed = io.StringIO()
    with redirect_stdout(printed), pytest.raises(AssertionError) as info:
        check(student, seed=seed)
    assert "ok:" not in printed.getvalue()
    return str(info.value)


def named_mistakes(message: str) -> list[str]:
    """The catalogued mistake names a failure message gives, in order ([] if none)."""
    found = re.search(r'This is a known mistake: (.*)\.\n', message)
    return re.findall(r'"([^"]+)"', found.group(1)) if found else []


def code_lines(function) -> list[str]:
    """The lines of ``function``'s body after its docstring, without comments."""
    source = textwrap.dedent(inspect.getsource(function))
    body = ast.parse(source).body[0].body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    lines = source.splitlines()[body[0].lineno - 1:]
    return [line.split("#")[0].strip() for line in lines]
