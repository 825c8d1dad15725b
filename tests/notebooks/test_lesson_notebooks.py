"""The student notebooks as a student meets them: a stub stops the run at the first check, and
planted mistakes are named by the checks; both runs share one kernel per lesson. (With the
solutions written in, every check passes: tests/colab/lessons.py runs that under Colab's pins,
tests/colab/test_colab_pinned.py.)"""

import functools

import nbformat
import pytest

from grader.demo import MISTAKES, with_body
from helpers.notebooks import (
    NOTEBOOKS,
    SOLUTIONS,
    check_cells,
    errors,
    execute,
    lessons,
    practice_cells,
    read,
)

pytestmark = pytest.mark.slow
LESSONS = lessons()


@functools.cache
def student_runs(lesson: str) -> tuple[list, list, dict]:
    """The two ways a student meets ``lesson``, run one after the other in one kernel:
    the released notebook up to its first check (what follows cannot come first), then the
    notebook from the top with the catalogued mistakes planted in its practice cells, up to the
    last check that tells one (what follows, training, tells nothing more). Returns the cells
    of each run and the planted mistakes (check name -> (body, what its check says))."""
    student, solution = read(NOTEBOOKS, lesson), read(SOLUTIONS, lesson)
    blank = student.cells[:min(check_cells(student).values()) + 1]
    answers = practice_cells(solution)
    planted = {name: MISTAKES[name] for name in practice_cells(student) if name in MISTAKES}
    mistaken = read(NOTEBOOKS, lesson)
    for name, (body, _) in planted.items():
        practice = practice_cells(mistaken)[name]
        mistaken.cells[practice].source = with_body(solution.cells[answers[name]].source, body)
    told = mistaken.cells[:max(check_cells(mistaken)[name] for name in planted) + 1]
    student.cells = blank + told
    execute(student, NOTEBOOKS / lesson, allow_errors=True)
    return student.cells[:len(blank)], student.cells[len(blank):], planted


@pytest.mark.parametrize("lesson", LESSONS)
def test_student_notebook_runs_until_its_first_check(lesson):
    blank, _, _ = student_runs(lesson)
    failing = [i for i, cell in enumerate(blank) if errors(cell)]
    assert failing[0] == len(blank) - 1, f"first error in cell {failing[0]}: " \
                                         f"{errors(blank[failing[0]])}"
    assert "not implemented yet" in errors(blank[-1])[0]


@pytest.mark.parametrize("lesson", LESSONS)
def test_student_notebook_with_mistakes_is_told_which_mistake(lesson):
    _, told, planted = student_runs(lesson)
    assert planted, f"no mistake planted in {lesson}"
    checks = check_cells(nbformat.v4.new_notebook(cells=told))
    for name, (_, mistake) in planted.items():
        said = errors(told[checks[name]])
        assert said and mistake in said[0], f"check_{name}: expected {mistake!r}, got {said}"
