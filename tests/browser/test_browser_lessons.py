"""The lessons in JupyterLab in a real browser, as a student meets them: every released notebook
renders, and with the solutions written into its practice cells the lessons that show each kind
of output run from the Run menu with no error, their figures drawn and their widgets working.
Each notebook is opened once, for both.

A run in the browser costs twice the CPU of a headless one (about 10 s against 4.5 on 2 cores),
so it is spent where the page is what is tested: the README's lesson (its slider and heatmap),
and the lessons whose training draws progress bars (the course's own, and tqdm's). Every lesson
runs top to bottom under nbval and under Colab's pins, where each ``interact`` box is checked
to hold its controls and the figure it drew (tests/colab/lessons.py)."""

import re
import shutil

import nbformat
import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, expect

from helpers.lab_pages import (
    Notebook,
    close_all_tabs,
    hide_file_browser,
    move_slider,
    wait_until_booted,
)
from helpers.notebooks import NOTEBOOKS, answered, lessons, read

pytestmark = [pytest.mark.browser, pytest.mark.slow]
LESSONS = lessons()
README_LESSON = "02_scaled_dot_product"  # the README shows its temperature slider and heatmap
RUN_IN_BROWSER = [README_LESSON, "05_copy_task", "06_rotary_positions"]  # + progress bars


@pytest.fixture(scope="module")
def lab(lab_servers, tmp_path_factory):
    """One student's JupyterLab (`make lab`) for the module, on a working copy of notebooks/
    whose practice cells hold the solutions."""
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(NOTEBOOKS, root / NOTEBOOKS.name,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    for lesson in LESSONS:
        nbformat.write(answered(lesson), root / NOTEBOOKS.name / lesson / f"{lesson}.ipynb")
    return lab_servers.make_lab(root)


@pytest.fixture(scope="module")
def lab_page(lab, browser):
    """``lab_page()``: a browser tab with that JupyterLab open, as a student keeps it open from
    lesson to lesson (JupyterLab boots once, not once per test); a new one after a test that
    could not close its notebook."""
    tabs = []

    def current() -> Page:
        if not tabs or tabs[-1].is_closed():
            tabs.append(browser.new_page())
            tabs[-1].goto(lab.link())
            wait_until_booted(tabs[-1])
        return tabs[-1]

    yield current
    for tab in tabs:
        if not tab.is_closed():
            tab.close()


@pytest.fixture(scope="module", params=LESSONS)
def lesson(request) -> str:
    """Each lesson in turn; its tests run one after the other, on one open notebook."""
    return request.param


@pytest.fixture(scope="module")
def notebook(lesson, lab, lab_page) -> Notebook:
    """The lesson's notebook open in the JupyterLab tab, for all of the lesson's tests (pytest
    runs them one after the other); then closed unsaved and its kernel shut down."""
    page = lab_page()
    opened = Notebook.open(page, f"{NOTEBOOKS.name}/{lesson}/{lesson}.ipynb",
                           len(read(NOTEBOOKS, lesson).cells))
    yield opened
    try:
        close_all_tabs(page)
    except (PlaywrightError, AssertionError):  # a dialog in the way, say: a fresh tab next
        page.close()
    lab.shut_down_kernels()


def test_student_notebook_renders(lesson, notebook, screenshot):
    cells = read(NOTEBOOKS, lesson).cells

    header = notebook.cells.first.locator(".jp-RenderedMarkdown")
    title = re.search(r"^# (.+)$", cells[0].source, re.M).group(1)
    expect(header.locator("h1")).to_contain_text(title)
    badge_target = re.search(r"\[!\[Open In Colab\]\([^)]*\)\]\(([^)]+)\)",
                             cells[0].source).group(1)  # test_release checks the address itself
    expect(header.locator(f'a[href="{badge_target}"] img[alt="Open In Colab"]')).to_be_visible()

    code = notebook.page.locator(".jp-Notebook .jp-CodeCell")
    expect(code).to_have_count(sum(cell.cell_type == "code" for cell in cells))
    expect(code.first).to_be_visible()
    expect(code.first).to_contain_text('USE_GPU = True  # @param {type:"boolean"}')

    # A student's JupyterLab has none of the instructor's nbgrader tools, installed or not
    # (test_formgrader_grades finds its menu in `make formgrader`).
    menu = notebook.page.get_by_role("menuitem", name="Run", exact=True)
    expect(menu).to_be_visible()  # the menu bar is there, and in it
    expect(notebook.page.get_by_role("menuitem", name="Nbgrader", exact=True)).to_have_count(0)
    toolbar = notebook.page.locator(".jp-NotebookPanel-toolbar")
    expect(toolbar).to_be_visible()
    expect(toolbar.get_by_text("Validate", exact=True)).to_have_count(0)
    screenshot(notebook.page, f"student_{lesson}")


@pytest.mark.parametrize("lesson", RUN_IN_BROWSER, indirect=True)
def test_answered_notebook_runs_from_the_run_menu(lesson, notebook, screenshot):
    source = "\n".join(cell.source for cell in answered(lesson).cells)
    notebook.run_all(timeout_s=120)

    assert notebook.errors() == []
    assert notebook.unexecuted_cells() == []
    assert notebook.figures().count() > 0, "no figure was drawn"
    interactives = notebook.interactives()
    expect(interactives).to_have_count(source.count("widgets.interact("))
    for interactive in interactives.all():
        expect(interactive.locator(".widget-slider")).not_to_have_count(0)
        expect(interactive.locator(".jp-RenderedImage img")).not_to_have_count(0)

    hide_file_browser(notebook.page)
    first = interactives.first
    first.scroll_into_view_if_needed()
    screenshot(notebook.page, f"answered_{lesson}")
    figure = first.locator(".jp-RenderedImage img").first
    readout = first.locator(".widget-slider .widget-readout").first
    drawn, value = figure.get_attribute("src"), readout.text_content()
    move_slider(first)
    expect(readout).not_to_have_text(value)
    expect(figure).not_to_have_attribute("src", drawn)  # a new picture, not the same bytes
    notebook.wait_until_idle()  # the redraw is complete
    screenshot(notebook.page, f"answered_{lesson}_slider_moved",
               readme="docs/lesson_screenshot.png" if lesson == README_LESSON else None)
