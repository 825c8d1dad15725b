"""A lesson imports utilities and earlier lessons' reference code, never what it teaches: its
notebook imports only what the registry lets it, and the registry lets it nothing else."""

import ast

import pytest

from attention_course.lessons import LESSONS, UTILITIES, lesson_of_module
from helpers.notebooks import SOLUTIONS, read


def course_imports(lesson: str) -> list[tuple[str, str]]:
    """(module, name) for every `from attention_course.<module> import <name>` in a lesson."""
    found = []
    for cell in read(SOLUTIONS, lesson).cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse("\n".join(line for line in cell.source.splitlines()
                                   if not line.lstrip().startswith(("%", "!"))))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "attention_course"):
                module = node.module.removeprefix("attention_course").lstrip(".")
                found += [(module, alias.name) if module else (alias.name, "*")
                          for alias in node.names]
            elif isinstance(node, ast.Import):
                found += [(a.name.removeprefix("attention_course."), "*") for a in node.names
                          if a.name.startswith("attention_course.")]
    return found


def allowed(lesson, module: str, name: str) -> bool:
    return (module.split(".")[0] in UTILITIES or module in lesson.may_import
            or f"{module}.{name}" in lesson.may_import)


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.id)
def test_lesson_imports_only_what_the_registry_allows(lesson):
    for module, name in course_imports(lesson.id):
        assert allowed(lesson, module, name), \
            f"{lesson.id} imports {module}.{name}, which its registry entry does not allow"


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.id)
def test_registry_allows_earlier_lessons_and_given_code_only(lesson):
    references = [p.reference for p in lesson.practice if p.reference]
    for entry in lesson.may_import:
        module = entry.split(".")[0]
        owner = lesson_of_module(module)
        assert owner is not None, f"{lesson.id} may import {entry}: no lesson teaches {module}"
        assert owner.number <= lesson.number, f"{lesson.id} may import {entry}, a later lesson"
        taught = [r for r in references if r == entry or r.startswith(f"{entry}.")]
        assert not taught, f"{lesson.id} may import {entry}, which holds its exercise {taught}"


def test_a_lesson_that_imports_its_own_exercise_is_refused():
    masking = next(lesson for lesson in LESSONS if lesson.id == "03_masking")
    assert not allowed(masking, "masks", "causal_mask")
    assert not allowed(masking, "attention", "scaled_dot_product_attention")
    assert allowed(masking, "attention", "softmax") and allowed(masking, "viz", "*")
