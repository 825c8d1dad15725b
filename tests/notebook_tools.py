"""Reading, editing and running the lesson notebooks in tests."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

from attention_course.lessons import ids

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS, NOTEBOOKS = ROOT / "solutions", ROOT / "notebooks"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def lessons() -> list[str]:
    return ids()


def read(folder: Path, lesson: str) -> nbformat.NotebookNode:
    return nbformat.read(folder / lesson / f"{lesson}.ipynb", as_version=4)


def grading(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def practice_cells(nb) -> dict[str, int]:
    """Check name (e.g. "softmax") -> index of the practice cell its check cell follows."""
    found, last_practice = {}, None
    for i, cell in enumerate(nb.cells):
        if grading(cell).get("solution"):
            last_practice = i
        elif grading(cell).get("grade"):
            name = grading(cell)["grade_id"].removeprefix("check_")
            found[name] = last_practice
    return found


def check_cells(nb) -> dict[str, int]:
    return {grading(c)["grade_id"].removeprefix("check_"): i
            for i, c in enumerate(nb.cells) if grading(c).get("grade")}


def execute(nb, cwd: Path, allow_errors: bool = False, timeout: int = 120):
    """Run ``nb`` headless in a fresh kernel whose working directory is ``cwd``."""
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            allow_errors=allow_errors, resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def errors(cell) -> list[str]:
    """The error outputs of a cell, as 'Name: message' strings."""
    return [f"{o.ename}: {o.evalue}" for o in cell.get("outputs", [])
            if o.output_type == "error"]
