"""A lesson imports utilities and earlier lessons' reference code, never what it teaches."""

import ast

import pytest
from notebook_tools import SOLUTIONS, grading, lessons, read

LESSON_OF_MODULE = {"embeddings": 1, "attention": 2, "masks": 3, "multihead": 4, "model": 5,
                    "data": 5, "training": 5}
UTILITIES = {"device", "viz", "checks"}
REFERENCE_NAME = {"masked_attention": "scaled_dot_product_attention",
                  "multi_head_attention": "MultiHeadAttention"}


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


def taught(lesson: str) -> set[str]:
    ids = {grading(c)["grade_id"] for c in read(SOLUTIONS, lesson).cells
           if grading(c).get("solution")}
    return ids | {REFERENCE_NAME[i] for i in ids if i in REFERENCE_NAME}


@pytest.mark.parametrize("lesson", lessons())
def test_lesson_imports_only_utilities_and_earlier_lessons(lesson):
    number = int(lesson[:2])
    for module, name in course_imports(lesson):
        top = module.split(".")[0]
        if top in UTILITIES:
            continue
        if name == "*":  # a whole module: only an earlier lesson's
            assert LESSON_OF_MODULE[top] < number, f"{lesson} imports all of {module}"
            continue
        assert LESSON_OF_MODULE[top] <= number, f"{lesson} imports {module}.{name} (a later lesson)"
        assert name not in taught(lesson), f"{lesson} imports {name}, which it teaches"
