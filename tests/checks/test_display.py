"""A failed check, as a student sees it in a real kernel: their cell's line and the check's
diagnosis first, none of the checker's own frames."""

import nbformat
import pytest

from helpers.notebooks import ROOT, execute

WRONG_SOFTMAX = """\
from attention_course.checks import check_softmax

def softmax(x, dim=-1):
    return x.exp() / x.exp().sum(dim=dim, keepdim=True)

check_softmax(softmax)"""


@pytest.mark.slow
def test_a_failed_check_shows_the_students_line_then_the_diagnosis():
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(WRONG_SOFTMAX)])
    cell = execute(notebook, ROOT, allow_errors=True).cells[0]
    error = next(o for o in cell.outputs if o.output_type == "error")
    shown = "\n".join(error.traceback).splitlines()
    assert shown[0] == "----> 6 check_softmax(softmax)"
    assert any("This is a known mistake" in line for line in shown[:8]), shown
    assert not any("attention_course" in line or "framework.py" in line for line in shown)
    assert error.ename == "CheckFailed" and "no max-subtraction" in error.evalue
