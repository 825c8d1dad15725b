"""The lesson registry is the course: every lesson's files, practices, checks and references
are where it says, and nothing is outside it."""

import importlib
import re

import pytest

from attention_course import checks
from attention_course.lessons import LESSONS, lesson
from grader.release import colab_url, course_settings
from helpers.notebooks import NOTEBOOKS, ROOT, SOLUTIONS, grading, read

COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"

IDS = [entry.id for entry in LESSONS]


def test_lessons_are_numbered_in_order_without_gaps():
    assert [entry.number for entry in LESSONS] == list(range(1, len(LESSONS) + 1))
    assert all(re.fullmatch(r"\d\d_[a-z0-9_]+", entry.id) for entry in LESSONS)


def test_every_notebook_folder_is_a_registered_lesson():
    for folder in (SOLUTIONS, NOTEBOOKS):
        found = sorted(p.parent.name for p in folder.glob("*/*.ipynb") if p.stem == p.parent.name)
        assert found == IDS, f"{folder.name}/ holds {found}, the registry {IDS}"


@pytest.mark.parametrize("entry", LESSONS, ids=IDS)
def test_practice_cells_are_the_registered_written_practices(entry):
    cells = read(SOLUTIONS, entry.id).cells
    written = [grading(c)["grade_id"] for c in cells if grading(c).get("solution")]
    assert written == [p.name for p in entry.practice if p.written]


@pytest.mark.parametrize("entry", LESSONS, ids=IDS)
def test_checks_module_is_found_and_holds_the_practices_checks(entry):
    module = importlib.import_module(entry.checks_module)
    assert module in checks.MODULES
    for practice in entry.practice:
        assert getattr(module, practice.check, None) is checks.CHECKS[practice.check]


@pytest.mark.parametrize("entry", LESSONS, ids=IDS)
def test_references_exist_and_modules_name_their_lesson(entry):
    for practice in entry.practice:
        if practice.reference:
            module, name = practice.reference.split(".", 1)
            owner = importlib.import_module(f"attention_course.{module}")
            assert hasattr(owner, name.split(".")[0]), practice.reference
    for module in entry.teaches:
        docstring = importlib.import_module(f"attention_course.{module}").__doc__
        assert f"Lesson: {entry.id}" in docstring, f"{module}'s docstring does not name {entry.id}"


def test_unknown_lesson_says_which_are_known():
    with pytest.raises(KeyError, match="known: 01_embeddings"):
        lesson("99_nothing")


def test_readme_lesson_table_is_the_registry():
    """One row per lesson: its title, what the student builds, its reference modules, and the
    Colab badge that opens its released notebook from the configured repository."""
    text = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| (\d\d [^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", text, re.M)
    settings = course_settings()
    expected = [(f"{e.id[:2]} {e.title}", e.builds, ", ".join(f"`{m}`" for m in e.teaches),
                 f"[![Open In Colab]({COLAB_BADGE})]({colab_url(e.id, settings)})")
                for e in LESSONS]
    assert rows == expected
