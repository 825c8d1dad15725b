"""Fixtures for the Gradescope autograder's tests: the zip of lesson 01, built once; the
unprivileged user; a Python environment that user may run; and ``autograde``, which runs the
zip's own run_autograder on files laid out as Gradescope lays them out."""

import json
import os
import pwd
import shutil
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest

from grader.gradescope.build import build
from grader.gradescope.container import run_limited
from grader.gradescope.settings import Settings

LESSON = "01_embeddings"
USER = "gradescope-student"


@pytest.fixture(scope="session")
def autograder_zip(tmp_path_factory) -> Path:
    return build(Settings(LESSON), tmp_path_factory.mktemp("zip"), USER)


@pytest.fixture(scope="session")
def student_user() -> str:
    if os.geteuid() != 0:
        pytest.skip("running student code as another user needs root, as on Gradescope")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", USER], check=True)
    return USER


@pytest.fixture(scope="session")
def python_for_all(student_user):
    """An interpreter of this environment that the unprivileged user may run: this one when
    every folder above it is open to all, else a venv of the system's Python of the same
    version that reads this environment's packages (an interpreter under /root, say)."""
    if _open_to_all(Path(sys.executable).resolve()):
        yield sys.executable
        return
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = shutil.which(version, path="/usr/bin:/usr/local/bin")
    if system is None or not _open_to_all(Path(system).resolve()):
        pytest.skip(f"no {version} that {student_user} may run")
    folder = Path("/tmp") / f"gradescope-python-{uuid.uuid4().hex[:8]}"
    subprocess.run([system, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next(p for p in sys.path if p.endswith("site-packages"))
    (folder / "lib" / version / "site-packages" / "environment.pth").write_text(
        f"import site; site.addsitedir({site!r})\n")
    subprocess.run(["chmod", "-R", "a+rX", str(folder)], check=True)
    yield str(folder / "bin" / "python")
    shutil.rmtree(folder)


def _open_to_all(path: Path) -> bool:
    return all(os.stat(p).st_mode & 0o005 == 0o005 for p in [path, *path.parents])


# Gradescope's /autograder for these tests: where any user may reach it (a folder under pytest's
# own temporary folder, root's alone, would keep the student's process out by itself)
FAKE_ROOT = Path("/tmp") / f"gradescope-autograder-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def autograde(autograder_zip, python_for_all, student_user):
    """``autograde(files)``: Gradescope's /autograder at FAKE_ROOT, unzipped as anyone may read
    it, and the zip's run_autograder run there as root under 768 MB on one core; returns
    (results, Ran)."""
    def run(files: dict[str, bytes], sandbox: str = "user"):
        root = FAKE_ROOT
        shutil.rmtree(root, ignore_errors=True)
        zipfile.ZipFile(autograder_zip).extractall(root / "source")
        for name, data in files.items():
            (root / "submission" / name).parent.mkdir(parents=True, exist_ok=True)
            (root / "submission" / name).write_bytes(data)
        (root / "results").mkdir(mode=0o777)  # the worst Gradescope could leave
        (root / "results").chmod(0o777)
        env = {"PATH": "/usr/bin:/bin", "ATTENTION_GRADESCOPE_ROOT": str(root),
               "ATTENTION_GRADESCOPE_PYTHON": python_for_all,
               "ATTENTION_GRADESCOPE_STAGE": f"/tmp/gradescope-stage-{uuid.uuid4().hex[:8]}",
               "ATTENTION_GRADESCOPE_SANDBOX": sandbox, "ATTENTION_GRADESCOPE_USER": student_user,
               "OMP_NUM_THREADS": "1"}
        ran = run_limited(["bash", str(root / "source" / "run_autograder")], env, cwd=root)
        assert ran.completed.returncode == 0, ran.completed.stderr
        return json.loads((root / "results" / "results.json").read_text()), ran
    yield run
    shutil.rmtree(FAKE_ROOT, ignore_errors=True)
