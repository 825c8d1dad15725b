"""The instructor's side in the browser: `make formgrader` opens JupyterLab with nbgrader's
formgrader, which finds the course configuration and lists every lesson; on the demo class
(lessons 02 and 03, graded by `python -m grader grade`) it lists every submission as graded with
its score, the flagged ones in Manual Grading, and the grader's verdicts in each submission; a
score set in the formgrader is what grades.csv counts, and its Autograde button grades in the
sandbox."""

import csv
import re

import pytest
from playwright.sync_api import expect

from grader import cli
from grader.demo import student_id, submission_file
from grader.workspace import Workspace
from helpers import gradebook
from helpers.lab_pages import hide_file_browser, open_menu_item
from helpers.notebooks import lessons
from helpers.servers import TOKEN

pytestmark = [pytest.mark.browser, pytest.mark.slow]
LESSONS = {2: "02_scaled_dot_product", 3: "03_masking"}  # lesson number -> lesson
L02 = LESSONS[2]
STUDENTS = [student_id(index) for index in range(1, 10)]  # the smallest demo class


@pytest.fixture(scope="module")
def demo_class(graded_class) -> Workspace:
    """The demo class's submissions of lessons 02 and 03, in submitted/ as collect writes them
    (its own tests show how it gets there), graded."""
    submitted = {(student, lesson): (submission_file(index, lesson, number)[1], None)
                 for number, lesson in LESSONS.items()
                 for index, student in enumerate(STUDENTS, start=1)}
    return graded_class("demo", submitted=submitted,
                        grade=("--workers", "2", "--cell-timeout", "60"))


@pytest.fixture(scope="module")
def lab(lab_servers, demo_class):
    """`make formgrader` for the demo class, with an exchange of its own."""
    return lab_servers.make_formgrader(demo_class.root)


def formgrader_page(lab, page, path: str):
    """A formgrader page on its own, as the formgrader's frame in JupyterLab shows it."""
    page.goto(f"{lab.url}/formgrader/{path}?token={TOKEN}")
    return page


def test_formgrader_lists_every_lesson(lab, page, screenshot):
    page.goto(lab.link())
    open_menu_item(page, "Nbgrader", "Formgrader")
    formgrader = page.frame_locator(".jp-MainAreaWidget iframe")
    listed = formgrader.locator("td.name a")
    expect(listed).to_have_text(lessons(), timeout=30_000)
    expect(formgrader.locator("body")).not_to_contain_text("not a subdirectory")
    hide_file_browser(page)
    listed.last.scroll_into_view_if_needed()
    screenshot(page, "formgrader")


def test_every_submission_is_graded_with_its_score(lab, demo_class, page, screenshot):
    standings = gradebook.standings(demo_class)
    page.goto(lab.link())
    open_menu_item(page, "Nbgrader", "Formgrader")
    formgrader = page.frame_locator(".jp-MainAreaWidget iframe")
    lesson = formgrader.locator("#main-table tr:has(td)").filter(has_text=L02)
    lesson.locator("td.num-submissions a").click()  # its number of submissions
    rows = formgrader.locator("#main-table tr:has(td)")
    expect(rows).to_have_count(len(STUDENTS), timeout=30_000)
    for student in STUDENTS:
        row = rows.filter(has_text=student)
        standing = standings[student, L02]
        expect(row.locator("td.score")).to_have_text(f"{standing.score:g} / 7")
        status = "needs manual grading" if standing.needs_manual_grade else "graded"
        expect(row.locator("td.status")).to_have_text(status)
    expect(formgrader.locator("body")).not_to_contain_text("needs autograding")
    hide_file_browser(page)
    screenshot(page, "formgrader-submissions")


def test_manual_grading_lists_the_flagged_submissions(lab, demo_class, page):
    results = {r.student: r for r in gradebook.recorded_results(
        demo_class, [(s, L02) for s in STUDENTS])}
    held = sorted(s for s, r in results.items() if r.held)
    needs_human = sorted(s for s, r in results.items() if r.needs_human)
    assert held == ["s06"] and needs_human == ["s02", "s06"]  # tampering; an empty file
    formgrader_page(lab, page, f"gradebook/{L02}/{L02}")
    rows = page.locator("#main-table tr:has(td)")
    expect(rows).to_have_count(len(STUDENTS), timeout=30_000)
    expect(page.locator("td.flagged .glyphicon-flag")).to_have_count(len(held))
    expect(page.locator("td.needs-manual-grade .glyphicon")).to_have_count(len(needs_human))


def test_a_flagged_submission_shows_why_and_a_score_set_there_counts(lab, demo_class, page,
                                                                     screenshot):
    ids = gradebook.grade_cell_ids(demo_class, "s06", L02)
    with_notebook = gradebook.submission_notebook_id(demo_class, "s06", L02)
    formgrader_page(lab, page, f"submissions/{with_notebook}/")
    expect(page.locator("body")).to_contain_text("Held for a human")
    expect(page.locator("body")).to_contain_text("[grader]")  # the verdicts
    score = page.locator("input.score#check_softmax")
    expect(score).to_have_attribute("placeholder", re.compile(r"\d"))  # its view is bound
    page.evaluate("window.saved = false;"
                  "$(document).one('finished_saving', () => { window.saved = true; })")
    score.fill("1.5")
    score.press("Enter")
    page.wait_for_function("window.saved", timeout=10_000)  # its own signal, not a 1 s icon
    page.wait_for_function(
        "id => fetch(`/formgrader/api/grade/${id}`).then(r => r.json())"
        ".then(g => g.manual_score === 1.5)", arg=ids["check_softmax"], timeout=10_000)
    screenshot(page, "formgrader-flagged")
    assert ("s06", L02, "check_softmax", 1.5, None) in gradebook.overrides(demo_class)
    assert cli.main(["--workspace", str(demo_class.root), "report"]) == 0
    with (demo_class.report / "grades.csv").open(newline="") as file:
        table = list(csv.reader(file))
    s06 = next(row for row in table if row[0] == "s06")
    assert s06[table[0].index(L02)] == "1.5"


def test_the_autograde_button_grades_with_the_sandboxed_grader(lab, demo_class, page):
    before = len(gradebook.history(demo_class, "s01", L02))
    formgrader_page(lab, page, f"manage_submissions/{L02}")
    row = page.locator("#main-table tr:has(td)").filter(has_text="s01")
    row.locator("td.autograde a").click()
    expect(page.locator("#success-modal")).to_contain_text("Successfully autograded",
                                                           timeout=300_000)
    expect(page.locator("#success-modal pre")).to_contain_text("in the course's sandbox")
    assert len(gradebook.history(demo_class, "s01", L02)) == before + 1
