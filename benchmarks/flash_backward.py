"""Lesson 08 at sizes beyond the notebook: the memory and time of one training step.

For T = 1024, 2048 and 4096 causal self-attention positions (B = 1, H = 4, D = 32), one forward
and backward pass of
- the course's attention in one piece (lessons 02-03) under autograd,
- lesson 07's ``tiled_attention`` (blocks of 128 keys) under autograd, which keeps every
  block's weights for the backward pass,
- the reference ``flash.flash_attention`` (tiles of 128 x 128), the ``torch.autograd.Function``
  that saves Q, K, V, O and the logsumexps only and recomputes each tile in its backward pass,
- ``F.scaled_dot_product_attention``.
Each measurement runs in a fresh process: the median seconds of a few steps, the extra peak
resident memory of one step (as ``attention_cost.py`` measures it; the CUDA allocator's peak on
a GPU), and on the CPU also the peak bytes of the tensors PyTorch created (``tiled.peak_memory``),
which leaves out the allocator's and the process's own overhead.

Run: .venv/bin/python benchmarks/flash_backward.py [--quick]
"""

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention_cost import (  # noqa: E402
    in_fresh_processes,
    median_seconds,
    one_measurement_asked,
    peak_bytes,
)

from attention_course.attention import scaled_dot_product_attention  # noqa: E402
from attention_course.flash import flash_attention  # noqa: E402
from attention_course.tiled import peak_memory, tiled_attention  # noqa: E402

B, H, D = 1, 4, 32
LENGTHS = (1024, 2048, 4096)
BLOCK = 128
IMPLEMENTATIONS = ("course attention", "tiled_attention + autograd", "flash_attention",
                   "torch sdpa")


def attend(name: str):
    return {
        "course attention": lambda q, k, v: scaled_dot_product_attention(
            q, k, v, is_causal=True)[0],
        "tiled_attention + autograd": lambda q, k, v: tiled_attention(
            q, k, v, is_causal=True, block_size=BLOCK)[0],
        "flash_attention": lambda q, k, v: flash_attention(q, k, v, True, None, BLOCK)[0],
        "torch sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }[name]


def workload(name: str, T: int, device: torch.device):
    """A function running one training step (forward and backward) of ``name``."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, device=device, requires_grad=True) for _ in range(3))
    forward = attend(name)

    def step():
        out = forward(q, k, v)
        out.backward(torch.ones_like(out))
    return step


def measure_one(name: str, T: int, repeats: int) -> dict:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    workload(name, 256, device)()  # pay one-time initialisation on a small problem
    run = workload(name, T, device)
    memory = peak_bytes(run, device)  # the first call at this size, before any reuse
    tensors = peak_memory(run)[1] if device.type == "cpu" else memory
    return {"implementation": name, "T": T, "device": device.type,
            "seconds": median_seconds(run, device, repeats), "peak_bytes": memory,
            "tensor_bytes": tensors}


def measure(quick: bool = False) -> list[dict]:
    """Every implementation at every length, each in its own process (quick: all in one)."""
    lengths, repeats = ((256,), 1) if quick else (LENGTHS, 3)
    return in_fresh_processes(__file__, IMPLEMENTATIONS, lengths, repeats, together=quick)


def report(rows: list[dict]) -> str:
    by = {(r["implementation"], r["T"]): r for r in rows}
    lines = []
    for T in sorted({r["T"] for r in rows}):
        sdpa = by["torch sdpa", T]
        parts = []
        for name in IMPLEMENTATIONS:
            r = by[name, T]
            parts.append(f"{name} {r['tensor_bytes'] / 2**20:.1f} MiB "
                         f"(x{r['tensor_bytes'] / max(sdpa['tensor_bytes'], 1):.1f} sdpa's), "
                         f"{r['seconds'] * 1e3:.0f} ms "
                         f"(x{r['seconds'] / sdpa['seconds']:.1f})")
        lines.append(f"training step at T={T}: " + "; ".join(parts))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the results here")
    if one_measurement_asked(parser, measure_one):
        return
    args = parser.parse_args()
    rows = measure(args.quick)
    for r in rows:
        print(f"{r['implementation']:28} T={r['T']:5d} {r['seconds'] * 1e3:9.1f} ms "
              f"resident {r['peak_bytes'] / 2**20:8.1f} MiB, tensors "
              f"{r['tensor_bytes'] / 2**20:8.1f} MiB")
    print(report(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
