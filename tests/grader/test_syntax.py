"""The grader's threads parse student code side by side without tripping CPython 3.11's
per-interpreter syntax-tree depth counter (a correct submission was once recorded as crashed
with "SystemError: AST constructor recursion depth mismatch")."""

import ast
import sys
import threading

import pytest

from grader.syntax import parse

# Nested enough that ast.parse counts deep, long enough to be interrupted in the middle.
SOURCE = "x = " + "(" * 30 + "1" + ")" * 30 + "\n" + "\n".join(
    f"def f{i}(a, b):\n    return [a + b * {i} for _ in range(3)]" for i in range(200))


class Garbage:
    """A cycle with a finalizer: the garbage collection that frees it, which may run in the
    middle of a parse, runs Python code, and another thread can take over there."""

    def __init__(self):
        self.me = self

    def __del__(self):
        sum(range(200))


def parse_side_by_side(parse_source, threads: int = 3, rounds: int = 100) -> list[str]:
    """The SystemErrors of ``threads`` threads that each leave garbage and parse, ``rounds``
    times, switching threads as often as the interpreter can."""
    failures = []

    def work():
        for _ in range(rounds):
            for _ in range(200):
                Garbage()
            try:
                parse_source(SOURCE)
            except SystemError as err:
                failures.append(str(err))
                return

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        running = [threading.Thread(target=work) for _ in range(threads)]
        for thread in running:
            thread.start()
        for thread in running:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    return failures


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the race is CPython 3.11's")
def test_plain_ast_parse_in_threads_can_fail_this_way():
    """What the test below guards against happens here: without it, this test is meaningless."""
    failures = parse_side_by_side(ast.parse)
    assert failures and "recursion depth mismatch" in failures[0]


def test_the_graders_parse_never_fails_in_threads():
    assert parse_side_by_side(parse) == []
