"""The grading pipeline end to end, on the real nbgrader: collect an LMS zip (nbgrader
zip_collect), grade a small class in parallel (lessons enter the gradebook through nbgrader
generate_assignment), write feedback and the report, and grade again."""

import dataclasses
import json
import signal
import threading
import time
import zipfile
from pathlib import Path

import nbformat
import psutil
import pytest

from grader import cli
from grader.demo import (
    IGNORES_INTERRUPTS,
    KERNEL_DEATH,
    MISTAKES,
    TAMPERING,
    practice_names,
    student_notebook,
)
from grader.grading.results import Outcome, Result
from helpers import gradebook
from helpers.gradebook import read_course

pytestmark = pytest.mark.slow
COURSE = read_course()
L01, L02, L03, L04, L05 = list(COURSE)[:5]  # the lessons the broken files use
EVERY_MISTAKE = {lesson: {name: MISTAKES[name][0] for name in practice_names(lesson)
                          if name in MISTAKES} for lesson in COURSE}
CELL_TIMEOUT = 10
KILLED_NAME = "kill-me"  # the process name a notebook gives itself, for the test to find it
KILL_ME = f"import ctypes, time\nctypes.CDLL(None).prctl(15, b'{KILLED_NAME}')  # PR_SET_NAME\n" \
          f"time.sleep(60)"


def notebook(lesson: str, answers=None, extra: str | None = None) -> bytes:
    answers = dict.fromkeys(practice_names(lesson)) if answers is None else answers
    return nbformat.writes(student_notebook(lesson, answers, extra)).encode()


def valid(lesson: str) -> bytes:
    return notebook(lesson)


def metadata_version_99(lesson: str) -> bytes:
    data = json.loads(valid(lesson))
    for cell in data["cells"]:
        cell["metadata"].get("nbgrader", {})["schema_version"] = 99
    return json.dumps(data).encode()


# (student, lesson) -> (file name in the LMS zip, bytes)
CLASS = {
    **{("correct", lesson): (f"correct_{lesson}.ipynb", valid(lesson)) for lesson in COURSE},
    **{("blank", lesson): (f"blank_{lesson}.ipynb", notebook(lesson, {}))
       for lesson in (L01, L02, L03, L04)},
    **{("mistaken", lesson): (f"mistaken_{lesson}.ipynb",
                              notebook(lesson, dict.fromkeys(practice_names(lesson))
                                       | EVERY_MISTAKE[lesson])) for lesson in COURSE},
    ("malformed", L01): (f"malformed_{L01}.ipynb", valid(L01)[:5000]),
    ("empty", L01): (f"empty_{L01}.ipynb", b""),
    ("renamed", L01): (f"renamed_Copy of {L01}.ipynb", valid(L01)),
    ("notebookless", L01): (f"notebookless_{L01}.ipynb", b'{"not": "a notebook"}'),
    ("future", L01): (f"future_{L01}.ipynb", metadata_version_99(L01)),
    ("forger", L02): (f"forger_{L02}.ipynb",
                      notebook(L02, {}, TAMPERING["patches the comparisons and the checks"])),
    ("eraser", L03): (f"eraser_{L03}.ipynb",
                      notebook(L03, {}, TAMPERING["erases every later cell"])),
    ("looper", L01): (f"looper_{L01}.ipynb", notebook(L01, None, "while True:\n    pass")),
    ("stubborn", L01): (f"stubborn_{L01}.ipynb", notebook(L01, None, IGNORES_INTERRUPTS)),
    ("dying", L04): (f"dying_{L04}.ipynb", notebook(L04, None, KERNEL_DEATH)),
    ("killed", L02): (f"killed_{L02}.ipynb", notebook(L02, None, KILL_ME)),
}


def lms_zip(folder: Path, lesson: str) -> Path:
    path = folder / f"lms-download-{lesson}.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for (_, of_lesson), (name, data) in CLASS.items():
            if of_lesson == lesson:
                archive.writestr(f"{lesson}/{name}", data)
    return path


def kill_kernel_named(name: str, stop: threading.Event, killed: list) -> None:
    """SIGKILL the process that calls itself ``name`` as soon as it appears."""
    while not stop.is_set():
        for process in psutil.process_iter(["name"]):
            if process.info["name"] == name:
                process.send_signal(signal.SIGKILL)
                killed.append(process.pid)
                return
        time.sleep(0.25)  # a scan of every process takes milliseconds; the kernel sleeps 60 s


@pytest.fixture(scope="module")
def graded(graded_class):
    """The class collected from one LMS zip per lesson, and graded with a kernel killed midway:
    (workspace, results, the pids killed)."""
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=kill_kernel_named, args=(KILLED_NAME, stop, killed))
    killer.start()
    try:
        workspace = graded_class(
            "course", downloads=lambda workspace: [lms_zip(workspace.root.parent, lesson)
                                                   for lesson in COURSE],
            grade=("--workers", "2", "--cell-timeout", str(CELL_TIMEOUT)))
    finally:
        stop.set()
        killer.join()
    results = {(r.student, r.lesson): r for r in gradebook.results(workspace)}
    return workspace, results, killed


def points(result: Result) -> dict[str, float]:
    return {e.grade_id: e.points for e in result.exercises}


def test_every_submission_has_exactly_one_outcome(graded):
    _, results, _ = graded
    assert set(results) == set(CLASS)
    assert all(isinstance(r.outcome, Outcome) for r in results.values())


