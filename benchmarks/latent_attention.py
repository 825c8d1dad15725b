"""Lesson 10 at sizes and seeds beyond the notebook: what MHA, GQA, MQA and MLA cache, the
naive and absorbed forms' decoding time, and the lesson's echo experiment on more seeds.

- ``cache``: bytes per token and layer of the four kinds, counted from the configuration
  (``latent.cache_bytes_per_token``) and measured from real cache tensors (lesson 07's
  ``TinyDecoder`` with 16, 4 and 1 key/value heads, one layer, and ``latent.LatentAttention``,
  on a prompt of 8 tokens), at DeepSeek-V2-Lite's published attention sizes (hidden 2048, 16
  heads of 128, a latent of 512, a rotary key of 64, 27 layers, bfloat16; its GQA and MQA are
  hypothetical counterparts) and at the lesson's small one (4 heads of 16, 2 key/value heads,
  a latent of 16, a rotary key of 8, float32); with the cache of one sequence of 4096 and
  32768 tokens in all layers.
- ``decoding``: one decoding step (T = 1) of ``naive_latent_attention`` and
  ``absorbed_latent_attention`` at DeepSeek-V2-Lite's sizes (16 heads of 128, d_c = 512) at
  contexts of 512, 2048 and 8192 tokens (256 and 512 quick): the fastest of 3 runs, and the
  largest difference between the two outputs.
- ``echo``: lesson 06's echo task with the lesson's four models (rotary MHA, rotary GQA with 2
  key/value heads, MLA with d_c = 8 and d_R = 8 or 4), trained on 16 tokens and tested up to 32,
  on 8 seeds (1 quick).

Run: .venv/bin/python benchmarks/latent_attention.py [--quick]
"""

import argparse
import json
import time
from pathlib import Path

import torch

from attention_course import latent
from attention_course.attention import scaled_dot_product_attention
from attention_course.inference import TinyDecoder, cache_bytes
from attention_course.lengths import EchoConfig, EchoModel, accuracy_by_length, train_echo
from attention_course.rope import RotaryMultiHeadAttention

LITE = {"name": "DeepSeek-V2-Lite", "d_model": 2048, "n_heads": 16, "d_head": 128,
        "n_kv_heads": 4, "d_latent": 512, "d_rope": 64, "layers": 27,
        "dtype": torch.bfloat16, "bytes_per_number": 2}
SMALL = {"name": "the lesson's small model", "d_model": 64, "n_heads": 4, "d_head": 16,
         "n_kv_heads": 2, "d_latent": 16, "d_rope": 8, "layers": 2, "dtype": torch.float32,
         "bytes_per_number": 4}


def _attend(q, k, v, past_key, past_value):
    """A prompt's causal attention with G key/value heads; the cache holds those G."""
    groups = q.shape[1] // k.shape[1]
    out, _ = scaled_dot_product_attention(q, k.repeat_interleave(groups, 1),
                                          v.repeat_interleave(groups, 1), is_causal=True)
    return out, k, v


@torch.no_grad()
def measured(kind: str, config: dict, tokens: int = 8) -> float:
    """Bytes per token and layer of a real cache of ``kind`` after a prompt."""
    torch.manual_seed(0)
    if kind == "MLA":
        layer = latent.LatentAttention(config["d_model"], config["n_heads"], config["d_latent"],
                                       config["d_rope"]).to(config["dtype"])
        _, cache = layer(torch.randn(1, tokens, config["d_model"], dtype=config["dtype"]))
        return latent.cache_bytes(cache) / tokens
    kv_heads = {"MHA": config["n_heads"], "GQA": config["n_kv_heads"], "MQA": 1}[kind]
    model = TinyDecoder(vocab_size=64, d_model=config["d_model"], n_heads=config["n_heads"],
                        n_kv_heads=kv_heads, n_layers=1, max_len=tokens).to(config["dtype"])
    _, caches = model(torch.randint(64, (1, tokens)), _attend)
    return cache_bytes(caches) / tokens


