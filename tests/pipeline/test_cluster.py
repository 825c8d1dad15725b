"""Grading on a Dask cluster: a scheduler and two worker processes on loopback, started as an
instructor starts them (`dask scheduler`, `dask worker`), grade part of the demo class through
`python -m grader grade --scheduler`. The points are those of grading here; a worker killed
(SIGKILL) in the middle of the batch costs nothing: its submission is graded on the other
worker, and every submission is in the gradebook exactly once."""

import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from grader import cli
from grader.course import lesson_names
from grader.demo import KERNEL_DEATH, build_demo_class, student_notebook
from grader.workspace import Workspace
from helpers import gradebook
from helpers.dask_cluster import Cluster, local_cluster

pytestmark = pytest.mark.slow
LESSONS = lesson_names()[:3]  # the fast ones
STUDENTS = ("s01", "s02", "s03")  # a malformed, an empty and a renamed file among them
DYING = "dying"  # kills its own kernel: the student's crash, not a worker's death


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    """Two workers, still starting while the class is collected and graded here."""
    with local_cluster(tmp_path_factory.mktemp("dask"), workers=2) as running:
        yield running


def demo_zips(workspace: Workspace) -> list[Path]:
    return build_demo_class(workspace, 9)[:len(LESSONS)]


def students_and_a_dying_one(workspace: Workspace) -> None:
    """STUDENTS only, and a student whose code kills its kernel; the lessons already in the
    gradebook."""
    for folder in workspace.submitted.iterdir():
        if folder.name not in STUDENTS:
            shutil.rmtree(folder)
    dying = workspace.submitted / DYING / LESSONS[0] / f"{LESSONS[0]}.ipynb"
    dying.parent.mkdir(parents=True)
    dying.write_text(nbformat.writes(student_notebook(LESSONS[0], {}, KERNEL_DEATH)))
    gradebook.ensure_lessons(workspace, LESSONS)  # once, not once per copy


@pytest.fixture(scope="module")
def collected(graded_class) -> Workspace:
    """The demo class's first students in lessons 01-03, collected from its LMS zips, and a
    student whose code kills its kernel; the lessons already in the gradebook."""
    return graded_class("collected", downloads=demo_zips, prepare=students_and_a_dying_one,
                        grade=None)


def copy(workspace: Workspace, to: Path) -> Workspace:
    shutil.copytree(workspace.root, to / "workspace")
    return Workspace(to / "workspace")


@pytest.fixture(scope="module")
def graded_here(graded_class) -> Workspace:
    """The same class, built anew and graded here."""
    return graded_class("here", downloads=demo_zips, prepare=students_and_a_dying_one)


def grade_on(scheduler: str, workspace: Workspace, capsys) -> str:
    """The instructor's command; what it printed."""
    assert cli.main(["--workspace", str(workspace.root), "grade", "--scheduler", scheduler]) == 0
    return capsys.readouterr().out


def outcomes(workspace: Workspace) -> dict:
    """(student, lesson) -> outcome, points per cell and flags, from results/."""
    return {(r.student, r.lesson): (r.outcome, {e.grade_id: e.points for e in r.exercises},
                                    r.flags)
            for r in gradebook.results(workspace)}


def times_recorded(workspace: Workspace, submissions) -> set[int]:
    """How many results each submission has in the gradebook's history."""
    return {len(gradebook.history(workspace, student, lesson)) for student, lesson in submissions}


def test_the_cluster_gives_the_points_of_grading_here(cluster, collected, graded_here,
                                                      tmp_path, capsys):  # cluster: starts first
    workspace = copy(collected, tmp_path)
    workers = cluster.worker_pids()
    output = grade_on(cluster.address, workspace, capsys)

    expected = outcomes(graded_here)
    assert len(expected) == len(STUDENTS) * len(LESSONS) + 1
    assert {outcome for outcome, _, _ in expected.values()} >= {"graded", "ungradable",
                                                               "crashed"}
    assert outcomes(workspace) == expected
    assert gradebook.scores(workspace) == gradebook.scores(graded_here)
    assert times_recorded(workspace, expected) == {1}
    kept = {p.relative_to(graded_here.results) for p in graded_here.results.glob("*/*.output.txt")}
    assert kept and kept == {p.relative_to(workspace.results)
                             for p in workspace.results.glob("*/*.output.txt")}
    # the kernel that died was a sandboxed child: no worker died with it
    assert cluster.worker_pids() == workers
    assert f"{len(expected)} submissions in" in output


def test_a_worker_killed_mid_batch_costs_nothing(cluster, collected, graded_here, tmp_path,
                                                 capsys):
    workspace = copy(collected, tmp_path)
    workers = cluster.worker_pids()
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=kill_a_busy_worker,
                              args=(cluster, workers, workspace, stop, killed))
    killer.start()
    try:
        grade_on(str(cluster.scheduler_file), workspace, capsys)  # its file, this time
    finally:
        stop.set()
        killer.join()
    assert killed and killed[0] in workers.values(), "no worker was busy mid-batch"
    expected = outcomes(graded_here)
    assert outcomes(workspace) == expected
    assert gradebook.scores(workspace) == gradebook.scores(graded_here)
    assert times_recorded(workspace, expected) == {1}


def kill_a_busy_worker(cluster: Cluster, workers: dict[str, int], workspace: Workspace,
                       stop: threading.Event, killed: list) -> None:
    """Once the first result is written, SIGKILL a worker process that is grading one."""
    with cluster.client() as client:
        while not stop.is_set():
            if any(workspace.results.glob("*/*.json")):
                busy = [address for address, keys in client.processing().items() if keys]
                if busy:
                    os.kill(workers[busy[0]], signal.SIGKILL)
                    killed.append(workers[busy[0]])
                    return
            time.sleep(0.05)


def test_an_unreachable_scheduler_grades_nothing_and_says_so_in_one_line(collected, tmp_path):
    import dask

    workspace = copy(collected, tmp_path)
    with socket.socket() as unused:  # a loopback port nothing listens on once it is closed
        unused.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{unused.getsockname()[1]}"
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}), \
            pytest.raises(SystemExit) as refused:
        cli.main(["--workspace", str(workspace.root), "grade", "--scheduler", address])
    message = str(refused.value.code)
    assert message.startswith("Not grading: cannot reach the Dask scheduler at " + address)
    assert "\n" not in message and message.endswith("Nothing was graded.")
    assert not list(workspace.results.glob("*/*.json")) and not gradebook.scores(workspace)
