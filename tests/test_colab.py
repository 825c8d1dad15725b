"""The Colab path, without Colab: the setup cell of every released notebook, run the way Colab
runs it (a `google.colab` module present, the course package not installed yet), installs the
course from the repository configured in pyproject.toml and says which device the lesson uses;
run anywhere else it installs nothing. (test_release checks the badges' addresses.)"""

import importlib.util
import subprocess
import sys
import types
from importlib.machinery import ModuleSpec

import pytest
import tomllib
import torch
from notebook_tools import NOTEBOOKS, ROOT, lessons, read

LESSONS = lessons()
SETTINGS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["attention-course"]
INSTALL = [sys.executable, "-m", "pip", "install", "--quiet",
           f"attention-course @ git+{SETTINGS['repository']}@{SETTINGS['branch']}"]


def run_setup_cell(lesson: str, capsys) -> tuple[torch.device, str]:
    """Execute the first code cell of the student notebook; return its device and output."""
    source = next(c.source for c in read(NOTEBOOKS, lesson).cells if c.cell_type == "code")
    namespace = {"__name__": "__main__"}
    exec(compile(source, f"<setup cell of {lesson}>", "exec"), namespace)
    return namespace["device"], capsys.readouterr().out


@pytest.fixture
def installs(monkeypatch) -> list[tuple[list[str], dict]]:
    """Every command the cell hands to subprocess.run (none is run)."""
    commands = []

    def run(command, **kwargs):
        commands.append((command, kwargs))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(subprocess, "run", run)
    return commands


def stand_in(name: str) -> types.ModuleType:
    module = types.ModuleType(name, "Stand-in for Google Colab.")
    module.__spec__ = ModuleSpec(name, loader=None, is_package=True)
    return module


@pytest.fixture
def colab(monkeypatch):
    """A `google.colab` module, as every Colab runtime has."""
    for name in ("google", "google.colab"):
        monkeypatch.setitem(sys.modules, name, stand_in(name))


@pytest.fixture
def not_colab(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)


@pytest.fixture
def course_not_installed(monkeypatch):
    """The course package looks absent, as on a fresh Colab runtime."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None:
                        None if name == "attention_course" else find_spec(name, package))


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


@pytest.mark.parametrize("lesson", LESSONS)
@pytest.mark.usefixtures("colab", "course_not_installed", "gpu")
def test_on_colab_it_installs_the_course_and_uses_the_gpu(lesson, installs, capsys):
    device, out = run_setup_cell(lesson, capsys)
    assert installs == [(INSTALL, {"check": True})]
    assert device == torch.device("cuda")
    assert out == "Using the GPU: Tesla T4.\n"


@pytest.mark.parametrize("lesson", LESSONS)
@pytest.mark.usefixtures("colab", "course_not_installed", "no_gpu")
def test_on_colab_without_a_gpu_it_says_how_to_get_one(lesson, installs, capsys):
    device, out = run_setup_cell(lesson, capsys)
    assert installs == [(INSTALL, {"check": True})]
    assert device == torch.device("cpu")
    assert "No GPU found" in out and "Runtime > Change runtime type" in out


@pytest.mark.parametrize("lesson", LESSONS)
@pytest.mark.usefixtures("colab", "no_gpu")
def test_on_colab_with_the_course_installed_it_installs_nothing_again(lesson, installs, capsys):
    run_setup_cell(lesson, capsys)
    assert installs == []


@pytest.mark.parametrize("lesson", LESSONS)
@pytest.mark.usefixtures("not_colab", "course_not_installed", "no_gpu")
def test_elsewhere_it_installs_nothing(lesson, installs, capsys):
    device, out = run_setup_cell(lesson, capsys)
    assert installs == []
    assert device == torch.device("cpu")
    assert "No GPU found" in out and "Runtime" not in out
