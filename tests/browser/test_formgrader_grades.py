"""The instructor's side in the browser: `make formgrader` opens JupyterLab with nbgrader's
formgrader, which finds the course configuration and lists every lesson; on the demo class
(lessons 02 and 03, graded by `python -m grader grade`) it lists every submission as graded with
its score, the flagged ones in Manual Grading, and the grader's verdicts in each submission; a
score set in the formgrader is what grades.csv counts, and its Autograde button grades in the
sandbox. A hostile student's submission, whose cells carry every payload of helpers/hostile.py,
runs and loads nothing in the formgrader's manual grading view."""

import csv
import http.server
import json
import re
import threading
from types import SimpleNamespace

import pytest
from playwright.sync_api import expect

from grader import cli
from grader.demo import student_id, submission_file
from grader.workspace import Workspace
from helpers import gradebook
from helpers.hostile import hostile_notebook
from helpers.lab_pages import hide_file_browser, open_menu_item
from helpers.notebooks import lessons
from helpers.servers import TOKEN

pytestmark = [pytest.mark.browser, pytest.mark.slow]
LESSONS = {2: "02_scaled_dot_product", 3: "03_masking"}  # lesson number -> lesson
L02, L03 = LESSONS[2], LESSONS[3]
STUDENTS = [student_id(index) for index in range(1, 10)]  # the smallest demo class
HOSTILE = "mallory"  # beside the demo class, with lesson 03 only
# What of the hostile payloads' kinds the page of its submission holds, as the browser parsed it.
ACTIVE_IN_PAGE = r"""() => {
  const found = [...document.querySelectorAll("base, meta[http-equiv]")].map(e => e.outerHTML);
  const cells = document.querySelector("#notebook-container");
  const elements = "script, iframe, object, embed, form, link, style, svg, math, plaintext";
  for (const e of cells.querySelectorAll(`${elements}, textarea:not(.comment)`))
    found.push(e.outerHTML.slice(0, 80));
  for (const e of cells.querySelectorAll("*"))
    for (const a of e.attributes) {
      const url = a.value.replace(/[\u0000-\u0020]/g, "");
      if (/^on|^autofocus$|^srcdoc$|^formaction$/i.test(a.name)
          || /^(javascript|vbscript|data:(?!image\/(png|jpeg|gif)))/i.test(url))
        found.push(`${a.name}=${a.value.slice(0, 60)} on <${e.localName}>`);
    }
  return found;
}"""


@pytest.fixture(scope="module")
def beacon():
    """A listener on this machine for what a payload would load (each loads <url>/<its name>):
    ``hits`` are the paths that reached it."""
    hits = []

    class Listener(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(204)  # no content: a page sent here stays where it is
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Listener)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield SimpleNamespace(url=f"http://127.0.0.1:{server.server_port}", hits=hits)
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def demo_class(graded_class, beacon) -> Workspace:
    """The demo class's submissions of lessons 02 and 03, in submitted/ as collect writes them
    (its own tests show how it gets there), and a hostile student's lesson 03, graded."""
    submitted = {(student, lesson): (submission_file(index, lesson, number)[1], None)
                 for number, lesson in LESSONS.items()
                 for index, student in enumerate(STUDENTS, start=1)}
    hostile = json.dumps(hostile_notebook(L03, beacon.url)).encode()
    submitted[HOSTILE, L03] = (hostile, None)
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
        score = f"{standing.score:g} / {standing.max_score:g}"
        expect(row.locator("td.score")).to_have_text(score)
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


def test_a_hostile_submission_runs_and_loads_nothing_in_the_formgrader(lab, demo_class, beacon,
                                                                      page, screenshot):
    """Its markdown, raw cells, attachments, outputs and metadata carry scripts, event
    handlers, javascript: and data: URLs and elements that load or swallow the page: opened for
    manual grading, none runs (``__pwned`` stays unset, the title and address stay), nothing
    reaches the listener, and the student's text is there to read, inert."""
    cells = open_hostile_submission(lab, demo_class, beacon, page, screenshot, "formgrader-hostile")
    expect(cells).to_contain_text("<script>")  # the student's HTML, shown as text
    expect(cells.locator("h2#My-notes")).to_be_visible()  # their own markdown, formatted
    graded_cell = next(iter(gradebook.grade_cell_ids(demo_class, HOSTILE, L03)))
    score = page.locator(f"input.score#{graded_cell}")
    expect(score).to_have_attribute("placeholder", re.compile(r"\d"))  # its view still works


def test_the_formgrader_shows_a_notebook_the_grader_did_not_write_inert(lab, demo_class, beacon,
                                                                        page, screenshot):
    """Defence in depth: the hostile notebook as it was submitted, where the grader's would be
    (as nbgrader's own autograde writes it), is shown inert too, by the formgrader as
    grader/nbgrader_config.py configures it."""
    written = demo_class.autograded_file(HOSTILE, L03)
    kept = written.read_bytes()
    written.write_text(json.dumps(hostile_notebook(L03, beacon.url)))
    try:
        cells = open_hostile_submission(lab, demo_class, beacon, page, screenshot,
                                        "formgrader-hostile-as-submitted")
    finally:
        written.write_bytes(kept)
    expect(cells).to_contain_text("<script>")


def open_hostile_submission(lab, demo_class, beacon, page, screenshot, name: str):
    """Open the hostile student's submission for manual grading, watch it for a while and
    screenshot its last cells; return its cells once nothing active was seen."""
    requests, dialogs = [], []
    beacon.hits.clear()
    page.on("request", lambda request: requests.append(request.url))
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    with_notebook = gradebook.submission_notebook_id(demo_class, HOSTILE, L03)
    formgrader_page(lab, page, f"submissions/{with_notebook}/")
    cells = page.locator("#notebook-container").first  # the template's (nbconvert's inside)
    expect(cells).to_contain_text("My notes")
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(1000)  # the time a payload's event (an error, a focus, a toggle) takes
    seen = {"ran": page.evaluate("window.__pwned || []"), "title": page.title(),
            "address": page.url.split("?")[0], "dialogs": dialogs,
            "loaded": sorted({url for url in requests if url.startswith(beacon.url)}),
            "listener": sorted(set(beacon.hits)), "in the page": page.evaluate(ACTIVE_IN_PAGE)}
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")  # the payloads' cells
    screenshot(page, name)
    assert seen == {"ran": [], "title": L03,
                    "address": f"{lab.url}/formgrader/submissions/{with_notebook}/",
                    "dialogs": [], "loaded": [], "listener": [], "in the page": []}, \
        json.dumps(seen, indent=1)
    return cells
