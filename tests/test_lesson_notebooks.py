"""The student notebooks as a student meets them: a stub stops the run at the first check, and
planted mistakes are named by the checks. (With the solutions written in, every check passes:
tests/colab/lessons.py runs that under Colab's pins, tests/test_colab_pinned.py.)"""

import pytest
from notebook_tools import (
    NOTEBOOKS,
    SOLUTIONS,
    check_cells,
    errors,
    execute,
    lessons,
    practice_cells,
    read,
)

from grader.demo import MISTAKES, with_body

pytestmark = pytest.mark.slow
LESSONS = lessons()


@pytest.mark.parametrize("lesson", LESSONS)
def test_student_notebook_runs_until_its_first_check(lesson):
    nb = read(NOTEBOOKS, lesson)
    first_check = min(check_cells(nb).values())
    nb.cells = nb.cells[:first_check + 1]  # what follows cannot come first
    execute(nb, NOTEBOOKS / lesson, allow_errors=True)
    failing = [i for i, cell in enumerate(nb.cells) if errors(cell)]
    assert failing[0] == first_check, f"first error in cell {failing[0]}: " \
                                      f"{errors(nb.cells[failing[0]])}"
    assert "not implemented yet" in errors(nb.cells[first_check])[0]


@pytest.mark.parametrize("lesson", LESSONS)
def test_student_notebook_with_mistakes_is_told_which_mistake(lesson):
    student, solution = read(NOTEBOOKS, lesson), read(SOLUTIONS, lesson)
    answers = practice_cells(solution)
    planted = {name: MISTAKES[name] for name in practice_cells(student) if name in MISTAKES}
    assert planted, f"no mistake planted in {lesson}"
    for name, (body, _) in planted.items():
        practice = practice_cells(student)[name]
        student.cells[practice].source = with_body(solution.cells[answers[name]].source, body)
    last_told = max(check_cells(student)[name] for name in planted)
    student.cells = student.cells[:last_told + 1]  # what follows (training) tells nothing more
    execute(student, NOTEBOOKS / lesson, allow_errors=True)
    for name, (_, mistake) in planted.items():
        told = errors(student.cells[check_cells(student)[name]])
        assert told and mistake in told[0], f"check_{name}: expected {mistake!r}, got {told}"
