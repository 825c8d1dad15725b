"""The adversarial suite in CI: each crafted submission gets exactly its expected outcome and
every figure of the summary is clean; and the suite's detectors do see what they look for."""

import subprocess
import sys
import time

import nbformat
import pytest
from attacks import ATTACKS, LESSON, MARKER
from suite import Summary, fingerprint, instructor_pages, run_suite, surviving_processes

from grader.workspace import Workspace
from helpers.formgrade import BEACON
from helpers.hostile import hostile_notebook
from helpers.notebooks import NOTEBOOKS, read

# the suite itself (the first test that needs `summary` runs it) took 136 s on 2 cores
pytestmark = [pytest.mark.adversarial, pytest.mark.slow, pytest.mark.timeout(600)]
BY_NAME = {attack.student: attack for attack in ATTACKS}


@pytest.fixture(scope="module")
def summary(tmp_path_factory) -> Summary:
    result = run_suite(tmp_path_factory.mktemp("adversarial"))
    print(result.table())
    return result


def test_the_suite_has_at_least_30_distinct_submissions():
    assert len(ATTACKS) >= 30
    assert len(BY_NAME) == len(ATTACKS)


@pytest.mark.parametrize("student", BY_NAME)
def test_each_submission_gets_its_expected_outcome(summary, student):
    (problem,) = [problem for attack, _, problem in summary.rows if attack.student == student]
    assert problem == "", f"{student} ({BY_NAME[student].what}): {problem}"


@pytest.mark.parametrize("figure", list(Summary().figures))
def test_every_figure_of_the_summary_is_clean(summary, figure):
    details = {"planted secrets leaked": summary.secrets_leaked,
               "processes surviving the batch": summary.survivors,
               "course files changed": summary.files_changed}
    assert summary.figures[figure] in (0, "ok"), details.get(figure, summary.figures[figure])


def test_the_suite_passes_as_a_whole(summary):
    assert summary.passed, summary.table()


# ---------------------------------------------------------------- the detectors can fail

def test_without_the_sandbox_the_detectors_see_the_attacks(tmp_path):
    """The same attackers run unsandboxed (--no-sandbox): the secrets, the connection and the
    changed gradebook are all caught, so a clean summary above means something."""
    unsafe = [BY_NAME[name] for name in ("reads-secrets", "writes-gradebook", "network")]
    seen = run_suite(tmp_path, unsafe, sandboxed=False)
    assert {"workspace", "gradebook", "submission", "hidden tests"} <= set(seen.secrets_leaked)
    assert seen.connections >= 1
    assert any("honest-a's rows changed" in p for p in seen.gradebook_problems)
    assert all(problem for _, _, problem in seen.rows)  # each one's output says it worked
    assert not seen.passed


def test_a_process_left_behind_is_found():
    started = time.time()
    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", MARKER])
    try:
        assert any(line.startswith(f"{leftover.pid}:") for line in surviving_processes(started))
    finally:
        leftover.kill()
        leftover.wait()


def test_a_changed_course_file_is_found(tmp_path):
    (tmp_path / "grader").mkdir()
    runner = tmp_path / "grader" / "runner.py"
    runner.write_text("print('grading')\n")
    before = fingerprint(tmp_path)
    runner.write_text("print('rewritten by a student')\n")
    assert fingerprint(tmp_path) != before


def test_active_content_in_an_instructors_page_is_found_and_whose(tmp_path):
    """A hostile notebook as written where the formgrader looks for an autograded one, beside an
    ordinary student's: found, and named as the hostile student's."""
    workspace = Workspace(tmp_path)
    for student, node in (("alice", read(NOTEBOOKS, LESSON)),
                          ("mallory", hostile_notebook(LESSON, BEACON))):
        path = workspace.autograded_file(student, LESSON)
        path.parent.mkdir(parents=True)
        nbformat.write(node, path)
    pages, found = instructor_pages(workspace, BEACON)
    assert pages == 2 and any("element <script" in problem for problem in found)
    assert all(problem.startswith(f"mallory/{LESSON}: ") for problem in found)
