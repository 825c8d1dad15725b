"""How long each lesson takes under nbval, quiet and on a busy machine, against the floor.

The floor is a notebook that only starts a kernel and imports torch and matplotlib: no lesson
can be faster. Each notebook runs in a fresh pytest + nbval process, in a student's environment
(no thread settings: the lesson's setup cell chooses); medians of the repeats. Each lesson runs
twice side by side: on a quiet machine, and beside a competing load of two busy processes (a
browser, a video call), where it should take at most about 1.5 times as long.

Run: .venv/bin/python benchmarks/notebooks.py [--repeats N]
"""

import argparse
import contextlib
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from attention_course.lessons import ids

ROOT = Path(__file__).resolve().parents[1]
THREAD_SETTINGS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
STUDENT = {name: value for name, value in os.environ.items() if name not in THREAD_SETTINGS}


def nbval_seconds(notebook: Path) -> float:
    """Wall time of one `pytest --nbval-lax notebook`, in a student's environment."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "--nbval-lax", "--nbval-current-env", str(notebook)],
                   cwd=ROOT, check=True, capture_output=True, env=STUDENT)
    return time.perf_counter() - start


def spin() -> None:
    while True:
        pass


@contextlib.contextmanager
def busy(processes: int = 2):
    """``processes`` processes that keep a core busy each, for the length of the block."""
    load = [multiprocessing.Process(target=spin, daemon=True) for _ in range(processes)]
    for process in load:
        process.start()
    try:
        yield
    finally:
        for process in load:
            process.kill()
            process.join()


def quiet_and_busy(notebook: Path, repeats: int, load: int = 2) -> tuple[float, float]:
    """Medians of ``repeats`` runs quiet and as many beside ``load`` busy processes,
    alternating."""
    quiet, loaded = [], []
    for _ in range(repeats):
        quiet.append(nbval_seconds(notebook))
        with busy(load):
            loaded.append(nbval_seconds(notebook))
    return statistics.median(quiet), statistics.median(loaded)


def floor_notebook(folder: Path) -> Path:
    path = folder / "floor.ipynb"
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nimport torch")]
    nbformat.write(notebook, path)
    return path


def measure(repeats: int = 3, lessons: list[str] | None = None, busy_lessons: bool = True,
            load: int = 2) -> dict:
    """The floor and every lesson (or those of ``lessons``), quiet and beside ``load`` busy
    processes; without ``busy_lessons`` only the floor runs beside the load (the lessons' busy
    figures are None)."""
    paths = [ROOT / "solutions" / lesson / f"{lesson}.ipynb" for lesson in lessons or ids()]
    with tempfile.TemporaryDirectory() as scratch:
        floor, floor_busy = quiet_and_busy(floor_notebook(Path(scratch)), repeats, load)
    rows = []
    for path in paths:
        if busy_lessons:
            seconds, busy_seconds = quiet_and_busy(path, repeats, load)
        else:
            seconds = statistics.median(nbval_seconds(path) for _ in range(repeats))
            busy_seconds = None
        rows.append({"lesson": path.stem, "seconds": seconds, "ratio_to_floor": seconds / floor,
                     "busy_seconds": busy_seconds,
                     "busy_ratio": None if busy_seconds is None else busy_seconds / seconds})
    return {"floor_seconds": floor, "floor_busy_seconds": floor_busy, "load": load,
            "lessons": rows, "total_seconds": sum(row["seconds"] for row in rows)}


def report(result: dict) -> str:
    lines = [f"{'':28} {'quiet':>7} {'floor':>6} {'busy':>7} {'busy/quiet':>10}",
             f"{'floor (kernel + imports)':28} {result['floor_seconds']:6.1f}s {'':6} "
             f"{result['floor_busy_seconds']:6.1f}s"]
    lines += [f"{row['lesson']:28} {row['seconds']:6.1f}s {row['ratio_to_floor']:5.1f}x "
              + (f"{row['busy_seconds']:6.1f}s {row['busy_ratio']:9.2f}x"
                 if row["busy_seconds"] is not None else f"{'-':>7} {'-':>10}")
              for row in result["lessons"]]
    lines.append(f"{'all lessons, quiet':28} {result['total_seconds']:6.1f}s")
    load = result["load"]
    lines.append(f"busy: beside {load} process{'es' * (load != 1)} keeping a core each")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    print(report(measure(parser.parse_args().repeats)))


if __name__ == "__main__":
    main()
