"""The package the student's process sees while a lesson is graded: what its notebook imports,
and no exercise reference of the lesson, no check, no mistake catalogue, as files or modules."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from attention_course import lessons
from grader.sandbox import package
from grader.sandbox.client import RUNNER
from helpers.notebooks import lessons as lesson_ids

PROBE = """
import importlib, json, os, pkgutil, sys, traceback
import torch, matplotlib.pyplot, ipywidgets  # once, then a fork per lesson, as the runner forks
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])  # the runner, for the in-memory modules
from runner import LessonModules
for line in sys.stdin:  # a job per lesson, each in a forked process of its own
    job = json.loads(line)
    if os.fork():
        os.wait()
        continue
    try:
        sys.meta_path.insert(0, LessonModules(job["modules"]))
        import attention_course, attention_course.checks as checks
        names = [m.name for m in pkgutil.iter_modules(attention_course.__path__)]
        found = {name: [n for n in dir(importlib.import_module("attention_course." + name))
                        if not n.startswith("_")]
                 for name in names + list(job["modules"]) if name != "checks"}
        checks.check_softmax(print)  # the stand-in runs and does nothing
        exec(job["imports"])  # the released notebook's imports
        answer = {"found": found}
    except BaseException:
        answer = {"error": traceback.format_exc()}
    print(json.dumps({"lesson": job["lesson"]} | answer), flush=True)
    os._exit(0)
"""


def notebook_imports(lesson: str) -> str:
    """Every import statement of the released notebook's code cells."""
    from grader.grading.submissions import released_source

    statements = []
    for source in released_source(lesson):
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        statements += [ast.unparse(s) for s in tree.body
                       if isinstance(s, ast.Import | ast.ImportFrom)
                       and "attention_course" in ast.unparse(s)]
    return "\n".join(statements)


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> tuple[Path, dict]:
    """The package on disk, and per lesson what its process could import (or why it failed)."""
    root = package.build(tmp_path_factory.mktemp("package"))
    jobs = "".join(json.dumps({"lesson": lesson, "imports": notebook_imports(lesson),
                               "modules": package.modules(lessons.lesson(lesson))}) + "\n"
                   for lesson in lesson_ids())
    done = subprocess.run([sys.executable, "-I", "-c", PROBE, str(root), str(RUNNER.parent)],
                          capture_output=True, text=True, input=jobs, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return root, {answer.pop("lesson"): answer for answer in answers}


@pytest.mark.parametrize("lesson", lesson_ids())
def test_the_notebook_imports_work_and_the_exercise_references_are_not_there(lesson, probed):
    root, answers = probed
    answer = answers.get(lesson, {"error": "no answer from its process"})
    assert "error" not in answer, answer["error"][-2000:]
    modules = package.modules(lessons.lesson(lesson))
    for module, names in package.exercise_references(lessons.lesson(lesson)).items():
        assert not set(names) & set(answer["found"].get(module, ())), (module, names)
    files = {path.relative_to(root).as_posix(): path.read_text()
             for path in root.rglob("*.py")}
    student_side = sorted(p.name for p in package.STUDENT_SIDE.glob("*.py"))
    assert student_side == ["__init__.py", "harness.py", "observing.py", "shortcuts.py",
                            "wire.py"]
    shared = [f"attention_course/{name}.py" for name in package.ON_DISK] + [
        "attention_course/checks/__init__.py",
        *(f"attention_course/checks/student/{name}" for name in student_side)]
    assert sorted(files) == sorted(shared)
    for module, names in package.exercise_references(lessons.lesson(lesson)).items():
        text = modules.get(module, "")
        assert not [n for n in names if f"def {n}(" in text or f"class {n}(" in text]


def test_a_lesson_whose_given_code_needs_an_exercise_reference_is_refused():
    source = "def given():\n    return answer()\n\ndef answer():\n    return 1\n"
    with pytest.raises(package.PackageError, match="answer"):
        package.cut_down(source, {"given"}, {"answer"}, set(), "a lesson")


def test_a_cut_down_module_keeps_what_its_names_need_and_nothing_else():
    source = ("import torch\nfrom .masks import causal_mask\nSCALE = 2\n\n"
              "def helper():\n    return SCALE\n\ndef wanted():\n    return helper()\n\n"
              "def other():\n    return causal_mask(3)\n")
    cut = package.cut_down(source, {"wanted"}, set(), set(), "a lesson")
    assert "def wanted" in cut and "def helper" in cut and "SCALE = 2" in cut
    assert "other" not in cut and "masks" not in cut and "torch" not in cut
