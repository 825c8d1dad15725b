"""A Dask scheduler started without the course on its path (plain `dask scheduler` from
another folder, as a scheduler set up before the course was): `grade --scheduler` refuses in
one line that says what the scheduler needs, before any worker is waited for, and writes
nothing. (With the checkout on its path, as docs/instructors/scaling.md says to start it,
tests/pipeline/test_cluster.py grades on it.)"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader import cli
from grader.workspace import Workspace

pytestmark = pytest.mark.slow
DASK = str(Path(sys.executable).with_name("dask"))


@pytest.fixture
def bare_scheduler(tmp_path) -> str:
    """A scheduler whose path holds nothing of the course's; its address."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    scheduler_file = tmp_path / "scheduler.json"
    with (tmp_path / "scheduler.log").open("w") as log:
        process = subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0",
                                    "--no-dashboard", "--scheduler-file", str(scheduler_file)],
                                   cwd=tmp_path, env=environment, stdout=log,
                                   stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            if scheduler_file.is_file() and scheduler_file.stat().st_size:
                break
            time.sleep(0.1)
        yield json.loads(scheduler_file.read_text())["address"]
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_scheduler_that_cannot_import_the_grader_is_refused_in_one_line(
        bare_scheduler, tmp_path, capsys):
    workspace = Workspace(tmp_path / "course")
    submission = workspace.submitted / "s1" / "02_scaled_dot_product"
    submission.mkdir(parents=True)
    (submission / "02_scaled_dot_product.ipynb").write_text("{}")
    with pytest.raises(SystemExit) as refused:
        cli.main(["--workspace", str(workspace.root), "grade", "--no-sandbox",
                  "--scheduler", bare_scheduler])
    message = str(refused.value.code)
    assert "cannot import the grader" in message and "PYTHONPATH" in message
    assert "\n" not in message.strip()
    assert not (workspace.root / "results").exists()
