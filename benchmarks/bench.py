"""`make bench`: every performance figure of the course, measured side by side in one run.

Sections (each a module of this folder): lesson notebooks against the kernel-start floor, the
copy task's steps and seconds to 99% over seeds, grading throughput against stock nbgrader,
grading through a local Dask cluster (and into PostgreSQL) against grading here, the attention
cost curve, the time of every check, lesson 06's length experiment over seeds, and
lesson 07's decoding with and without a cache and tiled attention's memory at T = 2048 and 4096,
lesson 08's training step (forward and backward) of FlashAttention's Function against autograd
and PyTorch at T = 1024, 2048 and 4096, lesson 10's cache bytes of MHA, GQA, MQA and MLA at
DeepSeek-V2-Lite's sizes and naive against absorbed decoding, and seconds from `nbgrader submit`
to feedback fetchable over a burst of 50 (watch).
Writes results.json, attention_cost.png and rope_lengths.png to --out (default: this folder)
and prints a summary. --quick runs a small version of each
section, as a smoke test.

Run: .venv/bin/python benchmarks/bench.py [--quick] [--out DIR]
"""

import argparse
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import attention_cost  # noqa: E402
import checks  # noqa: E402
import copy_task  # noqa: E402
import dask_grading  # noqa: E402
import flash_backward  # noqa: E402
import gradescope  # noqa: E402
import grading  # noqa: E402
import inference_and_scale  # noqa: E402
import latent_attention  # noqa: E402
import rope_lengths  # noqa: E402
import streaming  # noqa: E402
import watch  # noqa: E402

import notebooks  # noqa: E402


def machine() -> dict:
    return {"cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "date": datetime.now(UTC).isoformat(timespec="seconds")}


# --quick's lesson under nbval: one of the shortest (benchmarks/README.md's notebooks table)
QUICK_LESSON = "02_scaled_dot_product"


def sections(quick: bool) -> dict:
    """Section name -> a function measuring it; ``quick``: each section's smallest run that
    still goes through all its code (one repeat, seed, round, submission and worker; the
    notebooks' busy half on the floor only; one process for each section's measurements)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return {
        "notebooks": lambda: notebooks.measure(repeats=1 if quick else 3,
                                               lessons=[QUICK_LESSON] if quick else None,
                                               busy_lessons=not quick,
                                               load=1 if quick else 2),
        "copy_task": lambda: copy_task.measure(seeds=1 if quick else 5, device=device),
        "grading": lambda: grading.measure(students=[12] if quick else [11, 12, 13, 14],
                                           lessons=["01_embeddings"] if quick else None),
        "cluster": lambda: dask_grading.measure(
            students=[12] if quick else list(range(10, 22)),
            lessons=["01_embeddings"] if quick else None, rounds=1 if quick else 3,
            workers=1 if quick else None),
        "attention_cost": lambda: attention_cost.measure(quick),
        "checks": lambda: checks.measure(repeats=1 if quick else 7),
        "rope_lengths": lambda: rope_lengths.measure(seeds=1 if quick else 5, device=device),
        "inference_and_scale": lambda: inference_and_scale.measure(quick, device=device),
        "flash_backward": lambda: flash_backward.measure(quick),
        "streaming": lambda: streaming.measure(quick),
        "latent_attention": lambda: latent_attention.measure(quick),
        "gradescope": lambda: gradescope.measure(runs=1 if quick else 3),
        "watch": lambda: watch.measure(students=1 if quick else 50, workers=1 if quick else 2),
    }


def report(results: dict) -> None:
    print(notebooks.report(results["notebooks"]))
    steps, secs, accuracy = (results["copy_task"]["summary"][k]
                             for k in ("steps", "seconds", "accuracy"))
    print(f"copy task: median {steps['median']:.0f} steps ({steps['min']}-{steps['max']}), "
          f"{secs['median']:.1f} s ({secs['min']:.1f}-{secs['max']:.1f}), "
          f"held-out accuracy >= {accuracy['min']:.2%}")
    grading_run = results["grading"]
    rate = grading_run["per_minute"]
    print(f"grading {grading_run['submissions']} submissions: {rate['ours']:.1f} per minute "
          f"sandboxed ({rate['ours unsandboxed']:.1f} without the sandbox: time "
          f"x{grading_run['sandbox_cost']:.2f}) against {rate['stock']:.1f} for stock nbgrader "
          f"autograde (x{grading_run['ratio']:.1f}); identical points: "
          f"{grading_run['identical_points']}")
    print(dask_grading.report(results["cluster"]))
    cost = {(r["implementation"], r["T"]): r for r in results["attention_cost"]}
    longest = max(T for _, T in cost)
    for ours, theirs in (("course attention", "torch sdpa"), ("course MHA", "torch MHA")):
        a, b = cost[ours, longest], cost[theirs, longest]
        memory = max(a["peak_bytes"], 1) / max(b["peak_bytes"], 1)
        print(f"attention at T={longest}: {ours} / {theirs}: "
              f"time x{a['seconds'] / b['seconds']:.1f}, memory x{memory:.1f}")
    slowest = max(results["checks"], key=lambda r: r["pass_s"])
    print(f"checks: slowest {slowest['check']} {slowest['pass_s'] * 1e3:.0f} ms per call")
    print(rope_lengths.report(results["rope_lengths"]))
    print(inference_and_scale.report(results["inference_and_scale"]))
    print(flash_backward.report(results["flash_backward"]))
    print(streaming.report(results["streaming"]))
    print(latent_attention.report(results["latent_attention"]))
    print(watch.report(results["watch"]))
    print(gradescope.report(results["gradescope"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run of every section")
    parser.add_argument("--out", type=Path, default=HERE, help="where results go")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results, seconds = {"machine": machine(), "quick": args.quick}, {}
    for name, measure in sections(args.quick).items():
        start = time.perf_counter()
        results[name] = measure()
        seconds[name] = time.perf_counter() - start
        print(f"[{name}: {seconds[name]:.0f} s]", flush=True)
    results["section_seconds"] = seconds
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    attention_cost.plot(results["attention_cost"], args.out / "attention_cost.png")
    rope_lengths.plot(results["rope_lengths"], args.out / "rope_lengths.png")
    report(results)
    print(f"wrote {args.out / 'results.json'}, {args.out / 'attention_cost.png'} and "
          f"{args.out / 'rope_lengths.png'}")


if __name__ == "__main__":
    main()
