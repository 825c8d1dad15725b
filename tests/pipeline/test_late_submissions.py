"""Lateness through the whole data path: collect (timestamp.txt from the exchange, Canvas's LATE
marker), the gradebook (nbgrader's duedate, extension and late penalty, which `nbgrader export`
reads too), grades.csv, the report and Canvas's gradebook import. (tests/grader/test_lateness.py
tests the course file and the late policy themselves.)"""

import csv
import os
import shutil
import subprocess
import sys
import zipfile
from datetime import datetime, timedelta
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from grader import cli
from grader.course import COURSE_ID, ROOT, read_lesson
from grader.demo import practice_names, student_notebook
from grader.grading.results import ExerciseResult, Outcome, Result
from grader.records.lateness import CourseFile
from grader.workspace import Workspace
from helpers import gradebook

L02, L03 = "02_scaled_dot_product", "03_masking"
COURSE_TOML = f"""
[due]
"{L02}" = 2025-03-07T23:59:00Z
"{L03}" = "2025-03-10 12:00 UTC"

[extensions]
dan = {{ "{L03}" = 3 }}

[late]
penalty_per_day = 0.1
max_penalty = 0.3

[canvas]
"{L02}" = "Attention scores (4022)"
"""
EXCHANGE = {  # lesson 03 through nbgrader's exchange: student -> submission time
    "ann": "2025-03-10 11:59:00.000000 UTC",  # on time
    "cat": "2025-03-12 08:00:00.000000 UTC",  # 2 days late
    "dan": "2025-03-12 08:00:00.000000 UTC",  # within the 3 days of extension
}


FULL = {lesson: read_lesson(lesson).max_score for lesson in (L02, L03)}


def shown(points: float) -> str:
    """Points as the CSV, the report and Canvas's file write them."""
    return f"{round(points, 6):g}"


def full_marks(student: str, lesson: str) -> Result:
    cells = read_lesson(lesson).points
    return Result(student, lesson, Outcome.GRADED, "",
                  tuple(ExerciseResult(g, p, p, True, "ok") for g, p in cells),
                  sum(p for _, p in cells))


