"""After a kernel restart, a check cell's NameError says what to run (in a real kernel)."""

import nbformat
import pytest

from attention_course.checks import restart
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
