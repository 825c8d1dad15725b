"""The repository's promises: pinned versions, the working copy, CI, lesson docstrings."""

import importlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import tomllib
from local_server import free_port

ROOT = Path(__file__).resolve().parents[1]
LESSON_MODULES = {
    "embeddings": "01_embeddings", "attention": "02_scaled_dot_product", "masks": "03_masking",
    "multihead": "04_multi_head", "model": "05_copy_task", "data": "05_copy_task",
    "training": "05_copy_task",
}


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


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "make test" in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("module, lesson", LESSON_MODULES.items())
def test_each_lesson_module_names_its_lesson(module, lesson):
    doc = importlib.import_module(f"attention_course.{module}").__doc__
    assert f"Lesson: {lesson}" in doc


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
def test_make_lab_serves_the_working_copy(tmp_path):
    notebooks, work, port = tmp_path / "notebooks", tmp_path / "work", free_port()
    notebooks.mkdir()
    (notebooks / "lesson.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, '
                                            '"nbformat_minor": 5}')
    lab = subprocess.Popen(
        ["make", "-C", str(ROOT), "lab", f"NOTEBOOKS={notebooks}", f"WORK={work}",
         f"PORT={port}", "BROWSER=true"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        url = wait_for_url(lab, port)
        listing = fetch_json(url.replace("/lab?", "/api/contents?"))
        assert [item["name"] for item in listing["content"]] == ["lesson.ipynb"]
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        lab.wait(timeout=30)


def wait_for_url(process: subprocess.Popen, port: int, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    for line in process.stdout:
        match = re.search(rf"http://127\.0\.0\.1:{port}/lab\?token=\w+", line)
        if match:
            return match.group(0)
        if time.monotonic() > deadline:
            break
    raise AssertionError("make lab did not print the JupyterLab address")


def fetch_json(url: str, attempts: int = 30):
    for _ in range(attempts):
        try:
            return json.load(urllib.request.urlopen(url, timeout=10))
        except OSError:  # the server prints its address just before it listens
            time.sleep(1)
    raise AssertionError(f"JupyterLab did not answer at {url}")
