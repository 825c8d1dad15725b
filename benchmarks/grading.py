"""Grading throughput: `python -m grader grade` (sandbox on, and off) against stock sequential
`nbgrader autograde`.

All three grade the same honest submissions of the demo class (correct, mistaken, partly
answered and blank notebooks: the ones stock nbgrader grades without help), each with its own
workspace and gradebook, in alternating runs. Reports wall time and submissions per minute of
each, the ratio to stock, what the sandbox costs, and whether every submission got identical
points from all three.
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the grader, the tests' helpers

from grader.course import lesson_names  # noqa: E402
from grader.demo import student_id, submission_file  # noqa: E402
from grader.workspace import Workspace  # noqa: E402
from helpers import gradebook  # noqa: E402

HONEST = ("correct", "mistake", "partly answered", "blank")


def build_class(folder: Path, students: list[int], lessons: list[str]) -> int:
    """Write the chosen demo students' honest submissions; return how many there are."""
    count = 0
    for number, lesson in enumerate(lesson_names(), start=1):
        if lesson not in lessons:
            continue
        for index in students:
            name, data, description = submission_file(index, lesson, number)
            if description.split(":")[0] in HONEST:
                target = folder / "submitted" / student_id(index) / lesson / f"{lesson}.ipynb"
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                count += 1
    return count


def environment(workspace: Path) -> dict:
    return os.environ | {"ATTENTION_COURSE_WORKSPACE": str(workspace),
                         "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def ours(workspace: Path, lessons: list[str], sandboxed: bool = True) -> float:
    # --again: every round grades every submission (grade skips what the gradebook holds)
    command = [sys.executable, "-m", "grader", "--workspace", str(workspace), "grade", "--again"]
    command += [arg for lesson in lessons for arg in ("--lesson", lesson)]
    command += [] if sandboxed else ["--no-sandbox"]
    return _timed(command, ROOT, environment(workspace))


def stock(workspace: Path, lessons: list[str]) -> float:
    """nbgrader autograde, one lesson after another, as an instructor runs it."""
    seconds = 0.0
    for lesson in lessons:
        seconds += _timed([sys.executable, "-m", "nbgrader", "autograde", lesson, "--force"],
                          ROOT / "grader", environment(workspace))
    return seconds


def _timed(command: list[str], cwd: Path, env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


GRADERS = {"stock": stock, "ours": ours,  # ours: sandboxed, as `make grade` runs it
           "ours unsandboxed": lambda workspace, lessons: ours(workspace, lessons, False)}


def measure(students: list[int], lessons: list[str] | None = None, rounds: int = 1) -> dict:
    lessons = lessons or lesson_names()
    with tempfile.TemporaryDirectory() as scratch:
        workspaces = {name: Path(scratch) / name.replace(" ", "-") for name in GRADERS}
        count = build_class(workspaces["ours"], students, lessons)
        gradebook.ensure_lessons(Workspace(workspaces["ours"]), lessons)
        for name, workspace in workspaces.items():  # not timed: the same one-off setup for all
            if name != "ours":
                shutil.copytree(workspaces["ours"], workspace)
        times = {name: [] for name in GRADERS}
        for _ in range(rounds):  # alternating, so all see the same machine
            for name, grade in GRADERS.items():
                times[name].append(grade(workspaces[name], lessons))
        points = {name: gradebook.scores(Workspace(w)) for name, w in workspaces.items()}
    different = sorted(f"{name}: {student}/{lesson}" for name in points
                       for (student, lesson), got in points["stock"].items()
                       if points[name].get((student, lesson)) != got)
    median = {name: statistics.median(t) for name, t in times.items()}
    return {"submissions": count, "students": len(students), "lessons": lessons,
            "rounds": rounds, "seconds": times,
            "per_minute": {name: 60 * count / t for name, t in median.items()},
            "ratio": median["stock"] / median["ours"],
            "sandbox_cost": median["ours"] / median["ours unsandboxed"],
            "identical_points": not different, "different": different, "sandbox": True,
            "workers": os.cpu_count()}
