"""The Colab path, without Colab: the setup cell of every released notebook, run the way Colab
runs it (a `google.colab` module present, the course package not installed yet), installs the
course from the repository configured in pyproject.toml and says which device the lesson uses;
run anywhere else it installs nothing; and that install leaves Colab's own packages as they are.
(Colab and the GPU are faked by conftest.py; test_release checks the badges' addresses;
tests/colab/lessons.py runs every lesson in an environment with Colab's pins.)"""

import importlib.util
import re
import subprocess
import sys
import tomllib

import pytest
import torch
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from helpers.notebooks import NOTEBOOKS, ROOT, lessons, read

LESSONS = lessons()
SETTINGS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["attention-course"]
INSTALL = [sys.executable, "-m", "pip", "install", "--quiet",
           f"attention-course @ git+{SETTINGS['repository']}@{SETTINGS['branch']}"]
DEPENDENCIES = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
COLAB_PINS = ROOT / "tests" / "colab" / "constraints.txt"


def colab_versions() -> dict[str, Version]:
    """Colab's version of each package in tests/colab/constraints.txt: its pin, or the version
    its comment names where the test environment differs from Colab ("# Colab: 2.11.0")."""
    versions = {}
    for line in COLAB_PINS.read_text().splitlines():
        match = re.match(r"([\w.-]+)==(\S+)\s*(?:#\s*Colab:\s*(\d\S*))?", line)
        if match:
            name, pinned, colab = match.groups()
            versions[canonicalize_name(name)] = Version(colab or pinned)
    return versions


@pytest.mark.parametrize("requirement", DEPENDENCIES)
def test_installing_the_course_on_colab_upgrades_none_of_colabs_packages(requirement):
    """The setup cell's pip install keeps every installed version that satisfies the course's
    ranges: Colab's ipywidgets 7.7.1 (whose widgets Colab renders), torch and numpy stay."""
    requirement = Requirement(requirement)
    colab = colab_versions()[canonicalize_name(requirement.name)]
    assert requirement.specifier.contains(colab), f"Colab has {requirement.name} {colab}"


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


@pytest.fixture
def course_not_installed(monkeypatch):
    """The course package looks absent, as on a fresh Colab runtime."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None:
                        None if name == "attention_course" else find_spec(name, package))


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
