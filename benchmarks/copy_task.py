"""Steps and seconds the copy task needs to reach >= 99% held-out sequence accuracy.

Trains lesson 05's configuration (DecoderOnlyTransformer defaults, TrainConfig defaults) from
several seeds and reports, per seed, the steps and wall time until the early stop and the greedy
sequence accuracy on 2000 held-out sequences, then the median and range.

Run: .venv/bin/python benchmarks/copy_task.py [--seeds 5] [--reverse] [--device cpu|cuda]
"""

import argparse
import statistics

import torch

from attention_course.data import CopyTask
from attention_course.model import DecoderOnlyTransformer
from attention_course.training import TrainConfig, evaluate, train

HELD_OUT_SEED = 2024  # never used for training or early stopping


def run(seed: int, task: CopyTask, device: str) -> dict:
    torch.manual_seed(seed)
    model = DecoderOnlyTransformer(task.n_tokens, task.context_len).to(device)
    history = train(model, task, TrainConfig(seed=seed), device=device, progress=False)
    accuracy = evaluate(model, task, 2000, seed=HELD_OUT_SEED, device=device)
    return {"seed": seed, "steps": history.steps, "seconds": history.seconds,
            "accuracy": accuracy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--reverse", action="store_true")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    task = CopyTask(seq_len=10, vocab_size=10, reverse=args.reverse)
    runs = [run(seed, task, args.device) for seed in range(args.seeds)]
    for r in runs:
        print(f"seed {r['seed']}: {r['steps']:5d} steps {r['seconds']:6.2f} s "
              f"held-out accuracy {r['accuracy']:.4f}")
    for key in ("steps", "seconds", "accuracy"):
        values = [r[key] for r in runs]
        print(f"{key:>9}: median {statistics.median(values):.4g} "
              f"range {min(values):.4g}-{max(values):.4g}")


if __name__ == "__main__":
    main()
