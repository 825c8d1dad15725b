"""run_autograder, as Gradescope runs it: as root, the student's process as an unprivileged
user, under 768 MB on one core. The demo class's notebooks score as `python -m grader grade`
scores them; a hostile one reads none of the autograder's files and writes no result; the
results.json of a correct, a wrong and a broken submission has only documented fields."""

import json

import pytest
from conftest import FAKE_ROOT, LESSON
from spec import check_results

from grader.course import read_lesson
from grader.demo import MISTAKES, _dumps, student_notebook
from grader.gradescope.layout import Layout
from grader.gradescope.run import run_autograder
from grader.gradescope.settings import FILE_NAME, Settings
from grader.grading.batch import grade_batch
from grader.grading.submissions import Submission
from grader.sandbox import bwrap
from grader.sandbox.client import Limits
from grader.workspace import Workspace

NOTEBOOK = f"{LESSON}.ipynb"
# the answer to one_hot_embedding: the course's reference, read from the autograder's source,
# after forging a result in the results folder (which the fake layout leaves open to all)
STEALS_REFERENCE = f"""
import pathlib
try:
    pathlib.Path("{FAKE_ROOT}/results/forged.json").write_text('{{"score": 100}}')
except OSError:
    pass
namespace = {{}}
exec(pathlib.Path("{FAKE_ROOT}/source/src/attention_course/embeddings.py").read_text(), namespace)
return namespace["one_hot_embedding"](token_ids, weight)
"""


def notebooks() -> dict[str, bytes]:
    answers = dict.fromkeys(["one_hot_embedding", "sinusoidal_positional_encoding",
                             "offset_matrix", "embedding_layer"])
    return {"correct": _dumps(student_notebook(LESSON, answers)),
            "wrong and hostile": _dumps(student_notebook(LESSON, answers | {
                "sinusoidal_positional_encoding": MISTAKES["sinusoidal_positional_encoding"][0],
                "one_hot_embedding": STEALS_REFERENCE}))}


@pytest.fixture(scope="module")
def graded_by_grade(tmp_path_factory) -> dict:
    """What `python -m grader grade` gives each notebook: grade's own batch, one runner."""
    workspace = Workspace(tmp_path_factory.mktemp("course"))
    submissions = []
    for student, data in notebooks().items():
        folder = workspace.submitted / student.replace(" ", "-") / LESSON
        folder.mkdir(parents=True)
        (folder / NOTEBOOK).write_bytes(data)
        submissions.append(Submission(student.replace(" ", "-"), LESSON, folder))
    try:
        bwrap.check(Limits().disk)
        sandboxed = True
    except bwrap.SandboxUnavailable:
        sandboxed = False
    done = grade_batch(submissions, {LESSON: read_lesson(LESSON)}, workspace, 1, Limits(),
                       sandboxed)
    return {handin.student: graded.result for handin, graded in done}


def points(results: dict) -> dict[str, float]:
    """Exercise -> points in a results.json (its tests named '<exercise>[: ...]')."""
    scored = {}
    for test in results["tests"]:
        name = test["name"].split(":")[0]
        scored[name] = scored.get(name, 0.0) + test["score"]
    return scored


@pytest.mark.slow  # a submission graded, and grade's own batch beside it
def test_a_correct_notebook_scores_as_grade_within_768_mb(autograde, graded_by_grade):
    results, ran = autograde({NOTEBOOK: notebooks()["correct"]})
    check_results(results)
    expected = graded_by_grade["correct"]
    assert results["score"] == expected.score == expected.max_score == 10
    assert points(results) == {e.name: e.points for e in expected.exercises}
    assert results["output"] == f"Graded {NOTEBOOK}."
    assert {t["visibility"] for t in results["tests"]} == {"visible", "after_due_date"}
    assert ran.peak_bytes is None or ran.peak_bytes <= ran.limit_bytes


@pytest.mark.slow
def test_a_wrong_hostile_notebook_scores_as_grade_and_reaches_nothing(autograde,
                                                                      graded_by_grade):
    """Renamed, too: found by its content."""
    results, _ = autograde({"Copy of 01 (1).ipynb": notebooks()["wrong and hostile"]})
    check_results(results)
    expected = graded_by_grade["wrong-and-hostile"]
    assert points(results) == {e.name: e.points for e in expected.exercises}
    assert results["score"] == expected.score == 2
    tests = {t["name"]: t for t in results["tests"]}
    stolen = tests["one_hot_embedding: the check in the notebook"]["output"]
    assert "PermissionError" in stolen and "embeddings.py" in stolen
    mistake = tests["sinusoidal_positional_encoding: hidden tests"]
    assert mistake["score"] == 0 and mistake["visibility"] == "after_due_date"
    assert "graded Copy of 01 (1).ipynb" in results["output"]
    assert not (FAKE_ROOT / "results" / "forged.json").exists()
    assert results["extra_data"]["flags"]  # exec is for a human to see


@pytest.mark.parametrize("files, says", [
    ({NOTEBOOK: b'{"cells": [{"cell_type": "code", "sour'}, "not valid JSON"),
    ({"answers.py": b"print(1)"}, "no notebook in the submission (answers.py)"),
    ({NOTEBOOK: b""}, "01_embeddings.ipynb is empty"),
])
def test_a_broken_submission_gets_results_that_say_so(tmp_path, capsys, files, says):
    """No student code runs: run_autograder's function, in this process."""
    layout = Layout(tmp_path, tmp_path / "stage", "nobody")
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / FILE_NAME).write_text(Settings(LESSON).to_json())
    for name, data in files.items():
        (tmp_path / "submission").mkdir(exist_ok=True)
        (tmp_path / "submission" / name).write_bytes(data)
    assert run_autograder(layout) == 0
    results = json.loads(layout.results_file.read_text())
    check_results(results)
    assert capsys.readouterr().out.startswith("score 0: ")
    assert results["score"] == 0 and says in results["output"]
    assert len(results["tests"]) == len(read_lesson(LESSON).points)  # one per graded cell
    assert all(t["output"].startswith("not graded: ") and says in t["output"]
               for t in results["tests"])
