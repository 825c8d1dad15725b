"""What ``run_autograder`` does for one submission: find the notebook, grade it, write
results.json (``python -m grader gradescope run``).

The student's process runs in bubblewrap where it can start (``sandbox.bwrap``), else as the
unprivileged user (``unprivileged``), and never before the autograder's files are shown to be
out of its reach. Whatever happens, results.json is written, whole (``workspace.atomic_write``),
and says what happened: Gradescope shows "The autograder failed to execute correctly" for a
missing or malformed file. What is printed (the summary, the flags) goes to Gradescope's
stdout, which only instructors see.
"""

import json
import os
import shutil
import sys
import time
import traceback

from ..course import read_lesson
from ..sandbox import bwrap
from ..sandbox.client import Limits, Runner
from ..workspace import atomic_write
from . import unprivileged
from .finding import find_notebook
from .grading import grade_notebook
from .layout import Layout
from .results import results
from .settings import Settings

MODES = ("auto", "bubblewrap", "user")  # ATTENTION_GRADESCOPE_SANDBOX


def run_autograder(layout: Layout | None = None) -> int:
    """Grade the submission in ``layout`` (from the environment by default); 0 once
    results.json is written."""
    started, layout = time.monotonic(), layout or Layout.from_environment()
    os.umask(0o022)
    try:
        report = grade_submission(layout, Settings.read(layout.source), started)
    except Exception as err:  # the autograder's own failure: said in results.json, not a crash
        traceback.print_exc()
        report = {"score": 0.0, "execution_time": max(1, round(time.monotonic() - started)),
                  "output": f"The autograder could not grade this submission "
                            f"({type(err).__name__}); your instructor can see why.",
                  "tests": [], "extra_data": {"outcome": "autograder error"}}
    layout.results.mkdir(parents=True, exist_ok=True)
    atomic_write(layout.results_file, (json.dumps(report, indent=1) + "\n").encode())
    print(f"score {report['score']:g}: {report['output']}")
    for flag in report["extra_data"].get("flags", []):
        print(f"flag: {flag}")
    return 0


def grade_submission(layout: Layout, settings: Settings, started: float) -> dict:
    lesson = read_lesson(settings.lesson)
    found = find_notebook(layout.submission, settings.lesson)
    graded = None
    if found.data is not None:
        runner = start_runner(layout, Limits(cell_timeout=settings.cell_timeout,
                                             budget=settings.budget))
        try:
            graded = grade_notebook(found.data, found.name, lesson, runner)
        finally:
            runner.close()
            shutil.rmtree(layout.stage, ignore_errors=True)
    return results(found, graded, settings, lesson.points, time.monotonic() - started)


def start_runner(layout: Layout, limits: Limits) -> Runner:
    """A runner in bubblewrap, or as the unprivileged user once the secrets are shown out of
    its reach; NotConfined (an autograder error) when neither can be had."""
    mode = os.environ.get("ATTENTION_GRADESCOPE_SANDBOX", "auto")
    if mode not in MODES:
        raise ValueError(f"ATTENTION_GRADESCOPE_SANDBOX={mode!r}: expected one of {MODES}")
    unprivileged.prepare_stage(layout.stage)
    if mode != "user":
        try:
            bwrap.check(limits.disk)
            return Runner(layout.stage / "worker-0", limits, sandboxed=True)
        except bwrap.SandboxUnavailable as err:
            if mode == "bubblewrap":
                raise
            print(f"bubblewrap cannot run here ({err}); student code runs as "
                  f"{layout.user!r}", file=sys.stderr)
    entry = unprivileged.account(layout.user)
    unprivileged.protect(layout.secrets)
    if exposed := unprivileged.exposed(entry, (*layout.secrets, layout.results_file)):
        raise unprivileged.NotConfined(f"{layout.user} can read {', '.join(exposed)}")
    return unprivileged.UnprivilegedRunner(layout.stage, limits, entry)
