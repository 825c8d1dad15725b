"""After a kernel restart, a check cell's NameError says what to run (in a real kernel)."""

import subprocess
from pathlib import Path

import nbformat
import pytest

from attention_course import restart
from helpers.notebooks import ROOT, execute


@pytest.mark.slow
def test_a_check_cell_run_before_its_exercise_says_to_run_the_cells_above():
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from attention_course.checks import check_softmax\n\ncheck_softmax(softmax)")])
    cell = execute(notebook, ROOT, allow_errors=True).cells[0]
    error = next(o for o in cell.outputs if o.output_type == "error")
    printed = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    assert (error.ename, error.evalue) == ("NameError", "name 'softmax' is not defined")
    assert printed == restart.HINT.format(name="softmax") + "\n"


@pytest.mark.slow
def test_make_labs_kernel_explains_a_demo_cell_run_first_after_a_restart(tmp_path, monkeypatch):
    """Nothing of the course imported yet: the kernel spec `make lab` puts first on JUPYTER_PATH
    loads the hint when the kernel starts."""
    spec = make_target(".venv/student-jupyter-data/kernels/python3/kernel.json")
    monkeypatch.setenv("JUPYTER_PATH", str(spec.parents[2]))  # as make lab sets it
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("weights.sum(dim=-1)")])
    cell = execute(notebook, tmp_path, allow_errors=True).cells[0]
    printed = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    assert printed == restart.HINT.format(name="weights") + "\n"


def make_target(target: str) -> Path:
    """Build ``target`` (a path under the repository) with make; return its path."""
    subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), target], check=True,
                   capture_output=True)
    return ROOT / target
