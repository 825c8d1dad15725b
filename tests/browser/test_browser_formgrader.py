"""The instructor's side in the browser: `make formgrader` opens JupyterLab with nbgrader's
formgrader, which finds the course configuration and lists every lesson."""

import pytest
from lab_pages import hide_file_browser, open_menu_item
from notebook_tools import lessons
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A course workspace (gradebook, submissions) that does not exist yet."""
    return tmp_path_factory.mktemp("workspace") / "course"


@pytest.fixture(scope="module")
def lab(lab_servers, workspace):
    return lab_servers.make_formgrader(workspace)


def test_formgrader_lists_every_lesson(lab, workspace, page, screenshot):
    page.goto(lab.link())
    open_menu_item(page, "Nbgrader", "Formgrader")
    formgrader = page.frame_locator(".jp-MainAreaWidget iframe")
    listed = formgrader.locator("td.name a")
    expect(listed).to_have_text(lessons(), timeout=30_000)
    expect(formgrader.locator("body")).not_to_contain_text("not a subdirectory")
    assert (workspace / "gradebook.db").exists(), "the formgrader did not use the workspace"
    hide_file_browser(page)
    listed.last.scroll_into_view_if_needed()
    screenshot(page, "formgrader")
