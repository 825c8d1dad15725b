"""The student notebooks are exactly what nbgrader generates from the solutions, and leak
nothing."""

import json
import re
import sys

import pytest
from notebook_tools import BEGIN, END, NOTEBOOKS, ROOT, SOLUTIONS, grading, lessons, read

sys.path.insert(0, str(ROOT / "grader"))
import release  # noqa: E402

LESSONS = lessons()


def test_there_are_lessons():
    assert LESSONS, "no solutions/<lesson>/<lesson>.ipynb found"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A fresh generation of every lesson, made by the same code as `make release`."""
    out = tmp_path_factory.mktemp("release")
    release.release(LESSONS, out, f"sqlite:///{out / 'gradebook.db'}")
    return out


@pytest.mark.parametrize("lesson", LESSONS)
def test_committed_notebooks_match_a_fresh_generation(lesson, fresh):
    committed = NOTEBOOKS / lesson / f"{lesson}.ipynb"
    assert committed.exists(), f"{committed} is missing: run `make release`"
    assert committed.read_text() == (fresh / lesson / f"{lesson}.ipynb").read_text(), \
        f"notebooks/{lesson} is out of date: run `make release` and commit the result"


def solution_lines(lesson: str) -> set[str]:
    """Every distinctive line of the solution regions and hidden tests of a lesson."""
    lines = set()
    for cell in read(SOLUTIONS, lesson).cells:
        for region in re.findall(r"BEGIN (?:SOLUTION|HIDDEN TESTS)\n(.*?)### END", cell.source,
                                 re.S):
            lines |= {line.strip() for line in region.splitlines() if len(line.strip()) > 12}
    return lines


@pytest.mark.parametrize("lesson", LESSONS)
def test_student_notebooks_contain_no_solution_or_hidden_test(lesson):
    text = "\n".join(cell.source for cell in read(NOTEBOOKS, lesson).cells)
    assert BEGIN not in text and END not in text and "HIDDEN TESTS" not in text
    leaked = [line for line in solution_lines(lesson) if line in text]
    assert not leaked, f"solution text in notebooks/{lesson}: {leaked}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_practice_stub_raises_not_implemented(lesson):
    student, source = read(NOTEBOOKS, lesson), read(SOLUTIONS, lesson)
    practice = [c for c in student.cells if grading(c).get("solution")]
    assert len(practice) == sum(bool(grading(c).get("solution")) for c in source.cells) > 0
    for cell in practice:
        assert "raise NotImplementedError()" in cell.source, cell.source


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_exercise_has_a_locked_graded_check_with_hidden_tests(lesson):
    cells = read(SOLUTIONS, lesson).cells
    checks = [c for c in cells if grading(c).get("grade")]
    assert len(checks) == sum(bool(grading(c).get("solution")) for c in cells)
    for cell in checks:
        assert grading(cell)["locked"] and grading(cell)["points"] > 0
        name = grading(cell)["grade_id"]
        assert f"from attention_course.checks import {name}" in cell.source
        assert "### BEGIN HIDDEN TESTS" in cell.source


@pytest.mark.parametrize("lesson", LESSONS)
def test_badge_and_setup_cell_point_at_the_configured_repository(lesson):
    settings = release.course_settings()
    owner_and_name = settings["repository"].removeprefix("https://github.com/")
    cells = read(NOTEBOOKS, lesson).cells
    badge = (f"https://colab.research.google.com/github/{owner_and_name}/blob/"
             f"{settings['branch']}/notebooks/{lesson}/{lesson}.ipynb")
    assert badge in cells[0].source and "colab-badge.svg" in cells[0].source
    setup = next(c for c in cells if c.cell_type == "code")
    assert f'"{settings["repository"]}", "{settings["branch"]}"' in setup.source
    assert 'USE_GPU = True  # @param {type:"boolean"}' in setup.source
    assert "{{" not in json.dumps([c.source for c in cells])


@pytest.mark.parametrize("lesson", LESSONS)
def test_solutions_are_committed_without_outputs(lesson):
    for cell in read(SOLUTIONS, lesson).cells:
        assert not cell.get("outputs") and not cell.get("execution_count")
