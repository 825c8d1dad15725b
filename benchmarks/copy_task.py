"""Steps and seconds the copy task needs to reach >= 99% held-out sequence accuracy.

Trains lesson 05's configuration (DecoderOnlyTransformer defaults, TrainConfig defaults) from
several seeds and reports, per seed, the steps and wall time until the early stop and the greedy
sequence accuracy on 2000 held-out sequences, then the median and range.

Run: .venv/bin/python benchmarks/copy_task.py [--seeds 5] [--reverse] [--device cpu|cuda]
"""

import argparse
import statistics
from dataclasses import replace

import torch

from attention_course.data import CopyTask
from attention_course.model import DecoderOnlyTransformer
from attention_course.training import TrainConfig, evaluate, train

HELD_OUT_SEED = 2024  # never used for training or early stopping


def run(seed: int, task: CopyTask, device: str, config: TrainConfig | None = None) -> dict:
    torch.manual_seed(seed)
    model = DecoderOnlyTransformer(task.n_tokens, task.context_len).to(device)
    config = replace(config or TrainConfig(), seed=seed)
    history = train(model, task, config, device=device, progress=False)
    accuracy = evaluate(model, task, 2000, seed=HELD_OUT_SEED, device=device)
    return {"seed": seed, "steps": history.steps, "seconds": history.seconds,
            "accuracy": accuracy}


def summary(runs: list[dict]) -> dict:
    """Median and range of steps, seconds and accuracy over the runs."""
    return {key: {"median": statistics.median(r[key] for r in runs),
                  "min": min(r[key] for r in runs), "max": max(r[key] for r in runs)}
            for key in ("steps", "seconds", "accuracy")}


def measure(seeds: int = 5, reverse: bool = False, device: str = "cpu",
            config: TrainConfig | None = None) -> dict:
    task = CopyTask(seq_len=10, vocab_size=10, reverse=reverse)
    runs = [run(seed, task, device, config) for seed in range(seeds)]
    return {"task": "reverse" if reverse else "copy", "device": device, "runs": runs,
            "summary": summary(runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--reverse", action="store_true")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    result = measure(args.seeds, args.reverse, args.device)
    for r in result["runs"]:
        print(f"seed {r['seed']}: {r['steps']:5d} steps {r['seconds']:6.2f} s "
              f"held-out accuracy {r['accuracy']:.4f}")
    for key, stats in result["summary"].items():
        print(f"{key:>9}: median {stats['median']:.4g} range {stats['min']:.4g}-{stats['max']:.4g}")


if __name__ == "__main__":
    main()