def read_csv(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as file:
        return list(csv.reader(file))


def downloads(workspace: Workspace) -> list[Path]:
    """Lesson 02 from Canvas (one submission marked LATE), lesson 03 from the exchange (with
    times)."""
    root = workspace.root.parent
    canvas = root / "canvas.zip"
    text = nbformat.writes(student_notebook(L02, dict.fromkeys(practice_names(L02))))
    with zipfile.ZipFile(canvas, "w") as archive:
        archive.writestr(f"smithann_1001_5001_{L02}.ipynb", text)
        archive.writestr(f"jonesbob_LATE_1002_5002_{L02}.ipynb", text)
    inbound = root / "inbound"
    for student, stamp in EXCHANGE.items():
        folder = inbound / f"{student}+{L03}+{stamp}+abc123"
        folder.mkdir(parents=True)
        nbformat.write(student_notebook(L03, dict.fromkeys(practice_names(L03))),
                       folder / f"{L03}.ipynb")
        (folder / "timestamp.txt").write_text(stamp)
    return [canvas, inbound]


def write_course_toml(workspace: Workspace) -> None:
    (workspace.root / "course.toml").write_text(COURSE_TOML)


def record_full_marks(workspace: Workspace) -> None:
    """Every submission recorded with full marks, after `refresh` (as grade does)."""
    results = [full_marks(student, lesson) for student, lesson in
               [("1001", L02), ("1002", L02), *((s, L03) for s in EXCHANGE)]]
    gradebook.ensure_lessons(workspace, [L02, L03])
    assert cli.main(["--workspace", str(workspace.root), "refresh"]) == 0
    gradebook.record(workspace, results, {L02: read_lesson(L02), L03: read_lesson(L03)},
                     CourseFile.read(workspace))


@pytest.fixture(scope="module")
def course(graded_class) -> Workspace:
    """The class collected, its course.toml written, every submission recorded with full marks,
    then the report."""
    return graded_class("lateness", downloads=downloads, prepare=write_course_toml,
                        grade=record_full_marks, then=("report",))


def test_lateness_is_in_the_csv_and_the_penalty_off_the_score(course):
    table = read_csv(course.report / "grades.csv")
    header, by_student = table[0], {row[0]: dict(zip(table[0], row, strict=True))
                                    for row in table[1:]}
    assert header[-4:] == [f"{L02} late", f"{L02} penalty", f"{L03} late", f"{L03} penalty"]
    assert by_student["1001"][f"{L02} late"] == ""  # Canvas gives no time, and no marker
    assert (by_student["1002"][f"{L02} late"], by_student["1002"][f"{L02} penalty"],
            by_student["1002"][L02]) == ("late (LMS; time unknown)", shown(0.1 * FULL[L02]),
                                         shown(0.9 * FULL[L02]))  # one day's penalty
    assert (by_student["ann"][f"{L03} late"], by_student["ann"][L03]) == (
        "on time", shown(FULL[L03]))
    assert (by_student["cat"][f"{L03} late"], by_student["cat"][f"{L03} penalty"],
            by_student["cat"][L03], by_student["cat"]["total"]) == (
        "2 days late", shown(0.2 * FULL[L03]), shown(0.8 * FULL[L03]), shown(0.8 * FULL[L03]))
    assert (by_student["dan"][f"{L03} late"], by_student["dan"][L03]) == (
        "on time", shown(FULL[L03]))


def test_the_report_lists_lateness_per_student(course):
    page = (course.report / "report.html").read_text()
    assert "<td>cat</td><td>03_masking</td><td>2025-03-10 12:00 UTC</td>" \
           "<td>2025-03-12 08:00 UTC</td><td>2 days late</td>" in page
    assert "<td>dan</td><td>03_masking</td><td>2025-03-13 12:00 UTC</td>" in page  # extension
    assert f">{shown(0.8 * FULL[L03])} (2 days late: -{shown(0.2 * FULL[L03])})<" in page


def test_due_dates_extensions_and_penalties_are_nbgraders_own(course):
    with Gradebook(course.db_url, course_id=COURSE_ID) as book:
        assert book.find_assignment(L03).duedate == datetime(2025, 3, 10, 12, 0)
        assert book.find_submission(L03, "dan").extension == timedelta(days=3)
        cat = book.find_submission(L03, "cat")
        assert cat.total_seconds_late == 158400.0
        assert cat.late_submission_penalty == pytest.approx(0.2 * FULL[L03])
    # nbgrader's own export agrees with our CSV
    exported = course.root / "nbgrader-export.csv"
    env = os.environ | {"ATTENTION_COURSE_WORKSPACE": str(course.root),
                        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-m", "nbgrader", "export", f"--to={exported}"],
                          cwd=ROOT / "grader", env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {(r["student_id"], r["assignment"]): r for r in csv.DictReader(exported.open())}
    assert float(rows["cat", L03]["late_submission_penalty"]) == pytest.approx(0.2 * FULL[L03])
    assert float(rows["cat", L03]["score"]) == pytest.approx(0.8 * FULL[L03])
    assert float(rows["1002", L02]["late_submission_penalty"]) == pytest.approx(0.1 * FULL[L02])


def test_canvas_gets_its_import_format_with_the_canvas_ids_collect_recorded(course):
    table = read_csv(course.report / "canvas.csv")
    assert table[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert "Attention scores (4022)" in table[0] and L03 in table[0]
    column = table[0].index("Attention scores (4022)")
    assert table[1][0] == "Points Possible" and table[1][column] == shown(FULL[L02])
    rows = {row[1] or row[2]: row for row in table[2:]}
    assert rows["1002"][:3] == ["jonesbob", "1002", ""]  # Canvas user id, no SIS id known
    assert rows["1002"][column] == shown(0.9 * FULL[L02])
    assert rows["cat"][:3] == ["cat", "", "cat"] and rows["cat"][column] == ""  # not submitted


def masking(workspace: Workspace, student: str) -> tuple[str, str]:
    """How late the student's lesson 03 was, and its score, as grades.csv says."""
    header, *rows = read_csv(workspace.report / "grades.csv")
    row = dict(zip(header, next(r for r in rows if r[0] == student), strict=True))
    return row[f"{L03} late"], row[L03]


def test_report_only_reads_and_says_when_the_gradebook_is_behind_the_course_file(
        course, tmp_path, capsys):
    """A due date moved in course.toml reaches the gradebook through `refresh` (or `grade`),
    never through `report`, which says the gradebook is behind and counts what it holds."""
    workspace = Workspace(tmp_path / "course")
    shutil.copytree(course.root, workspace.root)
    workspace.course_file.write_text(COURSE_TOML.replace('"2025-03-10 12:00 UTC"',
                                                         '"2025-03-12 12:00 UTC"'))
    before = (workspace.root / "gradebook.db").read_bytes()
    capsys.readouterr()
    assert cli.main(["--workspace", str(workspace.root), "report"]) == 0
    assert (workspace.root / "gradebook.db").read_bytes() == before  # nothing written
    said = capsys.readouterr().err
    assert f"the due date of {L03}" in said and "make refresh" in said
    assert masking(workspace, "cat") == ("2 days late", shown(0.8 * FULL[L03]))  # as held

    assert cli.main(["--workspace", str(workspace.root), "refresh"]) == 0
    assert cli.main(["--workspace", str(workspace.root), "report"]) == 0
    assert "make refresh" not in capsys.readouterr().err
    assert masking(workspace, "cat") == ("on time", shown(FULL[L03]))  # the new due date
