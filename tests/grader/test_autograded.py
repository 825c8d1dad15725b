"""The autograded notebook the formgrader shows carries nothing active of the student's.

nbgrader's formgrader renders autograded/<student>/<lesson>/<lesson>.ipynb in the instructor's
Jupyter session with nbconvert's HTMLExporter and its `formgrade` template, which renders
markdown as written (it ignores ``sanitize_html``) and puts nbgrader's grade ids into the page
unescaped. Each hostile cell of helpers/hostile.py, graded into the autograded notebook and
rendered as the formgrader renders it, leaves no script, no event handler, no javascript: or
data: URL, nothing that loads anything and nothing that swallows the page, while the student's
ordinary markdown is kept as written. The formgrader as the course configures it
(grader/nbgrader_config.py) shows a hostile notebook inert too, whoever wrote it.
"""

import copy
import functools
import html
import json
import re

import nbformat
import pytest

from grader.course import read_lesson
from grader.grading.batch import Handin
from grader.grading.results import ExerciseResult, Outcome, Result
from grader.records import inert
from grader.records.autograded import autograded_notebook
from helpers.formgrade import (
    BEACON,
    COLAB_BADGE,
    L02,
    active_content,
    formgrade_page,
    page_scripts,
    parsed,
    shows_every_cell,
)
from helpers.hostile import (
    hostile_notebook,
    invalid_cells,
    markdown_payloads,
    ordinary_markdown,
    payload_cells,
    ran,
)
from helpers.notebooks import NOTEBOOKS, lessons, read

# --- grading a notebook into the autograded one --------------------------------------------


@functools.cache
def lesson(name: str = L02):
    return read_lesson(name)


def result(message: str = "not yet", flags: tuple[str, ...] = (), name: str = L02) -> Result:
    exercises = tuple(ExerciseResult(c.grade_id, 0.0, float(c.points), False, message)
                      for c in lesson(name).cells)
    return Result("mallory", name, Outcome.GRADED, "", exercises,
                  sum(e.max_points for e in exercises), flags)


def autograded(notebook, graded: Result | None = None, name: str = L02) -> nbformat.NotebookNode:
    """The autograded notebook of a submission of ``notebook`` (a notebook or its JSON)."""
    raw = notebook if isinstance(notebook, bytes) else json.dumps(notebook).encode()
    return autograded_notebook(Handin("mallory", name, raw), graded or result(name=name),
                               lesson(name))


@functools.cache
def hostile_graded() -> nbformat.NotebookNode:
    """The autograded notebook of the hostile submission (tests only read it)."""
    return autograded(hostile_notebook(L02, BEACON))


@functools.cache
def hostile_page() -> str:
    return formgrade_page(hostile_graded())


def released_with(*cells) -> nbformat.NotebookNode:
    notebook = copy.deepcopy(read(NOTEBOOKS, L02))
    notebook.cells += cells
    return notebook


def cell(notebook, cell_id: str):
    return next(c for c in notebook.cells if c.get("id") == cell_id)


# --- the tests ------------------------------------------------------------------------------


def test_the_hostile_notebook_is_active_in_the_formgrader_as_written():
    """The payloads are real: rendered as the student wrote them, each kind is active."""
    found = " ".join(active_content(formgrade_page(hostile_notebook(L02, BEACON))))
    for sign in ("element <script", "attribute onerror", "attribute ontoggle", "element <iframe",
                 "element <object", "element <embed", "form element <form", "element <meta",
                 "element <style", "attribute style", "element <link", "element <base",
                 "element <svg", "URL 'javascript:", "jav\\tascript:", "URL 'data:text/html",
                 "form element <input autofocus onfocus", "form element <textarea autofocus",
                 "image loaded from", "element <plaintext"):
        assert sign in found, sign


def test_the_formgrader_shows_nothing_active_of_a_hostile_submission():
    graded, page = hostile_graded(), hostile_page()
    assert active_content(page) == [] and shows_every_cell(page, graded)
    assert page_scripts(page) == page_scripts(formgrade_page(autograded(read(NOTEBOOKS, L02))))
    assert "__pwned" not in " ".join(page_scripts(page))
    assert parsed(page).title.string == L02


@pytest.mark.parametrize("name", list(markdown_payloads(BEACON)))
def test_each_markdown_payload_is_shown_inert_as_text(name):
    source = markdown_payloads(BEACON)[name]
    graded = autograded(released_with(nbformat.v4.new_markdown_cell(source, id="payload")))
    page = formgrade_page(graded)
    assert active_content(page) == [] and shows_every_cell(page, graded)
    shown = cell(graded, "payload").source
    assert shown == source or "shown as text" in shown or "&lt;" in shown
    text = parsed(page).select_one("#notebook-container").get_text()
    for node in parsed(page).find_all(string=re.compile(r"\\href")):
        assert node.find_parent(["pre", "code"]), "MathJax reads no link out of the text"
    if name != "math-href":
        written = re.sub(r"\s+", "", html.unescape(source).split("(")[0])[:12]
        assert written in re.sub(r"\s+", "", text), "the grader still sees what was written"


@pytest.mark.parametrize("padding", [0, inert.REMEMBERED_CHARACTERS],
                         ids=["checked once", "too long to remember"])
def test_a_payload_is_as_inert_the_second_time_it_is_met(padding):
    """A cell short enough is checked once and remembered; a longer one is checked each time
    and never kept."""
    inert._inert_text.cache_clear()
    for name, payload in markdown_payloads(BEACON).items():
        source = "x" * padding + "\n\n" + payload
        first, again = inert.inert_markdown(source, None), inert.inert_markdown(source, None)
        assert first == again and inert.is_inert(inert.render(first[0], {})), name
    kept = inert._inert_text.cache_info().currsize
    assert kept == (len(markdown_payloads(BEACON)) if not padding else 0)


