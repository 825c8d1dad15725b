"""Every lesson under Colab's published versions: tests/colab/lessons.py, run in the
Colab-pinned environment that `make colab-env` builds (`make test` builds it first)."""

import os
import subprocess
from pathlib import Path

import pytest

from helpers.notebooks import ROOT

COLAB_PYTHON = Path(os.environ.get("COLAB_PYTHON", ROOT / ".venv-colab" / "bin" / "python"))


@pytest.mark.slow
@pytest.mark.timeout(600)  # 81 s measured on 2 cores, every lesson executed one at a time
def test_every_lesson_runs_under_colabs_pins():
    assert COLAB_PYTHON.exists(), f"no Colab-pinned environment at {COLAB_PYTHON}: run " \
                                  f"`make colab-env` (`make test` does)"
    # (that environment has no pytest-timeout: pyproject.toml's `timeout` is unknown there)
    done = subprocess.run([str(COLAB_PYTHON), "-m", "pytest", "-o", "addopts=", "--noconftest",
                           "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning",
                           "-W", "ignore::pytest.PytestConfigWarning", "-q",
                           "tests/colab/lessons.py"], cwd=ROOT, capture_output=True, text=True,
                          env=os.environ | {"COLAB_LESSON_WORKERS": "1"})
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
