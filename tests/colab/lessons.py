"""Every lesson under Colab's runtime: in the Colab-pinned environment (ipywidgets 7.7.1 and
Colab's numpy, matplotlib, tqdm and IPython kernel, from tests/colab/constraints.txt), each
released notebook, the one Colab opens, with the solutions written into its practice cells,
executes top to bottom; every check prints ok; and its widgets are real ipywidgets 7 widgets:
every ``interact`` box holds its controls and the figure it drew, and a training progress bar
is a widget too. (The main suite runs the solution notebooks themselves under nbval, so each
notebook is executed once per environment.)

Not collected by the main suite, whose environment has ipywidgets 8 (where the browser tests
check the same widgets on the page): `make test` builds that environment (.venv-colab), and
tests/colab/test_colab_pinned.py runs this file in it:

    .venv-colab/bin/python -m pytest -o addopts= --noconftest tests/colab/lessons.py
"""

import importlib.metadata
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ipywidgets._version as widget_protocol
import nbformat
import pytest

from attention_course.lessons import ids

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from helpers.notebooks import (  # noqa: E402
    NOTEBOOKS,
    SOLUTIONS,
    Client,
    answered,
    check_cells,
    read,
)

PINS = Path(__file__).with_name("constraints.txt")
LESSONS = ids()
# A progress bar: the given training loop's (train(...), unless progress=False), or tqdm's.
PROGRESS_BAR = re.compile(r"(?<![.\w])train\((?![^)]*progress=False)|\btqdm\b")


def shows_a_progress_bar(lesson: str) -> bool:
    return any(PROGRESS_BAR.search(cell.source) for cell in read(SOLUTIONS, lesson).cells
               if cell.cell_type == "code")


WITH_PROGRESS_BARS = [lesson for lesson in LESSONS if shows_a_progress_bar(lesson)]
CELL_TIMEOUT_S = 120  # nbgrader's per-cell limit in the course
# Lessons run two at a time, each kernel on one torch thread, so both cores are used and
# neither kernel's parallel steps wait for a core the other one holds; one at a time where the
# caller already keeps the cores busy (COLAB_LESSON_WORKERS=1 from the main suite).
WORKERS = int(os.environ.get("COLAB_LESSON_WORKERS", 2))
KERNEL_ENV = os.environ | {"OMP_NUM_THREADS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
# What the kernel itself imports, printed by a cell added at the end of each notebook.
VERSIONS_CELL = """\
import importlib.metadata, json
print(json.dumps({name: importlib.metadata.version(name) for name in
                  ("ipywidgets", "numpy", "torch", "matplotlib", "tqdm", "ipykernel")}))"""


def pins() -> dict[str, str]:
    found = {}
    for line in PINS.read_text().splitlines():
        requirement = line.split("#")[0].strip()
        if "==" in requirement:
            name, version = requirement.split("==")
            found[name] = version
    return found


def installed(name: str) -> str | None:
    """The installed version without a local label (torch 2.13.0+cpu is 2.13.0), or None."""
    try:
        return importlib.metadata.version(name).split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return None


def execute(lesson: str) -> nbformat.NotebookNode:
    nb = answered(lesson)
    nb.cells.append(nbformat.v4.new_code_cell(VERSIONS_CELL))
    client = Client(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", store_widget_state=True,
                    resources={"metadata": {"path": str(NOTEBOOKS / lesson)}})
    client.execute(env=KERNEL_ENV)
    return nb


@pytest.fixture(scope="module")
def executed() -> dict:
    """Every lesson, executed once: lesson -> its notebook, or the exception that stopped it.
    The longest (the last, which trains a model) starts first."""
    with ThreadPoolExecutor(WORKERS) as pool:
        runs = {lesson: pool.submit(execute, lesson) for lesson in reversed(LESSONS)}
    return {lesson: run.exception() or run.result() for lesson, run in runs.items()}


def ran(executed: dict, lesson: str) -> nbformat.NotebookNode:
    result = executed[lesson]
    if isinstance(result, BaseException):
        pytest.fail(f"{lesson} did not run under Colab's pins:\n{result}", pytrace=False)
    return result


def widget_models(nb) -> dict[str, dict]:
    return nb.metadata["widgets"][WIDGET_STATE]["state"]


def children(model: dict, models: dict) -> list[dict]:
    return [models[ref.removeprefix("IPY_MODEL_")] for ref in model["state"].get("children", [])]


def test_the_environment_has_colabs_pins():
    wrong = {name: (installed(name), version) for name, version in pins().items()
             if installed(name) != version}
    assert wrong == {}, f"installed vs Colab's pin: {wrong}"
    assert installed("ipywidgets") == "7.7.1"


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_runs_in_a_kernel_of_this_environment(lesson, executed):
    nb = ran(executed, lesson)
    printed = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    kernel = json.loads(printed)
    assert kernel == {name: importlib.metadata.version(name) for name in kernel}


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_check_passes_with_the_solutions(lesson, executed):
    nb = ran(executed, lesson)
    for name, index in check_cells(nb).items():
        printed = "".join(o.get("text", "") for o in nb.cells[index].outputs)
        assert printed.startswith("ok: "), f"check_{name} printed {printed!r}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_widgets_are_built_for_the_installed_ipywidgets(lesson, executed):
    """The notebook's widget models speak the protocol of this environment's ipywidgets:
    (base, controls, output) model versions 1.2.0, 1.5.0, 1.0.0 under 7; 2.0.0, 2.0.0, 1.0.0
    under 8."""
    models = widget_models(ran(executed, lesson))
    expected = {"@jupyter-widgets/base": widget_protocol.__jupyter_widgets_base_version__,
                "@jupyter-widgets/controls": widget_protocol.__jupyter_widgets_controls_version__,
                "@jupyter-widgets/output": widget_protocol.__jupyter_widgets_output_version__}
    found = {(m["model_module"], m["model_module_version"]) for m in models.values()}
    assert found, "the notebook made no widget"
    assert found <= set(expected.items()), f"{found} is not ipywidgets {installed('ipywidgets')}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_interact_shows_its_controls_and_draws_its_figure(lesson, executed):
    nb = ran(executed, lesson)
    models = widget_models(nb)
    calls = sum(cell.source.count("widgets.interact(") for cell in nb.cells)
    shown = [o.data[WIDGET_VIEW]["model_id"] for cell in nb.cells
             for o in cell.get("outputs", []) if WIDGET_VIEW in o.get("data", {})]
    boxes = [models[model_id] for model_id in shown
             if "widget-interact" in models[model_id]["state"].get("_dom_classes", [])]
    assert calls > 0 and len(boxes) == calls, f"{calls} interact calls, {len(boxes)} boxes shown"
    for box in boxes:
        parts = children(box, models)
        controls = [m for m in parts if m["model_name"] != "OutputModel"]
        outputs = [m for m in parts if m["model_name"] == "OutputModel"]
        assert controls, "an interact box without its controls"
        drawn = [o for out in outputs for o in out["state"].get("outputs", [])
                 if "image/png" in o.get("data", {})]
        assert drawn, "an interact box that drew no figure"


@pytest.mark.parametrize("lesson", WITH_PROGRESS_BARS)
def test_progress_bars_are_widgets(lesson, executed):
    models = widget_models(ran(executed, lesson))
    bars = [m for m in models.values() if m["model_name"] == "FloatProgressModel"]
    assert bars, "tqdm drew no progress widget"
