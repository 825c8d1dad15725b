"""Graded cells are read with ast: every check call is understood, and anything the grader
cannot read stops the release instead of being skipped."""

import shutil

import nbformat
import pytest

from grader import course, release
from grader.course import CheckCall, GradedCellError, check_calls

L02 = "02_scaled_dot_product"


@pytest.mark.parametrize("source", [
    "check_softmax(softmax, seed=1)  # unseen",
    "from attention_course.checks import check_softmax\n\n# hidden\ncheck_softmax(softmax,\n"
    "              seed=1)",
])
def test_check_calls_are_read_whatever_their_layout(source):
    assert check_calls(source, "cell") == (CheckCall("check_softmax", ("softmax",), 1),)


def test_a_call_without_a_seed_has_the_default_seed():
    assert check_calls("check_copy_accuracy(model)", "cell") == (
        CheckCall("check_copy_accuracy", ("model",), 0),)


@pytest.mark.parametrize(("source", "said"), [
    ("check_softmax(softmax)\nx = 1", "line 2"),
    ("check_softmax(softmax, seed=s)", "cannot read `check_softmax(softmax, seed=s)`"),
    ("check_softmax(softmax, seed=1.0)", "cannot read"),
    ("check_softmax(lambda x: x)", "cannot read"),
    ("check_nothing(softmax)", "cannot read"),
    ("from attention_course.checks import check_nothing\ncheck_softmax(softmax)", "line 1"),
    ("import attention_course\ncheck_softmax(softmax)", "line 1"),
    ("for seed in range(3):\n    check_softmax(softmax, seed=seed)", "cannot read"),
    ("# nothing but a comment", "calls no check"),
    ("check_softmax(softmax", "not valid Python"),
])
def test_anything_else_is_an_error_that_says_where(source, said):
    with pytest.raises(GradedCellError, match="cell") as error:
        check_calls(source, "cell")
    assert said in str(error.value)


@pytest.fixture
def solutions(tmp_path, monkeypatch):
    """A copy of lesson 02's source notebook that the grader and release read instead."""
    shutil.copytree(course.SOLUTIONS / L02, tmp_path / L02)
    monkeypatch.setattr(course, "SOLUTIONS", tmp_path)
    return tmp_path / L02 / f"{L02}.ipynb"


def edit_graded_cell(path, grade_id: str, source: str) -> None:
    notebook = nbformat.read(path, as_version=4)
    cell = next(c for c in notebook.cells if course.nbgrader_metadata(c).get("grade_id")
                == grade_id and course.nbgrader_metadata(c).get("grade"))
    cell.source = source
    nbformat.write(notebook, path)


def test_release_refuses_a_cell_the_grader_cannot_read(solutions, tmp_path):
    edit_graded_cell(solutions, "check_softmax", "check_softmax(softmax)\nassert softmax(1)")
    out = tmp_path / "released"
    with pytest.raises(SystemExit, match="not released: 02_scaled_dot_product, graded cell "
                                         "'check_softmax', line 2"):
        release.release([L02], out)
    assert not out.exists()


def test_a_notebook_that_grades_other_checks_than_the_registry_says_is_refused(solutions):
    notebook = nbformat.read(solutions, as_version=4)
    graded = next(c for c in notebook.cells if course.nbgrader_metadata(c).get("grade"))
    graded.metadata["nbgrader"]["grade_id"] = "check_something_else"
    nbformat.write(notebook, solutions)
    with pytest.raises(GradedCellError, match="the registry"):
        course.graded_cells(L02)
