"""How long each lesson takes to execute under nbval, against the floor of the same machine.

The floor is a notebook that only starts a kernel and imports torch and matplotlib: no lesson
can be faster. Each notebook runs in a fresh pytest + nbval process; medians of the repeats.

Run: .venv/bin/python benchmarks/notebooks.py [--repeats N]
"""

import argparse
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
ONE_TORCH_THREAD = os.environ | {"OMP_NUM_THREADS": "1"}  # as `make test` runs every kernel


def nbval_seconds(notebook: Path, repeats: int) -> float:
    """Median wall time of `pytest --nbval-lax notebook` (the way `make test` runs it)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--nbval-lax", "--nbval-current-env", str(notebook)],
                       cwd=ROOT, check=True, capture_output=True, env=ONE_TORCH_THREAD)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def floor_notebook(folder: Path) -> Path:
    path = folder / "floor.ipynb"
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nimport torch")]
    nbformat.write(notebook, path)
    return path


def measure(repeats: int = 3, limit: int | None = None) -> dict:
    """The floor and every lesson (or the first ``limit`` lessons)."""
    lessons = [ROOT / "solutions" / lesson / f"{lesson}.ipynb" for lesson in ids()[:limit]]
    with tempfile.TemporaryDirectory() as scratch:
        floor = nbval_seconds(floor_notebook(Path(scratch)), repeats)
    rows = [{"lesson": p.stem, "seconds": nbval_seconds(p, repeats)} for p in lessons]
    for row in rows:
        row["ratio_to_floor"] = row["seconds"] / floor
    return {"floor_seconds": floor, "lessons": rows,
            "total_seconds": sum(row["seconds"] for row in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    result = measure(parser.parse_args().repeats)
    print(f"{'floor (kernel + imports)':28} {result['floor_seconds']:6.1f} s")
    for row in result["lessons"]:
        print(f"{row['lesson']:28} {row['seconds']:6.1f} s  {row['ratio_to_floor']:4.1f}x floor")
    print(f"{'all lessons':28} {result['total_seconds']:6.1f} s")


if __name__ == "__main__":
    main()
