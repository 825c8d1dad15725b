"""Lesson 07 at sizes beyond the notebook: what the key/value cache and tiled attention buy.

- decoding: lesson 07's TinyDecoder (C = 128, H = 4, 2 layers) writes N tokens after a 16-token
  prompt by greedy decoding, with the reference ``cached_attention`` and without a cache
  (lesson 03's causal attention over the whole sequence at every step); median seconds of
  both, for four lengths N, and their ratio.
- tiled attention: one causal self-attention forward at T = 2048 and 4096 (B = 1, H = 4,
  D = 32, inference: no gradients) of the course's attention in one piece (lessons 02-03), the
  reference ``tiled_attention`` (blocks of keys), the same in blocks of queries as FlashAttention
  (``flash_attention``) and ``F.scaled_dot_product_attention``; median time, and the extra peak
  memory of one call measured in a fresh process per measurement (as ``attention_cost.py``
  does: resident memory on the CPU, the CUDA allocator on a GPU).

Run: .venv/bin/python benchmarks/inference_and_scale.py [--quick]
"""

import argparse
import json
import statistics
import sys
import time
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
from attention_course.inference import TinyDecoder, cached_attention, generate  # noqa: E402
from attention_course.tiled import flash_attention, tiled_attention  # noqa: E402

DECODE_LENGTHS = (64, 128, 256, 512)
PROMPT = 16
B, H, D = 1, 4, 32
ATTENTION_LENGTHS = (2048, 4096)
BLOCK = 128
IMPLEMENTATIONS = ("course attention", "tiled_attention", "tiled in query blocks", "torch sdpa")


def full_attention(query, key, value, past_key=None, past_value=None):
    """No cache: lesson 03's causal attention over every token so far."""
    out, _ = scaled_dot_product_attention(query, key, value, is_causal=True)
    return out, key, value


def decoding(lengths=DECODE_LENGTHS, repeats: int = 3, device: str = "cpu") -> list[dict]:
    """Median seconds to write N tokens with and without the cache, for each N."""
    torch.manual_seed(0)
    model = TinyDecoder(vocab_size=64, d_model=128, n_heads=4, n_layers=2,
                        max_len=PROMPT + max(lengths)).to(device).eval()
    prompt = torch.randint(0, 64, (1, PROMPT), device=device)
    generate(model, prompt, 4, cached_attention)  # one-time initialisation, on a tiny run
    rows = []
    for n in lengths:
        seconds, written = {}, {}
        for name, attend, use_cache in (("uncached", full_attention, False),
                                        ("cached", cached_attention, True)):
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                written[name], _ = generate(model, prompt, n, attend, use_cache=use_cache)
                if device == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            seconds[name] = statistics.median(times)
        rows.append({"tokens": n, "device": device, "uncached_s": seconds["uncached"],
                     "cached_s": seconds["cached"],
                     "speedup": seconds["uncached"] / seconds["cached"],
                     "same_tokens": torch.equal(written["uncached"], written["cached"])})
    return rows


def workload(name: str, T: int, device: torch.device):
    """A function running one causal self-attention forward of ``name`` on fresh inputs."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, device=device) for _ in range(3))
    run = {
        "course attention": lambda: scaled_dot_product_attention(q, k, v, is_causal=True),
        "tiled_attention": lambda: tiled_attention(q, k, v, is_causal=True, block_size=BLOCK),
        "tiled in query blocks": lambda: flash_attention(q, k, v, is_causal=True,
                                                         block_size=BLOCK),
        "torch sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }[name]

    def forward():
        with torch.no_grad():
            run()
    return forward


def measure_one(name: str, T: int, repeats: int) -> dict:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    workload(name, 256, device)()  # pay one-time initialisation on a small problem
    run = workload(name, T, device)
    memory = peak_bytes(run, device)  # the first call at this size, before any reuse
    return {"implementation": name, "T": T, "device": device.type,
            "seconds": median_seconds(run, device, repeats), "peak_bytes": memory}


def attention_memory(lengths=ATTENTION_LENGTHS, repeats: int = 3,
                     together: bool = False) -> list[dict]:
    """Every implementation at every length, each in its own process (``together``: all in
    one)."""
    return in_fresh_processes(__file__, IMPLEMENTATIONS, lengths, repeats, together)


def measure(quick: bool = False, device: str = "cpu") -> dict:
    if quick:
        return {"decoding": decoding((8, 16), repeats=1, device=device),
                "attention": attention_memory((128,), repeats=1, together=True)}
    return {"decoding": decoding(device=device), "attention": attention_memory()}


def report(results: dict) -> str:
    lines = ["decoding with the cache: " + ", ".join(
        f"N={r['tokens']} x{r['speedup']:.1f}" for r in results["decoding"])
        + ("" if all(r["same_tokens"] for r in results["decoding"])
           else " (TOKENS DIFFER from uncached decoding)")]
    rows = {(r["implementation"], r["T"]): r for r in results["attention"]}
    for T in sorted({T for _, T in rows}):
        naive, torch_sdpa = rows["course attention", T], rows["torch sdpa", T]
        parts = []
        for name in ("tiled_attention", "tiled in query blocks"):
            r = rows[name, T]
            parts.append(f"{name} {r['peak_bytes'] / 2**20:.1f} MiB "
                         f"(x{r['peak_bytes'] / max(torch_sdpa['peak_bytes'], 1):.1f} sdpa's, "
                         f"x{r['peak_bytes'] / max(naive['peak_bytes'], 1):.3f} naive's), "
                         f"time x{r['seconds'] / naive['seconds']:.2f} naive's")
        lines.append(f"causal attention at T={T}: naive {naive['peak_bytes'] / 2**20:.0f} MiB, "
                     f"sdpa {torch_sdpa['peak_bytes'] / 2**20:.1f} MiB; " + "; ".join(parts))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the results here")
    if one_measurement_asked(parser, measure_one):
        return
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = measure(args.quick, device)
    for r in results["decoding"]:
        print(f"decode N={r['tokens']:5d}: uncached {r['uncached_s']:8.3f} s, cached "
              f"{r['cached_s']:7.3f} s, x{r['speedup']:5.1f}, same tokens: {r['same_tokens']}")
    for r in results["attention"]:
        print(f"{r['implementation']:22} T={r['T']:5d} {r['seconds'] * 1e3:9.1f} ms "
              f"{r['peak_bytes'] / 2**20:9.2f} MiB")
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
