"""Driving JupyterLab 4 in the browser the way a person does: open a notebook from its address,
run it from the Run menu, and read what the page shows."""

import re
import time

from playwright.sync_api import Locator, Page, expect

# JupyterLab shows error tracebacks with the stderr renderer, so this finds both.
STDERR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
# The status bar says "Python 3 (ipykernel) | Idle" once a kernel is connected and idle (before
# that, "No Kernel | Initializing", then "... | Initializing").
KERNEL_STATUS = ".jp-StatusBar-TextItem"
KERNEL_IDLE = r"^(?!No Kernel).+ \| Idle$"

# Done when the kernel is idle, no cell is queued or running ([*]), and either every code cell
# shows its execution count or an error stopped the run (the cells after it are not run).
RUN_FINISHED = """([status, idle, stderr]) => {
    const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]
        .map(prompt => prompt.textContent.trim());
    const kernelIdle = [...document.querySelectorAll(status)]
        .some(item => new RegExp(idle).test(item.textContent.trim()));
    const failed = document.querySelector(stderr) !== null;
    return kernelIdle && !prompts.includes('[*]:')
        && (failed || prompts.every(prompt => /^\\[\\d+\\]:$/.test(prompt)));
}"""


class Notebook:
    """The notebook open in a JupyterLab page."""

    def __init__(self, page: Page):
        self.page = page
        self.cells = page.locator(".jp-Notebook .jp-Cell")

    @classmethod
    def open(cls, page: Page, path: str, n_cells: int) -> "Notebook":
        """Open the notebook at ``path`` (relative to the server's root) with File > Open from
        Path in the JupyterLab ``page`` shows, and wait until all ``n_cells`` cells are on the
        page (JupyterLab adds them in batches)."""
        open_menu_item(page, "File", "Open from Path…")
        field = page.locator(".jp-Dialog input")
        field.fill(path)
        field.press("Enter")
        page.wait_for_function("n => document.querySelectorAll('.jp-Notebook .jp-Cell').length"
                               " === n", arg=n_cells, timeout=60_000)
        return cls(page)

    def wait_until_idle(self, timeout_s: float = 60) -> None:
        """Wait until the notebook's kernel is connected and idle."""
        status = self.page.locator(KERNEL_STATUS).filter(has_text=" | ")
        expect(status).to_have_text(re.compile(KERNEL_IDLE), timeout=timeout_s * 1000)

    def run_all(self, timeout_s: float) -> None:
        """Run > Run All Cells once the kernel is up; wait until the run is over."""
        self.wait_until_idle()
        open_menu_item(self.page, "Run", "Run All Cells")
        self.page.wait_for_function(RUN_FINISHED, arg=[KERNEL_STATUS, KERNEL_IDLE, STDERR],
                                    timeout=timeout_s * 1000, polling=250)

    def errors(self) -> list[str]:
        return self.page.locator(STDERR).all_text_contents()

    def unexecuted_cells(self) -> list[str]:
        """The start of every code cell that shows no execution count."""
        code = self.page.locator(".jp-Notebook .jp-CodeCell")
        prompts = code.locator(".jp-InputPrompt").all_text_contents()
        sources = code.locator(".jp-InputArea-editor").all_text_contents()
        return [source[:60] for prompt, source in zip(prompts, sources, strict=True)
                if not prompt.strip().strip("[]:").isdigit()]

    def figures(self) -> Locator:
        return self.page.locator(".jp-Notebook .jp-RenderedImage img")

    def interactives(self) -> Locator:
        """The ipywidgets ``interact`` boxes: controls above the output they redraw."""
        return self.page.locator(".jp-Notebook .widget-interact")


def open_menu_item(page: Page, menu: str, item: str) -> None:
    """Click ``menu`` in JupyterLab's menu bar, then ``item`` in it."""
    page.get_by_role("menuitem", name=menu, exact=True).click()
    page.get_by_role("menuitem", name=item, exact=True).click()


def wait_until_booted(page: Page) -> None:
    """Wait until the JupyterLab ``page`` went to has its menu bar."""
    expect(page.get_by_role("menuitem", name="File", exact=True)).to_be_visible(timeout=60_000)


def close_all_tabs(page: Page, timeout_s: float = 10) -> None:
    """File > Close All Tabs, discarding unsaved changes."""
    open_menu_item(page, "File", "Close All Tabs")
    discard = page.locator(".jp-Dialog").get_by_role("button", name="Discard")
    deadline = time.monotonic() + timeout_s
    while page.locator(".jp-Notebook").count():
        assert time.monotonic() < deadline, f"a notebook still open {timeout_s} s after Close All"
        if discard.count():
            discard.first.click()
        page.wait_for_timeout(100)


def hide_file_browser(page: Page) -> None:
    """Collapse the left sidebar (click its open tab, if any), so the main area fills the
    window."""
    opened = page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current")
    if opened.count():
        opened.click()
    expect(page.locator("#jp-left-stack")).to_be_hidden()


def move_slider(interactive: Locator, key: str = "Home") -> None:
    """Move the first slider of an ``interact`` box with the keyboard, as a person can."""
    handle = interactive.locator(".widget-slider .noUi-handle").first
    handle.focus()
    handle.press(key)
