"""nbgrader's gradebook as the one source of truth: every graded submission is written to it as
soon as it is graded (an interrupted batch loses nothing and resumes), a score a human set in
the formgrader wins and survives grading again, a held submission counts 0 until a human sets
its grade, every result stays in a history, nbgrader's own tools (the formgrader's API and its
Autograde button, release_feedback, fetch_feedback) work on what the grader writes, and the CSV,
report and feedback read it. A small class of lesson 02, graded for real in the sandbox."""

import contextlib
import csv
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook
from nbgrader.utils import parse_utc

from grader import cli, commands
from grader.course import COURSE_ID, ROOT
from grader.demo import MISTAKES, practice_names, student_notebook
from grader.workspace import Workspace, folder_digest
from helpers import gradebook

pytestmark = pytest.mark.slow
LESSON = "02_scaled_dot_product"
ANSWERS = dict.fromkeys(practice_names(LESSON))
CLASS = {  # student -> (notebook bytes, timestamp.txt or None)
    "ann": (student_notebook(LESSON, ANSWERS), "2025-03-01 10:00:00.000000 UTC"),
    "bob": (student_notebook(LESSON, ANSWERS | {"softmax": MISTAKES["softmax"][0]}),
            "2025-03-02 11:30:00.250000 UTC"),
    "fay": (student_notebook(LESSON, ANSWERS, "import gc\ngc.collect()"),  # flagged: held
            "2025-03-03 09:15:00.000000 UTC"),
    "zed": (b"{not a notebook", None),
}
MAX = 5.0  # lesson 02's points


def submissions(students: dict) -> dict:
    """The class's submissions, as graded_class takes them."""
    return {(student, LESSON): handed_in for student, handed_in in students.items()}


def grade(workspace: Workspace, *options: str) -> int:
    return cli.main(["--workspace", str(workspace.root), "grade", "--workers", "1", *options])


def rows(workspace: Workspace) -> dict:
    """Everything the gradebook holds about each submission, as plain values."""
    with Gradebook(workspace.db_url, course_id=COURSE_ID) as book:
        return {(s.student.id, a.name): {
            "timestamp": s.timestamp, "extension": s.extension,
            "notebooks": [{"flagged": nb.flagged, "penalty": nb.late_submission_penalty,
                           "grades": sorted((g.name, g.auto_score, g.manual_score,
                                             g.extra_credit, g.needs_manual_grade)
                                            for g in nb.grades),
                           "comments": sorted((c.name, c.auto_comment) for c in nb.comments)}
                          for nb in s.notebooks]}
            for a in book.assignments for s in a.submissions}


