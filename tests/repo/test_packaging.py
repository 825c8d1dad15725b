"""The repository's promises: pinned versions, what each make target installs (the student's
runtime alone for `make lab`, the right torch build), the working copy and the student's
JupyterLab, CI, lesson docstrings."""

import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import signal
import subprocess
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from helpers.notebooks import ROOT
from helpers.servers import free_port


def pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pairs = (line.split("==") for line in lines if "==" in line and not line.startswith("#"))
    return {name.lower().replace("_", "-"): version for name, version in pairs}


def test_torch_is_pinned_to_the_tested_cpu_build():
    assert pins()["torch"] == "2.13.0"


def test_every_declared_dependency_is_pinned():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + [
        d for extra in project["optional-dependencies"].values() for d in extra]
    names = {re.split(r"[<>=\[ ]", d)[0].lower() for d in declared} - {"attention-course"}
    assert names <= pins().keys(), f"not pinned: {sorted(names - pins().keys())}"


# --- What `make lab` installs -------------------------------------------------------------------

# Tools no student needs: tests, lint, the browser driver, grading.
NOT_FOR_STUDENTS = {"pytest", "nbval", "ruff", "playwright", "nbgrader"}


def closure(extra: str) -> set[str]:
    """Every distribution the course with ``extra`` brings in: its requirements from
    pyproject.toml, theirs from the metadata of this environment (which has every extra
    installed), extras and environment markers included."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]

    def course(extra: str) -> list[str]:
        own = project["dependencies"] + extras[extra]
        return [dep for req in own for dep in (
            course(Requirement(req).extras.pop()) if req.startswith("attention-course[")
            else [req])]

    found, todo = set(), [Requirement(req) for req in course(extra)]
    while todo:
        req = todo.pop()
        wanted = {canonicalize_name(e) for e in req.extras}
        key = (canonicalize_name(req.name), frozenset(wanted))
        if key in found or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        found.add(key)
        if canonicalize_name(req.name) in excluded():
            continue  # not installed, on purpose
        for dependency in importlib.metadata.requires(req.name) or []:
            dep = Requirement(dependency)
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in wanted | {""}):
                todo.append(Requirement(str(dep).split(";")[0]))
    return {name for name, _ in found}


def test_make_lab_installs_the_runtime_and_no_test_lint_browser_or_grading_tool():
    lab = closure("lab")
    assert {"torch", "jupyterlab", "ipywidgets", "matplotlib", "tqdm", "ipykernel"} <= lab
    assert lab & NOT_FOR_STUDENTS == set()


def test_the_instructor_and_developer_extras_have_their_tools():
    assert "nbgrader" in closure("instructor")
    assert NOT_FOR_STUDENTS <= closure("dev")


def excluded() -> list[str]:
    """What excludes.txt leaves out of the course's environment."""
    names = (line.split("#")[0].strip() for line in
             (ROOT / "excludes.txt").read_text().splitlines())
    return [canonicalize_name(name) for name in names if name]


def test_the_environment_leaves_out_what_excludes_txt_names():
    """jsonschema, which every notebook read goes through, then imports in a tenth of the time;
    notebooks still validate."""
    assert excluded() == ["rfc3987-syntax"]
    for name in excluded():
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            importlib.metadata.version(name)
    assert importlib.util.find_spec("rfc3987_syntax") is None
    nbformat.validate(nbformat.read(ROOT / "solutions" / "01_embeddings" /
                                    "01_embeddings.ipynb", as_version=4))


def dry_run(target: str, tmp_path: Path, uname: str = "Linux", gpus: int = 0,
            **variables: str) -> str:
    """The commands `make -n <target>` would run for a fresh environment on a machine whose
    `uname -s` and `nvidia-smi -L` are stand-ins, one per line."""
    stand_ins = tmp_path / "bin"
    stand_ins.mkdir(exist_ok=True)
    gpu_lines = "".join(f"echo 'GPU {i}: NVIDIA H100 (UUID: GPU-{i})'\n" for i in range(gpus))
    scripts = {"uname": f"echo {uname}\n",
               "nvidia-smi": gpu_lines or "echo 'No devices were found'\nexit 6\n"}
    for name, body in scripts.items():
        (stand_ins / name).write_text(f"#!/bin/sh\n{body}")
        (stand_ins / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_INDEX", "MAKEFLAGS")}
    env["PATH"] = f"{stand_ins}{os.pathsep}{env['PATH']}"
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "-C", str(ROOT), target,
         f"VENV={tmp_path / 'venv'}", f"WHEELS={tmp_path / 'wheels'}"]
        + [f"{name}={value}" for name, value in variables.items()],
        capture_output=True, text=True, env=env, check=True)
    return re.sub(r"\\\n\s*", " ", result.stdout)  # a recipe's continued lines joined


