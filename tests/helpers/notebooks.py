"""Reading, editing and running the lesson notebooks in tests."""

import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from queue import Empty

import nbformat
from nbclient import NotebookClient

from attention_course.lessons import ids

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS, NOTEBOOKS = ROOT / "solutions", ROOT / "notebooks"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
# The lessons written in the exercise format of notebooks/test_hints.py (staged hints and a
# header line; a "Predict first" question). A lesson joins the list once its notebook follows it.
LESSONS_WITH_STAGED_HINTS = ("01_embeddings", "02_scaled_dot_product", "03_masking",
                             "04_multi_head", "05_copy_task",
                             "06_rotary_positions", "07_inference_and_scale",
                             "08_flash_backward", "10_latent_attention", "09_sliding_windows")


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


def answered(lesson: str) -> nbformat.NotebookNode:
    """The released notebook with the solution notebook's answers in its practice cells."""
    nb, solution = read(NOTEBOOKS, lesson), read(SOLUTIONS, lesson)
    answers = practice_cells(solution)
    for name, index in practice_cells(nb).items():
        nb.cells[index].source = solution.cells[answers[name]].source
    return nb


class Client(NotebookClient):
    """nbclient's notebook client, looking for the kernel's messages at least once a second.

    zmq.asyncio can miss the wake-up for a message that has already arrived (pyzmq watches the
    socket's edge-triggered events); nbclient waits for a cell's reply with the whole cell
    timeout as one poll, so a missed wake-up cost a run 120 s, after which the reply was found
    where it had been all along. Polling in slices bounds that to a second.
    """

    async def async_start_new_kernel_client(self):
        client = await super().async_start_new_kernel_client()
        for channel in (client.shell_channel, client.iopub_channel):
            channel.get_msg = in_slices(channel.get_msg)
        return client


def in_slices(get_msg, every_s: float = 1.0):
    """``get_msg(timeout)`` as polls of at most ``every_s`` seconds until ``timeout``."""
    async def get_msg_in_slices(timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = every_s if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await get_msg(timeout=min(every_s, left))
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
    return get_msg_in_slices


def execute(nb, cwd: Path, allow_errors: bool = False, timeout: int = 120):
    """Run ``nb`` headless in a fresh kernel whose working directory is ``cwd``."""
    client = Client(nb, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
                    resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def errors(cell) -> list[str]:
    """The error outputs of a cell, as 'Name: message' strings."""
    return [f"{o.ename}: {o.evalue}" for o in cell.get("outputs", [])
            if o.output_type == "error"]


def start_again_if_it_dies(start: Callable) -> Callable:
    """nbval's kernel start, tried once more when the kernel dies before it answers. With many
    kernels starting at once (three workers, graders, browsers), a port jupyter_client chose
    can be taken by another process before the kernel binds it, and that kernel exits at once
    (seen once in a fresh-clone `make test`); a kernel that dies twice fails the notebook."""
    @functools.wraps(start)
    def start_kernel(*args, **kwargs):
        try:
            return start(*args, **kwargs)
        except RuntimeError as error:
            if "died" not in str(error):
                raise
            print(f"nbval: {error}; starting another kernel", file=sys.stderr)
            return start(*args, **kwargs)
    return start_kernel