def read_csv(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as file:
        return list(csv.reader(file))


def report(workspace: Workspace) -> dict[str, list[str]]:
    assert cli.main(["--workspace", str(workspace.root), "report"]) == 0
    table = read_csv(workspace.report / "grades.csv")
    assert table[0][0] == "student" and LESSON in table[0]
    return {row[0]: row for row in table[1:]}, table[0]


def total(workspace: Workspace, student: str) -> float:
    by_student, header = report(workspace)
    return float(by_student[student][header.index("total")])


@pytest.fixture(scope="module")
def graded(graded_class) -> Workspace:
    """The class graded in one batch, nothing interrupted."""
    return graded_class("uninterrupted", submitted=submissions(CLASS), grade=("--workers", "1"))


def test_every_graded_submission_is_in_the_gradebook_as_nbgrader_autograde_writes_it(graded):
    book = rows(graded)
    assert set(book) == {(student, LESSON) for student in CLASS}
    for student, (_, stamp) in CLASS.items():
        folder = graded.root / "autograded" / student / LESSON
        assert (folder / f"{LESSON}.ipynb").is_file(), student
        assert (folder / "timestamp.txt").is_file() == bool(stamp)
        # what the formgrader compares with timestamp.txt to call a submission autograded
        assert book[student, LESSON]["timestamp"] == (parse_utc(stamp) if stamp else None)
        assert len(gradebook.history(graded, student, LESSON)) == 1
    grades = {s: {g[0]: g[1:] for g in book[s, LESSON]["notebooks"][0]["grades"]} for s in CLASS}
    assert grades["ann"]["check_softmax"] == (2.0, None, None, False)
    assert grades["bob"]["check_softmax"] == (0.0, None, None, False)
    assert all(g == (0.0, None, None, True) for g in grades["fay"].values())  # held
    assert all(g == (0.0, None, None, True) for g in grades["zed"].values())  # not graded
    assert book["fay", LESSON]["notebooks"][0]["flagged"]
    comments = dict(book["bob", LESSON]["notebooks"][0]["comments"])
    assert "softmax" in comments["softmax"]  # the check's diagnosis, for the grader
    assert "Held for a human" in dict(book["fay", LESSON]["notebooks"][0]["comments"])["softmax"]


def test_the_autograded_notebook_shows_the_verdicts_and_none_of_the_students_outputs(graded):
    notebook = nbformat.read(graded.autograded_file("bob", LESSON), as_version=4)
    nbformat.validate(notebook)
    verdicts = {c.metadata["nbgrader"]["grade_id"]: c.outputs[0]["text"] for c in notebook.cells
                if c.get("metadata", {}).get("nbgrader", {}).get("grade") and c.outputs}
    assert verdicts["check_softmax"].startswith("[grader] failed: 0 / 2 points")
    assert verdicts["check_scaled_dot_product_attention"].startswith("[grader] passed")
    assert not [c for c in notebook.cells if c.cell_type == "code" and c.outputs
                and not c.metadata.get("nbgrader", {}).get("grade")]
    held = nbformat.read(graded.autograded_file("fay", LESSON), as_version=4)
    note = held.cells[0].source
    assert "Held for a human" in note and "garbage collector" in note
    unread = nbformat.read(graded.autograded_file("zed", LESSON), as_version=4)
    assert "not valid JSON" in unread.cells[0].source  # the released notebook, with why


def test_an_interrupted_batch_resumed_gives_the_same_gradebook(graded, graded_class, monkeypatch,
                                                                capsys):
    workspace = graded_class("interrupted", submitted=submissions(CLASS), grade=None)
    real = commands.grade_batch
    seen = []

    def interrupted_after_two(*args, **kwargs):
        graded = real(*args, **kwargs)
        for handin, done in graded:
            if len(seen) == 2:
                graded.close()
                raise KeyboardInterrupt  # as Ctrl-C would, after two results
            seen.append(handin.student)
            yield handin, done

    monkeypatch.setattr(commands, "grade_batch", interrupted_after_two)
    with pytest.raises(SystemExit) as stopped:
        grade(workspace)
    assert stopped.value.code == 130
    assert "interrupted: 2 of 4 submission(s) graded and written to the gradebook" in \
        capsys.readouterr().err
    assert set(rows(workspace)) == {(student, LESSON) for student in seen}

    monkeypatch.setattr(commands, "grade_batch", real)
    assert grade(workspace) == 0
    assert "2 submission(s) already in the gradebook" in capsys.readouterr().out
    assert rows(workspace) == rows(graded)
    for student in CLASS:  # graded once each: the resumed batch did not grade them again
        assert len(gradebook.history(workspace, student, LESSON)) == 1
        assert (workspace.autograded_file(student, LESSON).read_bytes()
                == graded.autograded_file(student, LESSON).read_bytes())


def recorded_count(workspace: Workspace) -> int:
    """How many results the gradebook's history holds, read without writing anything (the
    grader running beside creates the gradebook)."""
    path = workspace.root / "gradebook.db"
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return db.execute("SELECT count(*) FROM attention_course_results").fetchone()[0]
    except sqlite3.OperationalError:  # no gradebook yet, or no table in it yet
        return 0


def pressable_ctrl_c() -> None:
    """SIGINT as a terminal leaves it to the command it starts (a suite started in the
    background, by a non-interactive shell, passes it on ignored, and Python keeps it so)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


SLEEPER, SLEEP = "zzz", "import time\ntime.sleep(60)"  # graded last: names are sorted


def test_ctrl_c_in_a_running_batch_loses_nothing(graded, graded_class):
    """SIGINT to `python -m grader grade` once the first submission is in the gradebook: every
    result file it leaves is in the gradebook, and grading again completes the same gradebook.
    A last submission that sleeps holds the batch up, so the signal always finds it running
    (the class alone may be graded before its first row is written); it is withdrawn before
    grading again."""
    sleeper = {SLEEPER: (student_notebook(LESSON, ANSWERS, SLEEP), None)}
    workspace = graded_class("ctrl-c", submitted=submissions(CLASS | sleeper), grade=None)
    command = [sys.executable, "-m", "grader", "--workspace", str(workspace.root), "grade",
               "--workers", "1"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, preexec_fn=pressable_ctrl_c)
    deadline = time.monotonic() + 300
    while not recorded_count(workspace):
        assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 130, output
    assert "run grade again to go on where it stopped" in output
    recorded = rows(workspace)
    assert (SLEEPER, LESSON) not in recorded
    for result in workspace.results.glob(f"*/{LESSON}.json"):
        assert (result.parent.name, LESSON) in recorded, f"{result} is not in the gradebook"
    shutil.rmtree(workspace.submitted / SLEEPER)
    assert grade(workspace) == 0
    assert rows(workspace) == rows(graded)


def test_a_notebook_collected_anew_while_it_is_graded_is_graded_again(graded_class, tmp_path):
    """What the gradebook records with a result (the digest and time of the files) is what was
    read for grading: a `collect` that brings a newer notebook while the batch grades the older
    one leaves the newer one to grade, and `grade` then grades it instead of skipping it."""
    started, go = tmp_path / "started", tmp_path / "go"
    waits = (f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\n"
             f"for _ in range(600):\n    if pathlib.Path({str(go)!r}).exists():\n        break\n"
             f"    time.sleep(0.1)")
    workspace = graded_class("collected-anew", grade=None, submitted=submissions(
        {"ann": (student_notebook(LESSON, ANSWERS, waits), None)}))
    command = [sys.executable, "-m", "grader", "--workspace", str(workspace.root), "grade",
               "--workers", "1", "--no-sandbox"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not started.exists():
        assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
        time.sleep(0.1)
    newer = student_notebook(LESSON, ANSWERS | {"softmax": MISTAKES["softmax"][0]})
    download = tmp_path / "download.zip"
    with zipfile.ZipFile(download, "w") as archive:
        archive.writestr(f"ann_{LESSON}.ipynb", nbformat.writes(newer))
    assert cli.main(["--workspace", str(workspace.root), "collect", str(download)]) == 0
    go.touch()
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    first = gradebook.history(workspace, "ann", LESSON)
    assert len(first) == 1 and first[0]["result"]["score"] == MAX  # the older notebook

    assert grade(workspace, "--no-sandbox") == 0
    entries = gradebook.history(workspace, "ann", LESSON)
    assert len(entries) == 2, "the newer notebook was skipped as if it had been graded"
    assert entries[1]["submission"] == folder_digest(workspace.submission("ann", LESSON))
    assert entries[1]["result"]["score"] == MAX - 2  # its softmax is wrong


def test_grading_again_skips_what_is_graded_unless_the_files_changed_or_again(graded, capsys):
    before = rows(graded)
    assert grade(graded) == 0
    assert "4 submission(s) already in the gradebook" in capsys.readouterr().out
    assert rows(graded) == before
    assert all(len(gradebook.history(graded, s, LESSON)) == 1 for s in CLASS)


def test_a_human_score_wins_survives_grading_again_and_is_in_the_csv(graded, capsys):
    assert total(graded, "bob") == 3
    gradebook.set_manual_score(graded, "bob", LESSON, "check_softmax", 1.5, extra_credit=0.5)
    assert total(graded, "bob") == 5  # 1.5 + 0.5 + the 3 points of the other cell

    assert grade(graded, "--student", "bob", "--again") == 0
    assert total(graded, "bob") == 5
    assert gradebook.overrides(graded) == [("bob", LESSON, "check_softmax", 1.5, 0.5)]
    entries = gradebook.history(graded, "bob", LESSON)
    assert len(entries) == 2 and entries[0]["result"] == entries[1]["result"] | {
        "seconds": entries[0]["result"]["seconds"]}
    page = (graded.report / "report.html").read_text()
    assert "set by hand" in page
    capsys.readouterr()
    assert cli.main(["--workspace", str(graded.root), "history", "bob", LESSON]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert len(shown) == 3 and all("graded      3 / 5" in line for line in shown[:2])
    assert shown[2] == "set by hand: check_softmax = 1.5 + 0.5 extra"
    grades = dict((g[0], g[1:]) for g in rows(graded)["bob", LESSON]["notebooks"][0]["grades"])
    assert grades["check_softmax"] == (0.0, 1.5, 0.5, False)  # the same notebook: settled

    # a new notebook from bob: the human's score still counts, and bob is marked for review
    folder = graded.submitted / "bob" / LESSON
    nbformat.write(student_notebook(LESSON, ANSWERS), folder / f"{LESSON}.ipynb")
    assert grade(graded, "--student", "bob") == 0
    softmax = dict((g[0], g[1:]) for g in rows(graded)["bob", LESSON]["notebooks"][0]["grades"])
    assert softmax["check_softmax"] == (2.0, 1.5, 0.5, True)
    assert total(graded, "bob") == 5


def test_a_held_submission_counts_zero_until_a_human_sets_its_grade(graded):
    by_student, header = report(graded)
    assert by_student["fay"][header.index(LESSON)] == "0"
    canvas = read_csv(graded.report / "canvas.csv")
    column, fay = canvas[0].index(LESSON), 2 + sorted(CLASS).index("fay")
    assert canvas[fay][column] == ""  # no grade in Canvas yet
    for grade_id, points in (("check_softmax", 2), ("check_scaled_dot_product_attention", 2)):
        gradebook.set_manual_score(graded, "fay", LESSON, grade_id, points)
    by_student, header = report(graded)
    assert by_student["fay"][header.index(LESSON)] == "4"
    canvas = read_csv(graded.report / "canvas.csv")
    assert canvas[fay][column] == "4"
    assert ">4 (set by hand)<" in (graded.report / "report.html").read_text()


def test_feedback_reads_the_gradebook(graded):
    assert cli.main(["--workspace", str(graded.root), "feedback"]) == 0
    page = (graded.feedback / "fay" / LESSON / f"{LESSON}.html").read_text()
    assert "Your instructor set the score of this lesson." in page
    zed = (graded.feedback / "zed" / LESSON / f"{LESSON}.html").read_text()
    assert "Your instructor will set the grade of this lesson" in zed
    for student in CLASS:
        folder = graded.feedback / student / LESSON
        assert (folder / "timestamp.txt").is_file() and (folder / "submission_secret.txt").is_file()


def nbgrader_tool(workspace: Workspace, code: str, exchange: Path | None = None) -> dict:
    """Run ``code`` where the formgrader runs: nbgrader's course config loaded from grader/ for
    this workspace; ``code`` sets ``out`` (a JSON-able value), which is returned."""
    env = os.environ | {"ATTENTION_COURSE_WORKSPACE": str(workspace.root),
                        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    if exchange:
        env["ATTENTION_COURSE_EXCHANGE"] = str(exchange)
    script = ("import json\nfrom nbgrader.apps.baseapp import NbGrader\n"
              "from nbgrader.apps.api import NbGraderAPI\n"
              "from nbgrader.coursedir import CourseDirectory\n"
              "app = NbGrader(); app.load_config_file()\n"
              "api = NbGraderAPI(CourseDirectory(config=app.config), config=app.config)\n"
              f"{code}\nprint('RESULT' + json.dumps(out, default=str))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT / "grader", env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.rpartition("RESULT")[2])


def test_the_formgrader_sees_the_scores_flags_and_the_manual_grading_to_do(graded):
    seen = nbgrader_tool(graded, f"""
out = {{"submissions": api.get_submissions("{LESSON}"),
        "notebooks": api.get_notebook_submissions("{LESSON}", "{LESSON}")}}""")
    submissions = {s["student"]: s for s in seen["submissions"]}
    assert all(s["autograded"] for s in submissions.values())  # not "needs autograding"
    assert {s: submissions[s]["max_score"] for s in CLASS} == dict.fromkeys(CLASS, MAX)
    assert submissions["ann"]["score"] == MAX and not submissions["ann"]["needs_manual_grade"]
    assert submissions["zed"]["needs_manual_grade"]
    assert submissions["ann"]["timestamp"].startswith("2025-03-01T10:00:00")
    notebooks = {n["student"]: n for n in seen["notebooks"]}
    assert set(notebooks) == set(CLASS)  # each one's autograded notebook is there to grade
    assert notebooks["zed"]["needs_manual_grade"]


def test_release_feedback_and_fetch_feedback_work_on_the_feedback(graded, tmp_path):
    # the exchange's secret of ann's submission, as collect keeps it beside timestamp.txt: her
    # submission is new, so it is graded again; the feedback is the graded submission's
    secret = "4f2c9a61b3d84e0f9e2b7c5a1d6e8f30"
    (graded.submitted / "ann" / LESSON / "submission_secret.txt").write_text(secret)
    assert grade(graded, "--student", "ann") == 0
    assert cli.main(["--workspace", str(graded.root), "feedback"]) == 0
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    nbgrader = [sys.executable, "-m", "nbgrader"]
    env = os.environ | {"ATTENTION_COURSE_WORKSPACE": str(graded.root),
                        "ATTENTION_COURSE_EXCHANGE": str(exchange),
                        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    released = subprocess.run([*nbgrader, "release_feedback", LESSON], cwd=ROOT / "grader",
                              env=env, capture_output=True, text=True, timeout=300)
    assert released.returncode == 0, released.stdout + released.stderr
    outbound = exchange / COURSE_ID / "feedback"
    assert len(list(outbound.glob("*.html"))) == len(CLASS)

    # ann fetches it, from her own account: her exchange cache holds her submission
    home = tmp_path / "ann"
    cached = home / "cache" / COURSE_ID / f"ann+{LESSON}+2025-03-01 10:00:00.000000 UTC"
    cached.mkdir(parents=True)
    shutil.copy(graded.submitted / "ann" / LESSON / f"{LESSON}.ipynb", cached)
    (cached / "submission_secret.txt").write_text(secret)
    fetched = subprocess.run(
        [*nbgrader, "fetch_feedback", LESSON, f"--course={COURSE_ID}",
         f"--Exchange.root={exchange}", f"--Exchange.cache={home / 'cache'}",
         f"--Exchange.assignment_dir={home}", "--CourseDirectory.student_id=ann"],
        cwd=home, env=env, capture_output=True, text=True, timeout=300)
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    pages = list((home / LESSON / "feedback").glob(f"*/{LESSON}.html"))
    assert len(pages) == 1
    assert pages[0].read_bytes() == (graded.feedback / "ann" / LESSON / f"{LESSON}.html") \
        .read_bytes()
