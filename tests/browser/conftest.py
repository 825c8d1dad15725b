"""The course in a real browser: JupyterLab servers started as a student or an instructor would,
driven through Debian's chromium by Playwright (which never downloads a browser of its own).

Each test module starts one JupyterLab server (`lab_servers`), all share one browser, and a test
gets a fresh tab (`page`) unless its module keeps one JupyterLab open from test to test.
Screenshots go to a `screenshots` folder under pytest's temporary directory (its path is printed
at the end of the run); with UPDATE_SCREENSHOTS=1 the README's screenshot is written to docs/ as
well.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from helpers.servers import TOKEN, free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
# Headless on a closed network: no sandbox (root, containers), and none of chromium's own
# background traffic, which would only produce refused connections.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 900}
SCREENSHOT_DIR: list[Path] = []  # set once screenshots are taken, reported at the end


def pytest_terminal_summary(terminalreporter):
    if SCREENSHOT_DIR:
        terminalreporter.write_line(f"browser screenshots: {SCREENSHOT_DIR[0]}")


# --- JupyterLab servers ---------------------------------------------------------------------


@dataclass
class Lab:
    """A running JupyterLab server: its address, and its REST API for the tests' bookkeeping."""

    url: str
    process: subprocess.Popen
    workspaces: int = 0

    def link(self, path: str = "") -> str:
        """The address that opens JupyterLab (and ``path``, relative to the server root, in it)
        in a workspace of its own, so nothing an earlier test opened comes back."""
        self.workspaces += 1
        tree = f"/tree/{path}" if path else ""
        return f"{self.url}/lab/workspaces/test-{self.workspaces}{tree}?token={TOKEN}"

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(f"{self.url}/api/{path}", method=method,
                                         headers={"Authorization": f"token {TOKEN}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shut_down_kernels(self) -> None:
        """Shut down every kernel, and kill any kernel process that outlives its shutdown (a
        kernel busy in a cell when its test failed), so none slows down the tests after it."""
        for session in self.api("sessions"):
            self.api(f"sessions/{session['id']}", method="DELETE")
        for kernel in self.api("kernels"):
            self.api(f"kernels/{kernel['id']}", method="DELETE")
        kill(kernel_processes(self.process))


def kernel_processes(server: subprocess.Popen) -> list[psutil.Process]:
    """The kernels a server started (in process groups of their own, so a signal to the
    server's group does not reach them)."""
    try:
        children = psutil.Process(server.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    kernels = []
    for child in children:
        with contextlib.suppress(psutil.Error):  # it may have exited meanwhile
            if "ipykernel" in " ".join(child.cmdline()):
                kernels.append(child)
    return kernels


def kill(processes: list[psutil.Process], grace_s: float = 10) -> None:
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        process.kill()


def lab_environment(scratch: Path) -> dict[str, str]:
    """Environment for a test server: this Python environment's tools first on PATH, the fixed
    token, JupyterLab settings, workspaces and runtime files of its own (news feed off), and
    kernels that use one torch thread."""
    settings = scratch / "settings"
    notification = settings / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    (notification / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    return os.environ | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "JUPYTER_TOKEN": TOKEN,
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(scratch / "workspaces"),
        "JUPYTER_RUNTIME_DIR": str(scratch / "runtime"),
        "BROWSER": "true",  # `make formgrader` does not pass --no-browser; open nothing
        # One torch thread per kernel: with two threads on two cores, a core busy with the
        # browser or the server stalls every parallel step, and lesson 05 trains 10x slower.
        "OMP_NUM_THREADS": "1",
    }


class LabServers:
    """Starts JupyterLab servers on free loopback ports and stops them (each with its whole
    process group, kernels included) when the module is done."""

    def __init__(self, tmp_path_factory):
        self.tmp_path_factory = tmp_path_factory
        self.started: list[Lab] = []

    def make_lab(self, notebooks: Path) -> Lab:
        """`make lab`, the student's JupyterLab, on a fresh working copy of the files in
        ``notebooks`` (as it serves a working copy of notebooks/ in work/)."""
        port = free_port()
        work = self.tmp_path_factory.mktemp("work")
        command = ["make", "--no-print-directory", "-C", str(ROOT), "lab",
                   f"NOTEBOOKS={notebooks}", f"WORK={work}", f"PORT={port}"]
        return self.start(command, cwd=ROOT, port=port)

    def make_formgrader(self, workspace: Path) -> Lab:
        """`make formgrader`, the instructor's JupyterLab, with its course workspace in
        ``workspace``."""
        port = free_port()
        exchange = self.tmp_path_factory.mktemp("exchange")  # not the machine's own
        command = ["make", "--no-print-directory", "-C", str(ROOT), "formgrader", f"PORT={port}",
                   f"EXCHANGE={exchange}"]
        return self.start(command, cwd=ROOT, port=port,
                          env={"ATTENTION_COURSE_WORKSPACE": str(workspace)})

    def start(self, command: list[str], cwd: Path, port: int,
              env: dict[str, str] | None = None) -> Lab:
        scratch = self.tmp_path_factory.mktemp("lab")
        log = scratch / "lab.log"
        with log.open("w") as out:
            process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                       env=lab_environment(scratch) | (env or {}),
                                       start_new_session=True)
        lab = Lab(f"http://127.0.0.1:{port}", process)
        self.started.append(lab)
        wait_until_serving(lab, log)
        return lab

    def stop_all(self) -> None:
        for lab in self.started:
            stop(lab)


@pytest.fixture(scope="module")
def lab_servers(tmp_path_factory):
    servers = LabServers(tmp_path_factory)
    yield servers
    servers.stop_all()


def wait_until_serving(lab: Lab, log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lab.process.poll() is not None:
            pytest.fail(f"JupyterLab exited with {lab.process.returncode}:\n{log.read_text()}")
        try:
            lab.api("status")
            return
        except OSError:  # not listening yet
            time.sleep(0.5)
    pytest.fail(f"JupyterLab did not answer at {lab.url} within {timeout} s:\n{log.read_text()}")


def stop(lab: Lab) -> None:
    """Stop the server's whole process group, and every kernel it started."""
    kernels = kernel_processes(lab.process)
    with contextlib.suppress(OSError):  # the server may be gone already
        lab.shut_down_kernels()
    os.killpg(lab.process.pid, signal.SIGTERM)
    try:
        lab.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(lab.process.pid, signal.SIGKILL)
        lab.process.wait()
    kill(kernels)


# --- the browser ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    """Debian's chromium, headless, with a fresh profile; requests that leave this machine are
    refused (the only one a lesson makes is the Colab badge image)."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} not found. The browser tests drive Debian's chromium: `make test` "
                    "installs it with apt-get (as root or with sudo), or run `sudo apt-get "
                    "install chromium chromium-driver`, or point CHROMIUM at a chromium binary.",
                    pytrace=False)
    from playwright.sync_api import sync_playwright  # here, so the rest of the suite needs none

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            tmp_path_factory.mktemp("chromium-profile"), executable_path=CHROMIUM,
            headless=True, args=CHROMIUM_ARGS, viewport=VIEWPORT)
        context.set_default_timeout(30_000)
        context.route(lambda url: not url.startswith("http://127.0.0.1:"),
                      lambda route: route.abort())
        yield context
        context.close()


@pytest.fixture
def page(browser):
    """A fresh browser tab."""
    tab = browser.new_page()
    yield tab
    tab.close()


@pytest.fixture(scope="session")
def screenshot(tmp_path_factory):
    """``screenshot(target, name, readme=None)`` saves a page or element as
    screenshots/<name>.png under pytest's temporary directory; with UPDATE_SCREENSHOTS=1 a
    ``readme`` path (relative to the repository) gets a copy too."""
    folder = tmp_path_factory.mktemp("screenshots", numbered=False)
    SCREENSHOT_DIR.append(folder)

    def save(target, name: str, readme: str | None = None) -> Path:
        path = folder / f"{name}.png"
        target.screenshot(path=path)
        if readme and os.environ.get("UPDATE_SCREENSHOTS") == "1":
            shutil.copyfile(path, ROOT / readme)
        return path

    return save