def cache() -> list[dict]:
    rows = []
    for config in (LITE, SMALL):
        for kind in latent.KINDS:
            per_token = latent.cache_bytes_per_token(kind, config)
            rows.append({"config": config["name"], "kind": kind, "bytes_per_token": per_token,
                         "measured": measured(kind, config),
                         "sequence_4096_bytes": per_token * config["layers"] * 4096,
                         "sequence_32768_bytes": per_token * config["layers"] * 32768})
    return rows


def _fastest(attend, *args, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        attend(*args)
        best = min(best, time.perf_counter() - start)
    return best


@torch.no_grad()
def decoding(contexts: tuple[int, ...], H: int = 16, D: int = 128, d_c: int = 512) -> list[dict]:
    torch.manual_seed(0)
    w_uk, w_uv = (torch.randn(H, d_c, D) / d_c ** 0.5 for _ in range(2))
    rows = []
    for S in contexts:
        q, c = torch.randn(1, H, 1, D), torch.randn(1, S, d_c)
        naive = latent.naive_latent_attention(q, c, w_uk, w_uv)
        absorbed = latent.absorbed_latent_attention(q, c, w_uk, w_uv)
        rows.append({"context": S,
                     "naive_s": _fastest(latent.naive_latent_attention, q, c, w_uk, w_uv),
                     "absorbed_s": _fastest(latent.absorbed_latent_attention, q, c, w_uk, w_uv),
                     "largest_difference": (naive - absorbed).abs().max().item()})
    return rows


MODELS = {
    "MHA": RotaryMultiHeadAttention,
    "GQA, 2 kv heads": lambda d, h: latent.RotaryGroupedQueryAttention(d, h, 2),
    "MLA, d_R = 8": lambda d, h: latent.SelfAttention(latent.LatentAttention(d, h, 8, 8)),
    "MLA, d_R = 4": lambda d, h: latent.SelfAttention(latent.LatentAttention(d, h, 8, 4)),
}


def echo(seeds: int) -> list[dict]:
    rows = []
    for seed in range(seeds):
        config = EchoConfig(n_heads=4, seed=seed)
        for name, attention_class in MODELS.items():
            torch.manual_seed(seed)
            model = EchoModel(config.vocab_size, config.d_model, config.n_heads,
                              config.test_len, "rotary", attention_class)
            start = time.perf_counter()
            losses = train_echo(model, config)
            seconds = time.perf_counter() - start
            accuracy = accuracy_by_length(model, config)
            seen = [a for n, a in accuracy.items() if n <= config.train_len]
            longer = [a for n, a in accuracy.items() if n > config.train_len]
            rows.append({"seed": seed, "model": name, "final_loss": losses[-1],
                         "train_seconds": seconds, "up_to_16": sum(seen) / len(seen),
                         "17_to_32": sum(longer) / len(longer)})
    return rows


def measure(quick: bool = False) -> dict:
    torch.set_num_threads(1)  # as the notebooks compute
    return {"cache": cache(), "decoding": decoding((256, 512) if quick else (512, 2048, 8192)),
            "echo": echo(1 if quick else 8)}


def report(results: dict) -> str:
    lines = []
    for row in results["cache"]:
        lines.append(f"{row['config']}, {row['kind']}: {row['bytes_per_token']} bytes per token "
                     f"and layer (measured {row['measured']:.0f}); one sequence of 32768 "
                     f"tokens {row['sequence_32768_bytes'] / 2**30:.2f} GiB")
    for row in results["decoding"]:
        lines.append(f"decoding step at S = {row['context']}: naive {row['naive_s'] * 1e3:.1f} "
                     f"ms, absorbed {row['absorbed_s'] * 1e3:.2f} ms (x"
                     f"{row['naive_s'] / row['absorbed_s']:.0f}; difference "
                     f"{row['largest_difference']:.1e})")
    for name in MODELS:
        runs = [r for r in results["echo"] if r["model"] == name]
        seen, longer = [r["up_to_16"] for r in runs], [r["17_to_32"] for r in runs]
        lines.append(f"echo, {name}: up to 16 tokens {min(seen):.2f}-{max(seen):.2f}, 17 to 32 "
                     f"{min(longer):.2f}-{max(longer):.2f} over {len(runs)} seeds")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = measure(args.quick)
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
