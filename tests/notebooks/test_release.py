"""The student notebooks are exactly what nbgrader generates from the solutions, and leak
nothing."""

import dataclasses
import json
import re

import pytest

from attention_course import lessons as registry
from grader import release
from helpers.notebooks import BEGIN, END, NOTEBOOKS, SOLUTIONS, grading, lessons, read

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


REGION = re.compile(r"### BEGIN (?:SOLUTION|HIDDEN TESTS)\n(.*?)### END (?:SOLUTION|HIDDEN TESTS)",
                    re.S)


def solution_lines(lesson: str) -> set[str]:
    """Distinctive lines that only the solution regions and hidden tests of a lesson contain
    (a line that the visible part of the source shows too is no secret)."""
    sources = [cell.source for cell in read(SOLUTIONS, lesson).cells]
    visible = "\n".join(REGION.sub("", source) for source in sources)
    hidden = {line.strip() for source in sources for region in REGION.findall(source)
              for line in region.splitlines()}
    return {line for line in hidden if len(line) > 12 and line not in visible}


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
def test_every_exercise_is_followed_by_its_locked_graded_check(lesson):
    cells = read(SOLUTIONS, lesson).cells
    for i, cell in enumerate(cells):
        if grading(cell).get("solution"):
            hints = cells[i + 1].get("id") == f"hints-{grading(cell)['grade_id']}"
            check = cells[i + 1 + hints]  # after its staged hints (tests/notebooks/test_hints.py)
            assert grading(check).get("grade"), f"no check cell right after {grading(cell)}"
            assert f"from attention_course.checks import {grading(check)['grade_id']}" \
                in check.source
    for cell in (c for c in cells if grading(c).get("grade")):
        assert grading(cell)["locked"] and grading(cell)["points"] > 0
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


@pytest.mark.parametrize("lesson", LESSONS)
def test_colab_asks_for_a_gpu_only_where_the_registry_says_so(lesson):
    asked = read(NOTEBOOKS, lesson).metadata.get("accelerator")
    assert asked == ("GPU" if registry.lesson(lesson).gpu else None)
    assert "accelerator" not in read(SOLUTIONS, lesson).metadata  # the registry decides


def test_a_lesson_that_benefits_from_a_gpu_is_opened_on_one(monkeypatch):
    entry = dataclasses.replace(registry.lesson(LESSONS[0]), gpu=True)
    monkeypatch.setattr(registry, "lesson", lambda lesson_id: entry)
    text = (NOTEBOOKS / LESSONS[0] / f"{LESSONS[0]}.ipynb").read_text()
    stamped = json.loads(release.stamp(text, LESSONS[0], release.course_settings()))
    assert stamped["metadata"]["accelerator"] == "GPU"


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_lesson_says_how_to_carry_on_when_stuck(lesson):
    text = "\n".join(c.source for c in read(NOTEBOOKS, lesson).cells if c.cell_type == "markdown")
    shown = re.search(r"^ {4}from attention_course\.(\w+) import (\w+)$", text, re.M)
    assert shown and "Run All Above" in text
    references = {".".join(p.reference.split(".")[:2])
                  for p in registry.lesson(lesson).practice if p.reference}
    assert ".".join(shown.groups()) in references  # a reference of this lesson's exercises