def torch_download(commands: str) -> str | None:
    """The index the torch wheel is downloaded from, None if it is not downloaded separately."""
    match = re.search(r"pip download .*--index-url (\S+) torch==2\.13\.0", commands)
    return match and match.group(1)


def test_linux_without_a_gpu_gets_the_cpu_build_of_the_pinned_torch(tmp_path):
    commands = dry_run("install-lab", tmp_path)
    assert torch_download(commands) == "https://download.pytorch.org/whl/cpu"
    assert "torch 2.13.0: the CPU build from https://download.pytorch.org/whl/cpu" in commands
    # installed with --no-deps from the downloaded wheel, before the course's own install
    assert commands.index("torch==2.13.0") < commands.index("-e '.[lab]'")


def test_the_cpu_index_can_be_overridden(tmp_path):
    mirror = "https://mirror.example/torch-cpu"
    assert torch_download(dry_run("install-lab", tmp_path, TORCH_INDEX=mirror)) == mirror


def test_linux_with_an_nvidia_gpu_gets_the_cuda_build_from_pypi(tmp_path):
    commands = dry_run("install-lab", tmp_path, gpus=1)
    assert torch_download(commands) is None
    assert "PyPI's default build for CUDA (nvidia-smi lists an NVIDIA GPU)" in commands


def test_macos_keeps_the_default_wheels(tmp_path):
    commands = dry_run("install-lab", tmp_path, uname="Darwin")
    assert torch_download(commands) is None
    assert "torch 2.13.0: PyPI's default build" in commands and "CUDA" not in commands


def test_make_lab_installs_only_the_lab_extra_and_shows_download_progress(tmp_path):
    commands = re.split(r"\s*(?:&&|\|\||;|\n)\s*", dry_run("install-lab", tmp_path))
    course = [c for c in commands if "pip install" in c and "-e '.[" in c]
    assert len(course) == 1 and "-e '.[lab]'" in course[0]
    assert "uv pip install" in course[0]
    assert "--quiet" not in course[0] and "--no-progress" not in course[0]  # uv's progress bars
    (download,) = [c for c in commands if "pip download" in c and "--index-url" in c]
    assert "--progress-bar on" in download and "--quiet" not in download


def test_environment_yml_installs_what_make_lab_installs(tmp_path):
    """conda (and Binder) users read environment.yml: the extra `make lab` installs, at the same
    pins, on a Python the course supports; none of the instructor's or the developers' tools."""
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    (python,) = [d for d in environment["dependencies"] if str(d).startswith("python=")]
    (pip,) = [d["pip"] for d in environment["dependencies"] if isinstance(d, dict)]
    commands = re.split(r"\s*(?:&&|\|\||;|\n)\s*", dry_run("install-lab", tmp_path))
    (course,) = [c for c in commands if "pip install" in c and "-e '.[" in c]
    extra = re.search(r"-e '\.\[(\w+)\]'", course).group(1)
    assert [line for line in pip if line.startswith("-e ")] == [f"-e .[{extra}]"]
    assert "-c constraints.txt" in pip and f"torch=={pins()['torch']}" in pip
    floor = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert Version(python.removeprefix("python=")) in SpecifierSet(floor)
    assert not NOT_FOR_STUDENTS & {re.split(r"[<>=\[ ]", line)[0] for line in pip}


def test_make_lab_compiles_what_the_grading_sandbox_imports_after_installing_it(tmp_path):
    """The sandbox reads the environment read-only: what its runner imports
    (grader/sandbox/runner.py) is compiled to bytecode at install, by importing it with bytecode
    writing on."""
    commands = re.split(r"\s*(?:&&|\|\||;|\n)\s*", dry_run("install-lab", tmp_path))
    (install,) = [c for c in commands if "-e '.[lab]'" in c]
    (compile_,) = [c for c in commands if c.startswith("PYTHONDONTWRITEBYTECODE= ")]
    imported = set(re.fullmatch(r".*/python -c 'import (.+)'", compile_).group(1).split(", "))
    assert {"torch", "IPython", "matplotlib.pyplot", "attention_course.checks"} <= imported
    assert commands.index(install) < commands.index(compile_)


