"""What attention costs as sequences grow: the course's implementation against PyTorch's.

For T = 128 ... 2048 self-attention positions, times forward + backward (median of repeats) and
measures the extra peak memory of one forward + backward, for
- the course's scaled_dot_product_attention and torch.nn.functional.scaled_dot_product_attention
  (on (B, H, T, D) tensors), and
- the course's MultiHeadAttention and torch.nn.MultiheadAttention (on (B, T, C) tensors).
Each measurement runs in a fresh process, so peak memory is that measurement's alone.

Run: .venv/bin/python benchmarks/attention_cost.py [--quick]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import torch
import torch.nn.functional as F
from torch import nn

from attention_course.attention import scaled_dot_product_attention
from attention_course.multihead import MultiHeadAttention

B, H, D = 1, 4, 32
C = H * D
LENGTHS = (128, 256, 512, 1024, 2048)
IMPLEMENTATIONS = ("course attention", "torch sdpa", "course MHA", "torch MHA")


def workload(name: str, T: int, device: torch.device):
    """A function running one forward + backward of ``name`` on fresh inputs."""
    torch.manual_seed(0)
    if name in ("course attention", "torch sdpa"):
        q, k, v = (torch.randn(B, H, T, D, device=device, requires_grad=True) for _ in range(3))
        if name == "course attention":
            return lambda: scaled_dot_product_attention(q, k, v)[0].sum().backward()
        return lambda: F.scaled_dot_product_attention(q, k, v).sum().backward()
    x = torch.randn(B, T, C, device=device, requires_grad=True)
    if name == "course MHA":
        module = MultiHeadAttention(C, H).to(device)
        return lambda: module(x, x, x)[0].sum().backward()
    module = nn.MultiheadAttention(C, H, batch_first=True).to(device)
    return lambda: module(x, x, x, need_weights=False)[0].sum().backward()


def resident_bytes() -> int:
    """The process's resident memory now (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_bytes(run, device: torch.device) -> int:
    """Extra peak memory of one call of ``run``: the CUDA allocator's peak, or on the CPU the
    highest resident memory seen by a thread sampling every 0.2 ms (large tensors are mapped
    and unmapped as they live and die, so resident memory follows them)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        run()
        return torch.cuda.max_memory_allocated() - before
    before, peak, done = resident_bytes(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], resident_bytes())
            time.sleep(0.0002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    run()
    done.set()
    sampler.join()
    return max(peak[0] - before, 0)


def median_seconds(run, device: torch.device, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_one(name: str, T: int, repeats: int) -> dict:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    workload(name, 8, device)()  # pay one-time initialisation on a tiny problem
    run = workload(name, T, device)
    memory = peak_bytes(run, device)  # the first call at this size, before any reuse
    return {"implementation": name, "T": T, "device": device.type,
            "seconds": median_seconds(run, device, repeats), "peak_bytes": memory}


def in_fresh_processes(script: str, names, lengths, repeats: int,
                       together: bool = False) -> list[dict]:
    """``script --one NAME T REPEATS`` for every name at every length, each in a process of its
    own (so that no allocation lingers into the next measurement), or with ``together`` all in
    one process (``--one`` for each: a smoke test's size, one interpreter start instead of one
    per measurement, where the memory figures may include an earlier measurement's): the rows
    they print."""
    asked = [["--one", name, str(T), str(repeats)] for T in lengths for name in names]
    rows = []
    for arguments in [sum(asked, [])] if together else asked:
        child = subprocess.run([sys.executable, script, *arguments],
                               capture_output=True, text=True, check=True)
        rows += [json.loads(line) for line in child.stdout.splitlines()]
    return rows


def one_measurement_asked(parser: argparse.ArgumentParser, measure_one) -> bool:
    """Parse the command line; in the child process of ``in_fresh_processes`` (``--one``), run
    and print its measurements, one line each, and say so."""
    parser.add_argument("--one", nargs=3, action="append", metavar=("NAME", "T", "REPEATS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name, T, repeats in args.one or []:
        print(json.dumps(measure_one(name, int(T), int(repeats))), flush=True)
    return bool(args.one)


def measure(quick: bool = False) -> list[dict]:
    """Every implementation at every length, each in its own process (quick: all in one)."""
    lengths, repeats = (LENGTHS[:1], 1) if quick else (LENGTHS, 5)
    return in_fresh_processes(__file__, IMPLEMENTATIONS, lengths, repeats, together=quick)


def plot(rows: list[dict], path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (time_ax, memory_ax) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    for name in IMPLEMENTATIONS:
        mine = [r for r in rows if r["implementation"] == name]
        lengths = [r["T"] for r in mine]
        time_ax.loglog(lengths, [r["seconds"] * 1e3 for r in mine], marker="o", label=name)
        memory_ax.loglog(lengths, [max(r["peak_bytes"], 1) / 2**20 for r in mine], marker="o",
                         label=name)
    time_ax.set(xlabel="sequence length T", ylabel="forward + backward (ms)",
                title="time (median)")
    memory_ax.set(xlabel="sequence length T", ylabel="extra peak memory (MiB)",
                  title="memory of one forward + backward")
    lengths = sorted({r["T"] for r in rows})
    for ax in (time_ax, memory_ax):
        ax.set_xticks(lengths, [str(T) for T in lengths], minor=False)
        ax.set_xticks([], minor=True)
        ax.legend()
    fig.suptitle(f"self-attention cost, B={B}, H={H}, D={D} ({rows[0]['device']})")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    if one_measurement_asked(parser, measure_one):
        return
    for row in measure(parser.parse_args().quick):
        print(f"{row['implementation']:17} T={row['T']:5d} {row['seconds'] * 1e3:9.2f} ms "
              f"{row['peak_bytes'] / 2**20:8.1f} MiB")


if __name__ == "__main__":
    main()
