"""How long a student waits for a check: median seconds per call, passing and failing.

A passing call runs every case against the reference; a failing call also runs the diagnosis
(every catalogued variant, then pairs). Correct answers come from the test suite's collection.

Run: .venv/bin/python benchmarks/checks.py [--repeats N]
"""

import argparse
import contextlib
import io
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' helpers
from helpers.answers import CORRECT  # noqa: E402
from helpers.checking import check_of  # noqa: E402


def seconds(call, repeats: int) -> float:
    """Median wall time of ``call`` over ``repeats`` runs, output silenced."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        with contextlib.suppress(AssertionError), contextlib.redirect_stdout(io.StringIO()):
            call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def failing_student(name: str):
    """A wrong answer that the check can only name after trying the catalogue: the last
    mistake of the exercise, so every earlier variant is tried first."""
    from attention_course.checks import MODULES
    from attention_course.checks.framework import Exercise

    exercises = {e.name: e for m in MODULES for e in vars(m).values() if isinstance(e, Exercise)}
    exercise = exercises.get(name)
    if exercise is None or not exercise.variant:
        return None
    knobs = [m.knobs for m in exercise.mistakes if m.knobs]
    return partial(exercise.variant, **knobs[-1]) if knobs else None


def measure(repeats: int = 7) -> list[dict]:
    """Median seconds of every check, with a correct answer and (where one exists) a wrong one."""
    rows = []
    for name, implementations in CORRECT.items():
        check, wrong = check_of(name), failing_student(name)
        rows.append({
            "check": name,
            "pass_s": seconds(partial(check, implementations[0]), repeats),
            "fail_s": seconds(partial(check, wrong), repeats) if wrong else None,
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(2)
    print(f"{'check':34} {'pass (s)':>9} {'fail (s)':>9}")
    for row in measure(args.repeats):
        failing = "-" if row["fail_s"] is None else f"{row['fail_s']:.3f}"
        print(f"{row['check']:34} {row['pass_s']:9.3f} {failing:>9}")


if __name__ == "__main__":
    main()
