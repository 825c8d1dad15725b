"""`make bench` section: seconds per submission of the Gradescope autograder under Gradescope's
limits (768 MB, half a CPU: here a memory cgroup and one core, ``grader.gradescope.container``).

Each submission is one run of the zip's ``run_autograder`` in a fresh fake ``/autograder``, as
Gradescope runs it: the interpreter's start, the checks' imports, the warm runner's start and the
notebook, with the student's process in bubblewrap where it can run ("bubblewrap") and as an
unprivileged user ("user", only as root). Demo notebooks of lesson 01: the correct answer.
"""

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the grader
from grader.demo import _dumps, practice_names, student_notebook  # noqa: E402
from grader.gradescope.build import build  # noqa: E402
from grader.gradescope.container import run_limited  # noqa: E402
from grader.gradescope.settings import Settings  # noqa: E402

LESSON, USER = "01_embeddings", "gradescope-student"


def measure(runs: int = 3) -> dict:
    work = Path(tempfile.mkdtemp(dir="/tmp"))
    work.chmod(0o755)
    try:
        archive = build(Settings(LESSON), work / "zip", USER)
        notebook = _dumps(student_notebook(LESSON, dict.fromkeys(practice_names(LESSON))))
        modes = ["bubblewrap"] + (["user"] if _user_ready() else [])
        rows = [_run(archive, notebook, work, mode) for mode in modes for _ in range(runs)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"lesson": LESSON, "limits": "768 MB memory cgroup, one core", "runs": rows,
            "seconds": {mode: min(r["seconds"] for r in rows if r["mode"] == mode)
                        for mode in {r["mode"] for r in rows}}}


def _user_ready() -> bool:
    """Root, with the unprivileged user (made if missing) and an interpreter it may run."""
    if os.geteuid() != 0 or not all(os.stat(p).st_mode & 0o005 == 0o005 for p in
                                    Path(sys.executable).resolve().parents):
        return False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", USER], check=True)
    return True


def _run(archive: Path, notebook: bytes, work: Path, mode: str) -> dict:
    root = work / "autograder"
    shutil.rmtree(root, ignore_errors=True)
    zipfile.ZipFile(archive).extractall(root / "source")
    (root / "submission").mkdir()
    (root / "submission" / f"{LESSON}.ipynb").write_bytes(notebook)
    env = {"PATH": "/usr/bin:/bin", "ATTENTION_GRADESCOPE_ROOT": str(root),
           "ATTENTION_GRADESCOPE_PYTHON": sys.executable, "ATTENTION_GRADESCOPE_SANDBOX": mode,
           "ATTENTION_GRADESCOPE_STAGE": str(work / "stage"), "ATTENTION_GRADESCOPE_USER": USER,
           "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    ran = run_limited(["bash", str(root / "source" / "run_autograder")], env, cwd=root)
    seconds = time.perf_counter() - started
    results = json.loads((root / "results" / "results.json").read_text())
    return {"mode": mode, "seconds": round(seconds, 2), "score": results["score"],
            "peak_bytes": ran.peak_bytes, "exit": ran.completed.returncode}


def report(results: dict) -> str:
    return "gradescope: " + ", ".join(f"{mode} {seconds:.1f} s per submission" for mode, seconds
                                      in sorted(results["seconds"].items())) + \
        f" ({results['limits']})"


if __name__ == "__main__":
    outcome = measure(runs=1)
    print(json.dumps(outcome, indent=1))
    print(report(outcome))
