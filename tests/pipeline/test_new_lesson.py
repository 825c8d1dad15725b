"""Adding a lesson means adding its files and one registry entry.

In a temporary copy of the course, a throwaway lesson is built from a template (a reference
module, a checks module with one check, a solution notebook with one practice cell and its
graded check) plus one entry appended to the registry. Then, with the copy's own package and
grader, it is released, its check runs, a correct and a blank submission are graded in the
sandbox, and the class report is written. No other existing file is touched.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from attention_course.lessons import LESSONS
from helpers.notebooks import ROOT

COPIED = ("src", "grader", "solutions", "notebooks", "pyproject.toml")
NUMBER = len(LESSONS) + 1
LESSON = f"{NUMBER:02d}_doubling"

REFERENCE = f'''
    """Doubling, the smallest lesson there is.

    Lesson: {LESSON}
    """


    def double(x):
        """Twice ``x``, elementwise. Lesson: {LESSON}"""
        return x + x
    '''
CHECKS = f'''
    """Checks for lesson {LESSON}: doubling."""

    import torch

    from .. import doubling
    from .framework import Case, Exercise, Mistake, randn, run_check, seeded
    from .student.shortcuts import forbid


    def double_variant(x, *, factor=2):
        return x * factor


    DOUBLE = Exercise(
        name="double", reference=doubling.double, inputs=("x",),
        outputs=(("output", "(same shape as x)"),), variant=double_variant,
        mistakes=(Mistake("returned x unchanged", "Multiply by two.", {{"factor": 1}}),),
        forbidden=forbid([doubling.double]),
    )


    def check_double(fn, seed: int = 0) -> None:
        """Check double(x). Lesson: {LESSON}"""
        g = seeded(seed)
        run_check(DOUBLE, fn, [Case("a (3, 4) matrix", (randn(3, 4, generator=g),)),
                               Case("float64", (randn(5, generator=g, dtype=torch.float64),))])
    '''
REGISTRY_ENTRY = f'''

    LESSONS += (
        Lesson("{LESSON}", "doubling", teaches=("doubling",), builds="doubling a tensor",
               practice=(Practice("double", "doubling.double"),)),
    )
    '''
PRACTICE = '''def double(x):
    """Twice x, elementwise."""
    ### BEGIN SOLUTION
    return 2 * x
    ### END SOLUTION'''
CHECK_CELL = '''from attention_course.checks import check_double

check_double(double)
### BEGIN HIDDEN TESTS
check_double(double, seed=1)
### END HIDDEN TESTS'''


def nbgrader_cell(source: str, grade_id: str, solution: bool, points: int = 0):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": not solution, "grade_id": grade_id,
                                 "locked": not solution, "schema_version": 3,
                                 "solution": solution, "task": False}
    if points:
        cell.metadata["nbgrader"]["points"] = points
    return cell


def add_lesson(course: Path) -> None:
    """The template: three new files and one entry appended to the registry."""
    package = course / "src" / "attention_course"
    (package / "doubling.py").write_text(textwrap.dedent(REFERENCE).lstrip())
    (package / "checks" / f"lesson{NUMBER:02d}.py").write_text(textwrap.dedent(CHECKS).lstrip())
    with (package / "lessons.py").open("a") as registry:
        registry.write(textwrap.dedent(REGISTRY_ENTRY))
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Doubling\n\nWrite `double`."),
        nbformat.v4.new_code_cell("import torch"),
        nbgrader_cell(PRACTICE, "double", solution=True),
        nbgrader_cell(CHECK_CELL, "check_double", solution=False, points=1)])
    folder = course / "solutions" / LESSON
    folder.mkdir()
    nbformat.write(notebook, folder / f"{LESSON}.ipynb")


def fingerprints(course: Path) -> dict[str, str]:
    return {str(p.relative_to(course)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(course.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def run(course: Path, *command: str) -> str:
    """A command in the copy, with the copy's package and grader first on the path."""
    env = os.environ | {"PYTHONPATH": f"{course / 'src'}{os.pathsep}{course}"}
    done = subprocess.run([sys.executable, *command], cwd=course, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def submit(course: Path, workspace: Path, student: str, answer: str | None) -> None:
    """The released notebook, with the practice cell answered by ``answer`` (or left blank)."""
    notebook = nbformat.read(course / "notebooks" / LESSON / f"{LESSON}.ipynb", as_version=4)
    if answer is not None:
        practice = next(c for c in notebook.cells
                        if c.metadata.get("nbgrader", {}).get("grade_id") == "double")
        practice.source = practice.source.replace("raise NotImplementedError()", answer)
    target = workspace / "submitted" / student / LESSON / f"{LESSON}.ipynb"
    target.parent.mkdir(parents=True)
    nbformat.write(notebook, target)


@pytest.mark.slow
def test_a_new_lesson_needs_its_files_and_one_registry_entry(tmp_path):
    course, workspace = tmp_path / "course", tmp_path / "workspace"
    for name in COPIED:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, course / name)
    before = fingerprints(course)
    add_lesson(course)
    changed = {path for path, digest in fingerprints(course).items()
               if path in before and before[path] != digest}
    assert changed == {"src/attention_course/lessons.py"}

    run(course, "-m", "grader.release", LESSON)
    released = (course / "notebooks" / LESSON / f"{LESSON}.ipynb").read_text()
    assert "raise NotImplementedError()" in released and "2 * x" not in released

    checked = run(course, "-c", "from attention_course.checks import check_double\n"
                                "check_double(lambda x: x * 2)\n"
                                "try:\n    check_double(lambda x: x)\n"
                                "except AssertionError as failure:\n    print(failure)")
    assert checked.startswith("ok: double passed 2 checks\n")
    assert 'This is a known mistake: "returned x unchanged"' in checked

    submit(course, workspace, "ada", "return x * 2")
    submit(course, workspace, "bob", None)
    grader = ["-m", "grader", "--workspace", str(workspace)]
    run(course, *grader, "grade", "--lesson", LESSON, "--workers", "1")
    results = {student: json.loads((workspace / "results" / student / f"{LESSON}.json")
                                   .read_text()) for student in ("ada", "bob")}
    assert (results["ada"]["outcome"], results["ada"]["score"]) == ("graded", 1.0)
    assert (results["bob"]["outcome"], results["bob"]["score"]) == ("graded", 0.0)
    assert "not implemented yet" in results["bob"]["exercises"][0]["message"]

    run(course, *grader, "report")
    grades = (workspace / "report" / "grades.csv").read_text().splitlines()
    assert grades[0].split(",")[-2:] == [LESSON, "total"]
    assert grades[1].startswith("ada,") and grades[1].split(",")[-2:] == ["1", "1"]
