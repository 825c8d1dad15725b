"""The class report at 300 students in chromium: the page (built from a synthetic gradebook,
tests/helpers/large_class.py, nothing graded) is under 1 MB, every section is reached from the
links at its top, and the clusters of alike answers come before nothing else a teacher needs.
Screenshots: the top of the page and the clusters."""

import functools
import http.server
import threading

import pytest

from grader.outputs.report import write_report
from helpers.large_class import LESSONS, large_class

pytestmark = [pytest.mark.browser]


@pytest.fixture
def served(tmp_path):
    """The report folder served on a local port, as a browser opens a page."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def in_view(element) -> bool:
    """The element's top is inside the window."""
    return element.is_visible() and element.evaluate(
        "e => { const top = e.getBoundingClientRect().top; "
        "return top > -2 && top < window.innerHeight; }")


def test_the_report_of_300_students_reads_in_a_browser(page, served, screenshot):
    folder, url = served
    big = large_class(300)
    html = write_report(big.results, LESSONS, folder, big.standings, big.no_notebook)[1]
    assert html.stat().st_size < 1_000_000
    page.goto(f"{url}/{html.name}")
    screenshot(page, "report-300-top")
    links = page.locator('nav[aria-label="Sections"] a')
    assert links.count() == 8
    for index in range(links.count()):
        link = links.nth(index)
        target = link.get_attribute("href")
        link.click()
        assert in_view(page.locator(target)), f"{target} is not scrolled into view"
        page.locator(f"{target} a.top").click()
        assert in_view(page.locator("nav")), f"the link back to the top of {target} fails"
    page.locator("#alike-section").scroll_into_view_if_needed()
    screenshot(page.locator("#alike"), "report-300-alike")
    rows = page.locator("#students tr")
    assert rows.count() == 1 + 301
    assert rows.nth(1).locator("td").first.inner_text() == "s0"
