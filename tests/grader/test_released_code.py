"""Which cells of a submission are the student's own code: those that do not run as a released
cell runs. An editor that saves Windows line endings, strips trailing spaces, adds a final
newline or reflows a comment changes no code, and the released cells it touched (the Colab setup
cell, which reads ``sys.modules``) must not be read as the student's; a setup cell whose code
changed is the student's, and flagged."""

import nbformat
import pytest

from grader.course import read_lesson
from grader.demo import practice_names, student_notebook
from grader.grading.inspection import answer_tokens, as_run, inspect_submission
from helpers.notebooks import lessons

LESSON = "02_scaled_dot_product"
SETUP = 1  # the Colab setup cell of every released notebook


def correct(lesson: str = LESSON) -> nbformat.NotebookNode:
    """A correct notebook as a student's Jupyter saved it (read back from its JSON)."""
    node = student_notebook(lesson, dict.fromkeys(practice_names(lesson)))
    return nbformat.reads(nbformat.writes(node), as_version=4)


def edited(node: nbformat.NotebookNode, change) -> nbformat.NotebookNode:
    """``node`` with every code cell's source through ``change``, saved and read back."""
    node = nbformat.from_dict(node)
    for cell in node.cells:
        if cell.cell_type == "code":
            cell.source = change(cell.source)
    return nbformat.reads(nbformat.writes(node), as_version=4)


EDITORS = {
    "windows line endings": lambda source: source.replace("\n", "\r\n"),
    "old Mac line endings": lambda source: source.replace("\n", "\r"),
    "trailing spaces": lambda source: source.replace("\n", "  \n") + "\t",
    "a final newline": lambda source: source + "\n",
    "blank lines and a comment": lambda source: f"\n# my notes\n{source}\n\n",
}


@pytest.mark.parametrize("editor", EDITORS)
def test_an_editor_that_changes_no_code_changes_no_flag(editor):
    node = edited(correct(), EDITORS[editor])
    assert "\r" in node.cells[SETUP].source or editor != "windows line endings"
    lesson = read_lesson(LESSON)
    assert inspect_submission(node, lesson) == []
    assert answer_tokens(node, lesson) == answer_tokens(correct(), lesson)


@pytest.mark.parametrize("lesson", lessons())
def test_every_lessons_released_cells_with_windows_line_endings_are_not_the_students(lesson):
    node = edited(correct(lesson), EDITORS["windows line endings"])
    assert inspect_submission(node, read_lesson(lesson)) == []


@pytest.mark.parametrize("change", [
    lambda source: source.replace("\n", "\r\n") + '\r\nsys.modules["torch"] = None',
    lambda source: source.replace('"main"', '"other"').replace("\n", "\r\n"),
    lambda source: source.replace("USE_GPU = True", "USE_GPU = False"),
], ids=["code-added", "a-string-changed", "the-form-changed"])
def test_a_setup_cell_whose_code_changed_is_the_students(change):
    node = correct()
    node.cells[SETUP].source = change(node.cells[SETUP].source)
    assert any("sys.modules" in flag for flag in inspect_submission(node, read_lesson(LESSON)))


def test_a_string_is_compared_as_written():
    """Spaces inside a string are the program's data: not an editor's change."""
    assert as_run('x = """a  \nb"""') != as_run('x = """a\nb"""')
    assert as_run('x = "a"\r\n') == as_run('x = "a"') == as_run("x = 'a'  # a comment\n")
    assert as_run("%%time\nx = 1") != as_run("%%time\nx = 2")
