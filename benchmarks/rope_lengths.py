"""Lesson 06's experiment over seeds: echo accuracy beyond the training length, by positions.

Trains the lesson's four echo models (no positions, sinusoidal, learned, rotary; one causal
attention layer, 50 steps at length 16) from several seeds, tests each at every length up to 32,
and reports per kind of positions the mean accuracy at the trained lengths and beyond them, the
seconds per model, and which kind echoes best beyond the training length in each seed. Draws
the mean accuracy against the length.

Run: .venv/bin/python benchmarks/rope_lengths.py [--seeds 5] [--device cpu|cuda] [--plot PATH]
"""

import argparse
import statistics
from dataclasses import asdict, replace
from pathlib import Path

import torch

from attention_course.lengths import POSITIONS, EchoConfig, length_experiment
from attention_course.rope import RotaryMultiHeadAttention


def run(seed: int, device: str) -> dict:
    config = replace(EchoConfig(), seed=seed)
    runs = length_experiment(RotaryMultiHeadAttention, config, device=device)
    L, first = config.train_len, config.delay + 1
    return {"seed": seed, "kinds": {
        kind: {"trained": r.mean_accuracy(first, L), "beyond": r.mean_accuracy(L + 1, 2 * L),
               "at_2L": r.accuracy[2 * L], "seconds": r.seconds,
               "by_length": {str(length): a for length, a in r.accuracy.items()}}
        for kind, r in runs.items()}}


def summary(runs: list[dict]) -> dict:
    """Per kind: median and range of each figure; and how often each kind was best beyond L."""
    kinds = {kind: {key: {"median": statistics.median(r["kinds"][kind][key] for r in runs),
                          "min": min(r["kinds"][kind][key] for r in runs),
                          "max": max(r["kinds"][kind][key] for r in runs)}
                    for key in ("trained", "beyond", "at_2L", "seconds")}
             for kind in POSITIONS}
    best = [max(POSITIONS, key=lambda kind, r=r: r["kinds"][kind]["beyond"]) for r in runs]
    return {"kinds": kinds, "best_beyond": {kind: best.count(kind) for kind in POSITIONS}}


def measure(seeds: int = 5, device: str = "cpu") -> dict:
    runs = [run(seed, device) for seed in range(seeds)]
    return {"device": device, "config": asdict(EchoConfig()), "runs": runs,
            "summary": summary(runs)}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = result["config"]
    fig, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    for kind in POSITIONS:
        lengths = [int(length) for length in result["runs"][0]["kinds"][kind]["by_length"]]
        mean = [statistics.mean(r["kinds"][kind]["by_length"][str(length)]
                                for r in result["runs"]) for length in lengths]
        ax.plot(lengths, mean, marker="o", markersize=3, label=kind)
    ax.axvspan(config["delay"] + 1, config["train_len"], color="grey", alpha=0.15,
               label="lengths seen in training")
    ax.axhline(1 / config["vocab_size"], color="grey", linestyle=":", linewidth=1,
               label="chance")
    ax.set(xlabel="sequence length", ylabel="echo accuracy of the newest token",
           ylim=(-0.02, 1.02), title=f"lesson 06's echo task, mean of {len(result['runs'])} "
                                     f"seeds: trained at {config['train_len']}, tested to "
                                     f"{config['test_len']}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(result: dict) -> str:
    kinds, best = result["summary"]["kinds"], result["summary"]["best_beyond"]
    parts = [f"{kind} {kinds[kind]['trained']['median']:.0%} -> "
             f"{kinds[kind]['beyond']['median']:.0%}" for kind in POSITIONS]
    seconds = max(kinds[kind]["seconds"]["median"] for kind in POSITIONS)
    return (f"rope lengths ({len(result['runs'])} seeds; median accuracy at lengths <= L -> "
            f"beyond L): {', '.join(parts)}; best beyond L: "
            f"{', '.join(f'{kind} {n}' for kind, n in best.items() if n)}; "
            f"<= {seconds:.1f} s per model")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--plot", type=Path, default=None, help="also draw the curves here")
    args = parser.parse_args()
    result = measure(args.seeds, args.device)
    for r in result["runs"]:
        print(f"seed {r['seed']}: " + "  ".join(
            f"{kind} {k['trained']:.2f}/{k['beyond']:.2f} ({k['seconds']:.1f} s)"
            for kind, k in r["kinds"].items()))
    print(report(result))
    if args.plot:
        plot(result, args.plot)


if __name__ == "__main__":
    main()