def test_the_readme_is_short_and_the_docs_are_by_audience():
    """The README says what the course is, lists the lessons and the two commands, and points to
    docs/ (students, instructors, contributors), where the rest lives."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for page in ("docs/students.md", "docs/instructors/grading.md",
                 "docs/contributors/README.md", "docs/contributors/architecture.md"):
        assert (ROOT / page).is_file() and f"]({page})" in readme, page


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "make test" in (ROOT / "README.md").read_text()


def test_the_longest_modules_named_for_the_workers_exist(request):
    """conftest.py hands these to the workers first; a renamed module would silently not be."""
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)  # `import conftest` may find a folder's conftest.py
    longest = conftest.LONGEST

    assert all((ROOT / module).is_file() for module in longest)
    modules = list(dict.fromkeys(item.nodeid.split("::")[0] for item in request.session.items))
    assert set(modules) & set(longest) <= set(modules[:len(longest)])  # first, where collected


def make_working_copy(notebooks: Path, work: Path) -> str:
    result = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "working-copy",
         f"NOTEBOOKS={notebooks}", f"WORK={work}"],
        capture_output=True, text=True, check=True)
    return result.stdout


def test_working_copy_adds_new_lessons_and_never_overwrites_student_work(tmp_path):
    notebooks, work = tmp_path / "notebooks", tmp_path / "work"
    (notebooks / "01_embeddings").mkdir(parents=True)
    (notebooks / "01_embeddings" / "01_embeddings.ipynb").write_text("course v1")
    assert "01_embeddings.ipynb" in make_working_copy(notebooks, work)

    student_copy = work / "01_embeddings" / "01_embeddings.ipynb"
    student_copy.write_text("my answers")
    (notebooks / "01_embeddings" / "01_embeddings.ipynb").write_text("course v2")
    (notebooks / "02_scaled_dot_product").mkdir()
    (notebooks / "02_scaled_dot_product" / "02_scaled_dot_product.ipynb").write_text("new")
    output = make_working_copy(notebooks, work)

    assert student_copy.read_text() == "my answers"
    assert "02_scaled_dot_product.ipynb" in output and "01_embeddings" not in output
    assert (work / "02_scaled_dot_product" / "02_scaled_dot_product.ipynb").read_text() == "new"


@pytest.mark.slow
def test_make_lab_serves_the_working_copy_with_no_instructor_tools(tmp_path):
    """Here nbgrader is installed too (the developer's environment), as for an instructor who
    also takes the course: the student's JupyterLab still shows none of it."""
    assert importlib.util.find_spec("nbgrader"), "this test needs nbgrader installed"
    notebooks, work, port = tmp_path / "notebooks", tmp_path / "work", free_port()
    notebooks.mkdir()
    (notebooks / "lesson.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, '
                                            '"nbformat_minor": 5}')
    lab = subprocess.Popen(
        ["make", "-C", str(ROOT), "lab", f"NOTEBOOKS={notebooks}", f"WORK={work}",
         f"PORT={port}", "BROWSER=true"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    log: list[str] = []
    try:
        url = wait_for_url(lab, port, log)
        listing = fetch_json(url.replace("/lab?", "/api/contents?"))
        assert [item["name"] for item in listing["content"]] == ["lesson.ipynb"]

        page = urllib.request.urlopen(url, timeout=10).read().decode()
        config = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">'
                                      r"(.*?)</script>", page, re.S).group(1))
        installed = [extension["name"] for extension in config["federated_extensions"]]
        assert "@jupyter/nbgrader" in installed  # installed, and
        assert "@jupyter/nbgrader" in config["disabledExtensions"]  # off: no Nbgrader menu
        with pytest.raises(urllib.error.HTTPError, match="404"):  # no formgrader behind it
            urllib.request.urlopen(url.replace("/lab?", "/formgrader?"), timeout=10)
        assert not [line for line in log if "nbgrader" in line.lower()]
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        lab.wait(timeout=30)


def wait_for_url(process: subprocess.Popen, port: int, log: list[str],
                 timeout: float = 60.0) -> str:
    """The address JupyterLab prints; every line before it goes to ``log``."""
    deadline = time.monotonic() + timeout
    for line in process.stdout:
        log.append(line)
        match = re.search(rf"http://127\.0\.0\.1:{port}/lab\?token=\w+", line)
        if match:
            return match.group(0)
        if time.monotonic() > deadline:
            break
    raise AssertionError("make lab did not print the JupyterLab address:\n" + "".join(log))


def fetch_json(url: str, attempts: int = 30):
    for _ in range(attempts):
        try:
            return json.load(urllib.request.urlopen(url, timeout=10))
        except OSError:  # the server prints its address just before it listens
            time.sleep(1)
    raise AssertionError(f"JupyterLab did not answer at {url}")
