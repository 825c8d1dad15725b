"""Lesson 05's training over several seeds: steps, seconds and held-out accuracy.

Two measurements:

- notebook (what `make bench` reports): lesson 05's training cell, run in a fresh Jupyter kernel
  after every cell above it, as a student runs it, with the seed of the model and of the data
  set to 0, 1, 2, ...; the cell's wall time as the kernel reports it (from the cell's input to
  its reply, so first-use costs inside the cell count), the steps until the early stop, and
  greedy sequence accuracy on the graded check's 1000 held-out sequences;
- package: the same configuration trained by ``attention_course.training.train`` in this
  process with the course's block; steps, seconds, greedy accuracy on 2000 held-out sequences.

Run: .venv/bin/python benchmarks/copy_task.py [--seeds 5] [--reverse] [--device cpu|cuda]
"""

import argparse
import copy
import json
import statistics
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import nbformat
import torch
from nbclient import NotebookClient

from attention_course.data import CopyTask
from attention_course.model import DecoderBlock, DecoderOnlyTransformer
from attention_course.training import TrainConfig, copy_task_loss, evaluate, train

ROOT = Path(__file__).resolve().parents[1]
LESSON = "05_copy_task"
TRAINING_CELL = "train-code"  # the id of the lesson's training cell
HELD_OUT_SEED = 2024  # the graded check's held-out sequences; never used for training
MEASURE = f"""
import json
from attention_course.training import evaluate
print(json.dumps({{"steps": history.steps, "train_seconds": history.seconds,
                  "accuracy": evaluate(model, task, 1000, seed={HELD_OUT_SEED}, device=device)}}))
"""


# ---------------------------------------------------------------- the notebook's training cell

def training_notebook(seed: int) -> tuple[nbformat.NotebookNode, int]:
    """Lesson 05's cells up to its training cell, that cell seeded with ``seed``, then a cell
    that prints what the run did; and the index of the training cell."""
    notebook = nbformat.read(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    index = next(i for i, cell in enumerate(notebook.cells) if cell.get("id") == TRAINING_CELL)
    notebook.cells = copy.deepcopy(notebook.cells[:index + 1])
    cell = notebook.cells[index]
    seeds = {"torch.manual_seed(0)": f"torch.manual_seed({seed})",
             "train(model, task, copy_task_loss, step=train_step)":
                 f"train(model, task, copy_task_loss, TrainConfig(seed={seed}), step=train_step)"}
    for unseeded, seeded in seeds.items():
        if cell.source.count(unseeded) != 1:
            raise ValueError(f"lesson 05's training cell changed; cannot seed it:\n{cell.source}")
        cell.source = cell.source.replace(unseeded, seeded)
    notebook.cells.append(nbformat.v4.new_code_cell(MEASURE))
    return notebook, index


def cell_seconds(cell) -> float:
    """Wall time of an executed cell, from its input reaching the kernel to the kernel's reply."""
    timing = cell.metadata["execution"]
    start, end = (datetime.fromisoformat(timing[key].replace("Z", "+00:00"))
                  for key in ("iopub.execute_input", "shell.execute_reply"))
    return (end - start).total_seconds()


def notebook_run(seed: int, timeout: int = 300) -> dict:
    notebook, index = training_notebook(seed)
    NotebookClient(notebook, timeout=timeout, kernel_name="python3", record_timing=True,
                   resources={"metadata": {"path": str(ROOT / "notebooks" / LESSON)}}).execute()
    printed = "".join(o.get("text", "") for o in notebook.cells[-1].outputs)
    measured = json.loads(printed.strip().splitlines()[-1])
    return {"seed": seed, "steps": measured["steps"],
            "seconds": cell_seconds(notebook.cells[index]),
            "train_seconds": measured["train_seconds"], "accuracy": measured["accuracy"]}


# ---------------------------------------------------------------- the package, in this process

def package_run(seed: int, task: CopyTask, device: str, config: TrainConfig | None = None) -> dict:
    torch.manual_seed(seed)
    model = DecoderOnlyTransformer(task.n_tokens, task.context_len, block=DecoderBlock).to(device)
    config = replace(config or TrainConfig(), seed=seed)
    history = train(model, task, copy_task_loss, config, device=device, progress=False)
    accuracy = evaluate(model, task, 2000, seed=HELD_OUT_SEED, device=device)
    return {"seed": seed, "steps": history.steps, "seconds": history.seconds,
            "accuracy": accuracy}


def summary(runs: list[dict]) -> dict:
    """Median and range of steps, seconds and accuracy over the runs."""
    return {key: {"median": statistics.median(r[key] for r in runs),
                  "min": min(r[key] for r in runs), "max": max(r[key] for r in runs)}
            for key in ("steps", "seconds", "accuracy")}


def measure(seeds: int = 5, reverse: bool = False, device: str = "cpu",
            config: TrainConfig | None = None, notebook: bool = True) -> dict:
    """The notebook's training cell (``runs``, ``summary``) and the package's (``package``)."""
    task = CopyTask(seq_len=10, vocab_size=10, reverse=reverse)
    package = [package_run(seed, task, device, config) for seed in range(seeds)]
    result = {"task": "reverse" if reverse else "copy", "device": device,
              "package": {"runs": package, "summary": summary(package)}}
    if notebook and not reverse:
        runs = [notebook_run(seed) for seed in range(seeds)]
        result |= {"measured": "lesson 05's training cell in a fresh kernel",
                   "runs": runs, "summary": summary(runs)}
    else:
        result |= {"measured": "the package's train", "runs": package,
                   "summary": summary(package)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--reverse", action="store_true")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--package-only", action="store_true",
                        help="skip the notebook (no Jupyter kernel)")
    args = parser.parse_args()
    result = measure(args.seeds, args.reverse, args.device, notebook=not args.package_only)
    for name, part in (("package", result["package"]), ("notebook cell", result)):
        if name == "notebook cell" and result["runs"] is result["package"]["runs"]:
            continue
        print(f"{name}:")
        for r in part["runs"]:
            print(f"  seed {r['seed']}: {r['steps']:4d} steps {r['seconds']:6.2f} s "
                  f"held-out accuracy {r['accuracy']:.4f}")
        for key, stats in part["summary"].items():
            print(f"  {key:>9}: median {stats['median']:.4g} "
                  f"range {stats['min']:.4g}-{stats['max']:.4g}")


if __name__ == "__main__":
    main()