@pytest.mark.parametrize("lesson", list(COURSE))
def test_correct_answers_get_full_points(graded, lesson):
    _, results, _ = graded
    result = results["correct", lesson]
    assert (result.outcome, result.flags) == ("graded", ())
    assert result.score == COURSE[lesson].max_score, result.exercises


@pytest.mark.parametrize("lesson", [L01, L02, L03, L04])
def test_blank_notebooks_get_zero_and_are_told_to_start(graded, lesson):
    result = graded[1]["blank", lesson]
    assert result.outcome == "graded" and result.score == 0
    assert all("not implemented yet" in e.message for e in result.exercises)


@pytest.mark.parametrize(("lesson", "name"), [(lesson, name) for lesson in COURSE
                                              for name in EVERY_MISTAKE[lesson]])
def test_each_catalogued_mistake_loses_its_points_and_is_named(graded, lesson, name):
    result = graded[1]["mistaken", lesson]
    exercise = next(e for e in result.exercises if e.grade_id == f"check_{name}")
    assert exercise.points == 0 and not exercise.passed
    assert MISTAKES[name][1] in exercise.mistake, exercise.message


def test_a_renamed_notebook_is_known_by_its_content_and_graded(graded):
    result = graded[1]["renamed", L01]  # "Copy of 01_....ipynb": collect names it as released
    assert (result.outcome, result.score) == ("graded", COURSE[L01].max_score)


def test_exercises_without_a_planted_mistake_keep_their_points(graded):
    result = graded[1]["mistaken", L01]  # one_hot_embedding has no planted mistake
    assert points(result)["check_one_hot_embedding"] == 2


@pytest.mark.parametrize(("student", "reason"), [
    ("malformed", "not valid JSON"), ("empty", "is empty"),
    ("notebookless", "not a Jupyter notebook"), ("future", "unknown nbgrader metadata version 99")])
def test_broken_files_are_ungradable_with_a_reason(graded, student, reason):
    result = graded[1][student, L01]
    assert result.outcome == "ungradable" and reason in result.reason
    assert result.score == 0


@pytest.mark.parametrize(("student", "lesson", "evidence"), [
    ("forger", L02, "replaces torch.allclose"),
    ("eraser", L03, "how the shell runs or reports cells")])
def test_tampering_earns_nothing_and_is_flagged(graded, student, lesson, evidence):
    result = graded[1][student, lesson]
    assert result.outcome == "graded" and result.score == 0
    assert any(evidence in e for e in result.flags), result.flags


def test_an_endless_cell_is_interrupted_and_the_rest_is_graded(graded):
    result = graded[1]["looper", L01]
    assert (result.outcome, result.score) == ("graded", COURSE[L01].max_score)


def test_a_cell_that_ignores_interrupts_times_out(graded):
    result = graded[1]["stubborn", L01]
    assert result.outcome == "timed out"
    assert f"ran past {CELL_TIMEOUT} s and did not stop when interrupted" in result.reason


def test_a_dying_kernel_is_reported_as_a_crash(graded):
    result = graded[1]["dying", L04]
    assert result.outcome == "crashed" and "exited with status 1" in result.reason


def test_a_kernel_killed_mid_batch_costs_only_its_own_submission(graded):
    _, results, killed = graded
    assert killed, "the kernel to kill never appeared"
    assert results["killed", L02].outcome == "crashed"
    assert "SIGKILL" in results["killed", L02].reason
    assert results["correct", L02].score == COURSE[L02].max_score


def test_the_gradebook_holds_the_points(graded):
    workspace, results, _ = graded
    stored = gradebook.scores(workspace)
    assert stored == {key: points(result) for key, result in results.items()}


def test_feedback_shows_diagnoses_but_no_hidden_tests_or_solutions(graded):
    workspace, results, _ = graded
    assert cli.main(["--workspace", str(workspace.root), "feedback"]) == 0
    page = (workspace.feedback / "mistaken" / L02 / f"{L02}.html").read_text()
    assert "1/D instead of 1/sqrt(D)" in page
    assert "seed=1" not in page and "HIDDEN" not in page
    solution = student_notebook(L02, {"softmax": None}).cells
    body = next(c.source for c in solution if "def softmax" in c.source).splitlines()[-1]
    assert body.strip() and body.strip() not in page


def test_report_lists_grades_and_who_needs_a_human(graded):
    workspace, results, _ = graded
    assert cli.main(["--workspace", str(workspace.root), "report"]) == 0
    rows = (workspace.report / "grades.csv").read_text().splitlines()
    assert rows[0].split(",") == ["student", *COURSE, "total"]
    correct = next(r for r in rows if r.startswith("correct,")).split(",")
    assert float(correct[-1]) == sum(lesson.max_score for lesson in COURSE.values())
    page = (workspace.report / "report.html").read_text()
    for student in ("malformed", "forger", "eraser", "stubborn", "dying", "killed"):
        assert f">{student}<" in page


def test_grading_again_gives_identical_results(graded):
    workspace, results, _ = graded
    before = gradebook.scores(workspace)
    cli.main(["--workspace", str(workspace.root), "grade", "--lesson", L01, "--lesson", L03,
              "--cell-timeout", str(CELL_TIMEOUT)])
    again = {(r.student, r.lesson): r for r in gradebook.results(workspace)}
    for key in results:
        if key[1] in (L01, L03):
            assert _without_time(again[key]) == _without_time(results[key]), key
    assert gradebook.scores(workspace) == before


def _without_time(result: Result) -> Result:
    return dataclasses.replace(result, seconds=0.0)
