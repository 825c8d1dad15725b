"""Grading on a Dask cluster against grading here, on the same machine.

`python -m grader grade` three ways on the same honest submissions of the demo class, each with
its own workspace and gradebook, in alternating rounds (each round grades everything again):

- here: threads over warm runners, one per core (`make grade`);
- cluster: `--scheduler`, through a Dask cluster on loopback (`dask scheduler` and one
  single-threaded `dask worker` per core, so the work is the same and the ratio to "here" is
  the cluster's overhead);
- cluster + PostgreSQL: the same, into a gradebook on a throwaway PostgreSQL server.

Every run is a fresh grader process, as an instructor runs it. The cluster's workers stay up
between rounds, as a course's cluster does, so from the second round on their runners are warm
(the first round's time is reported on its own). Reports submissions per minute (medians), the
ratio, and whether every submission got identical points all three ways.
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

from grading import build_class, environment  # noqa: E402

from grader.course import lesson_names  # noqa: E402
from grader.workspace import Workspace  # noqa: E402
from helpers import gradebook  # noqa: E402
from helpers.dask_cluster import local_cluster  # noqa: E402
from helpers.postgres import throwaway_server  # noqa: E402

MODES = ("here", "cluster", "cluster + PostgreSQL")


def grade(workspace: Path, db_url: str, scheduler: str | None) -> float:
    """Seconds `grade --again` takes, here or on the cluster at ``scheduler``."""
    command = [sys.executable, "-m", "grader", "--workspace", str(workspace), "grade", "--again"]
    command += ["--scheduler", scheduler] if scheduler else []
    env = environment(workspace) | {"ATTENTION_COURSE_GRADEBOOK": db_url}
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def measure(students: list[int], lessons: list[str] | None = None, rounds: int = 3,
            workers: int | None = None) -> dict:
    """``lessons``: by default 01-03, which grade in seconds; ``workers``: by default one per
    core."""
    lessons = lessons or lesson_names()[:3]
    workers = workers or os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as scratch, \
            local_cluster(Path(scratch) / "dask", workers) as cluster, throwaway_server() as pg:
        base = Path(scratch) / "class"
        count = build_class(base, students, lessons)
        gradebook.ensure_lessons(Workspace(base), lessons)  # not timed: the same for all
        workspaces = {mode: Path(scratch) / f"workspace-{n}" for n, mode in enumerate(MODES)}
        urls = {mode: Workspace(workspaces[mode]).db_url for mode in MODES}
        urls["cluster + PostgreSQL"] = pg.create_database()
        for workspace in workspaces.values():
            shutil.copytree(base, workspace)
        gradebook.ensure_lessons(urls["cluster + PostgreSQL"], lessons)
        cluster.worker_pids()  # every worker up before the clock starts
        times = {mode: [] for mode in MODES}
        for _ in range(rounds):
            for mode in MODES:
                scheduler = None if mode == "here" else cluster.address
                times[mode].append(grade(workspaces[mode], urls[mode], scheduler))
        points = {mode: gradebook.scores(urls[mode]) for mode in MODES}
    median = {mode: statistics.median(t[1:] or t) for mode, t in times.items()}
    return {"submissions": count, "students": len(students), "lessons": lessons,
            "rounds": rounds, "workers": workers, "seconds": times,
            "first_cluster_round_per_minute": 60 * count / times["cluster"][0],
            "per_minute": {mode: 60 * count / t for mode, t in median.items()},
            "cluster_overhead": median["cluster"] / median["here"],
            "postgres_overhead": median["cluster + PostgreSQL"] / median["cluster"],
            "identical_points": all(points[mode] == points["here"] for mode in MODES),
            "median_of": "rounds after the first" if rounds > 1 else "the one round"}


def report(results: dict) -> str:
    rate = results["per_minute"]
    return (f"cluster: {results['submissions']} submissions, {results['workers']} workers: "
            f"{rate['here']:.0f} per minute here, {rate['cluster']:.0f} through a local Dask "
            f"cluster (time x{results['cluster_overhead']:.2f}; first round "
            f"{results['first_cluster_round_per_minute']:.0f}), "
            f"{rate['cluster + PostgreSQL']:.0f} into PostgreSQL "
            f"(x{results['postgres_overhead']:.2f}); identical points: "
            f"{results['identical_points']}")