def test_the_students_ordinary_markdown_is_kept_as_written():
    graded = hostile_graded()
    assert cell(graded, "own-markdown").source == ordinary_markdown()
    page = parsed(hostile_page())
    own = page.find("h2", id="My-notes").find_parent(class_="cell")
    assert own.find("em").string == "scaled" and own.find("strong").string == "then"
    assert [li.get_text() for li in own.find_all("li")][0] == "each row sums to 1"
    assert "<pad>" in [c.get_text() for c in own.find_all("code")][1]
    assert "\\frac{e^{x_i}}" in own.get_text() and "$a < b$" in own.get_text()
    assert own.find("blockquote") and own.find("table") and own.find(class_="highlight")
    assert own.find("a", href="https://arxiv.org/abs/1706.03762")


@pytest.mark.parametrize("name", lessons())
def test_the_released_notebook_is_kept_as_released(name):
    released = read(NOTEBOOKS, name)
    graded = autograded(released, name=name)
    assert ([(c.cell_type, c.source) for c in graded.cells]
            == [(c.cell_type, c.source) for c in released.cells])
    assert graded.metadata == released.metadata
    page = parsed(formgrade_page(graded))
    assert page.find("img", src=COLAB_BADGE)  # the badge of the released notebook's first cell


def test_raw_cells_are_shown_as_text():
    graded = hostile_graded()
    for cell_id in ("raw-html", "raw-plain"):
        shown = cell(graded, cell_id)
        assert shown.cell_type == "markdown" and "raw_mimetype" not in shown.metadata
        assert "<script>" in shown.source and "~~~~" in shown.source  # in a code block


def test_only_image_attachments_are_kept():
    png = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAA"
           "AABJRU5ErkJggg==")
    image = nbformat.v4.new_markdown_cell("![a plot](attachment:plot.png)", id="image")
    image.attachments = {"plot.png": {"image/png": png, "text/html": "PHNjcmlwdD4="}}
    graded = autograded(released_with(image, *payload_cells(BEACON)))
    assert cell(graded, "image").attachments == {"plot.png": {"image/png": png}}
    assert cell(graded, "image").source == "![a plot](attachment:plot.png)"
    for cell_id in ("att-html", "att-svg"):
        assert not cell(graded, cell_id).get("attachments")
    page = parsed(formgrade_page(graded))
    assert page.find("img", src=f"data:image/png;base64,{png}")


def test_metadata_of_the_students_reaches_the_page_only_as_released():
    graded = hostile_graded()
    released = read(NOTEBOOKS, L02)
    assert graded.metadata == released.metadata  # no title, kernel name or widget state
    for cell_id in ("meta-grade-id", "meta-grade-label", "meta-tags", "meta-transient"):
        assert cell(graded, cell_id).metadata == {}, cell_id
    ids = [c["id"] for c in graded.cells]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", i) for i in ids) and len(set(ids)) == len(ids)
    answers = {c.metadata["nbgrader"]["grade_id"]: c for c in graded.cells
               if "nbgrader" in c.metadata}
    solution = next(c for c in released.cells
                    if c.metadata.get("nbgrader", {}).get("solution"))
    assert answers[solution.metadata.nbgrader.grade_id].metadata == solution.metadata
    nbformat.validate(graded)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_a_cell_nbformat_refuses_neither_invalidates_nor_hides_the_submission(index):
    graded = autograded(released_with(invalid_cells()[index]))
    nbformat.validate(graded)
    assert active_content(formgrade_page(graded)) == []


def test_a_lone_surrogate_in_a_cell_is_written_replaced():
    code = nbformat.v4.new_code_cell("x = '\ud800'", id="surrogate")
    graded = autograded(released_with(code))
    assert cell(graded, "surrogate").source == "x = '\ufffd'"
    nbformat.writes(graded).encode()


def test_the_students_outputs_are_not_shown():
    graded = hostile_graded()
    assert cell(graded, "outputs").outputs == []
    verdicts = [c for c in graded.cells if c.cell_type == "code" and c.outputs]
    assert verdicts and all(o.output_type == "stream" and o.text.startswith("[grader]")
                            for c in verdicts for o in c.outputs)


def test_the_graders_own_notes_quote_the_student_as_text():
    """A check's message may quote what the student's code printed or raised, a flag their
    code: the verdicts (outputs, which nbconvert escapes) and the note for the grader (a code
    block) show it as text."""
    payload = f'<img src="x" onerror="{ran("verdict")}"> \x1b[31mred\x1b[0m ~~~~~ </pre>'
    graded = autograded(read(NOTEBOOKS, L02), result(payload, flags=(payload,)))
    assert graded.cells[0].id == "grader-note"
    page = formgrade_page(graded)
    assert active_content(page) == [] and shows_every_cell(page, graded)
    text = parsed(page).select_one("#notebook-container").get_text()
    assert text.count('<img src="x" onerror=') == 1 + len(lesson().cells)


def test_the_course_formgrader_shows_any_hostile_notebook_inert():
    """Defence in depth: a notebook the course's grader did not write (nbgrader's own
    autograde, or one written before this grader) is shown inert by the formgrader as
    grader/nbgrader_config.py configures it."""
    page = formgrade_page(hostile_notebook(L02, BEACON), course_config=True)
    assert active_content(page) == []
    assert page_scripts(page) == page_scripts(formgrade_page(read(NOTEBOOKS, L02),
                                                             course_config=True))


def test_the_course_formgrader_shows_the_autograded_notebook_as_written():
    assert formgrade_page(hostile_graded(), course_config=True) == hostile_page()
