"""Lesson 09 at sizes and seeds beyond the notebook: a rolling cache against lesson 07's.

- ``decoding``: lesson 07's ``TinyDecoder`` (2 layers, 4 heads of width 16) reads one stream a
  token at a time with lesson 07's growing cache and with the rolling cache (window 61, 4
  sinks: 64 tokens); at stream lengths 256, 1024 and 4096 (128 and 256 quick) the bytes each
  cache holds and the median time of the 16 steps that reach that length.
- ``lengths``: lesson 06's echo model with rotary positions, trained on 16 tokens, decoded on
  streams of 256 with full attention, a window of 8 alone, and the window with 2 sinks at their
  positions in the stream or at places within the cache (the lesson's experiment), on several
  seeds; with the share of weight the last 64 queries give the first 4 keys under full
  attention.
- ``sink_logit``: the lesson's echo-or-self model with a learned sink logit per head, trained
  within a window of 8, then decoded on streams of 256 with and without its sink, on 15 seeds
  (the lesson shows 3 of them): what the sink's share says, and does not say, about what
  taking the sink away costs.

Run: .venv/bin/python benchmarks/streaming.py [--quick]
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from attention_course import streaming
from attention_course.inference import TinyDecoder, cache_bytes, cached_attention
from attention_course.lengths import IGNORE, EchoConfig, EchoModel, echo_batch, train_echo
from attention_course.multihead import merge_heads, split_heads
from attention_course.rope import RotaryMultiHeadAttention, apply_rotary, rotary_angles
from attention_course.training import AdamW

WINDOW, SINKS = 61, 4


def decoding(lengths: tuple[int, ...]) -> list[dict]:
    """Bytes held and seconds per token of both caches at each stream length."""
    torch.manual_seed(0)
    model = TinyDecoder(vocab_size=64, d_model=64, n_heads=4, n_layers=2,
                        max_len=max(lengths)).eval()
    stream = torch.randint(64, (1, max(lengths)))
    attends = {"lesson 07's cache": cached_attention,
               "rolling cache": lambda *a: streaming.rolling_cache_attention(
                   *a, window=WINDOW, n_sinks=SINKS)}
    rows = []
    for name, attend in attends.items():
        caches, times = None, []
        with torch.no_grad():
            for s in range(max(lengths)):
                start = time.perf_counter()
                _, caches = model(stream[:, s:s + 1], attend, caches, start=s)
                times.append(time.perf_counter() - start)
                if s + 1 in lengths:
                    rows.append({"cache": name, "stream_length": s + 1,
                                 "bytes": cache_bytes(caches),
                                 "seconds_per_token": statistics.median(times[-16:])})
    return rows


@torch.no_grad()
def stream_logits(model, tokens, step, **settings):
    """The echo model over a stream, one token at a time through a rolling cache."""
    layer = model.attention
    x = model.token(tokens)
    h = model.norm(x)
    q, k, v = (split_heads(proj(h), layer.n_heads)
               for proj in (layer.q_proj, layer.k_proj, layer.v_proj))
    outs, past_key, past_value = [], None, None
    for s in range(tokens.shape[1]):
        where = {"start": s} if step is streaming.rolling_rotary_attention else {}
        out, past_key, past_value = step(q[..., s:s + 1, :], k[..., s:s + 1, :],
                                         v[..., s:s + 1, :], past_key, past_value, **where,
                                         **settings)
        outs.append(out)
    return model.read_out(x + layer.out_proj(merge_heads(torch.cat(outs, dim=-2))))


def lengths(seeds: int, length: int = 256) -> list[dict]:
    """The lesson's experiment far past the training length, one row per seed."""
    rows = []
    for seed in range(seeds):
        config = EchoConfig(seed=seed)
        torch.manual_seed(seed)
        model = EchoModel(config.vocab_size, config.d_model, config.n_heads, max_len=length,
                          positions="rotary", rotary=RotaryMultiHeadAttention)
        train_echo(model, config)
        model.eval()
        tokens, targets = echo_batch(64, length, config.vocab_size, config.delay,
                                     torch.Generator().manual_seed(1000 + seed))
        with torch.no_grad():
            h = model.norm(model.token(tokens))
            _, weights = model.attention(h, h, h, is_causal=True)
            ways = {
                "full attention": model(tokens),
                "window 8": stream_logits(model, tokens, streaming.rolling_rotary_attention,
                                          window=8),
                "window 8 + 2 sinks, stream positions": stream_logits(
                    model, tokens, streaming.rolling_rotary_attention, window=8, n_sinks=2),
                "window 8 + 2 sinks, cache places": stream_logits(
                    model, tokens, streaming.streaming_llm_attention, window=8, n_sinks=2)}
        row = {"seed": seed,
               "first_4_share": weights[:, :, -64:, :4].sum(-1).mean().item(),
               "uniform_share": (4 / torch.arange(length - 63, length + 1).float()).mean().item()}
        for name, logits in ways.items():
            row[name] = (logits.argmax(-1) == targets)[:, 16:].float().mean().item()
        rows.append(row)
    return rows


class SinkRotaryAttention(RotaryMultiHeadAttention):
    """The lesson's rotary layer within a window of 8, with a learned sink logit per head."""

    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.sink = nn.Parameter(torch.zeros(n_heads))
        self.use_sink = True

    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = (split_heads(proj(x), self.n_heads) for proj, x in
                   ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
        angles = rotary_angles(q.shape[-2], self.d_head)
        q, k = apply_rotary(q, angles), apply_rotary(k, angles)
        mask = streaming.sliding_window_mask(q.shape[-2], k.shape[-2], 8)
        sink = self.sink if self.use_sink else torch.full_like(self.sink, float("-inf"))
        out, weights = streaming.sink_attention(q, k, v, sink, mask)
        return self.out_proj(merge_heads(out)), weights


def echo_or_self(batch_size, seq_len, generator):
    tokens = torch.randint(16, (batch_size, seq_len), generator=generator)
    targets = torch.full_like(tokens, IGNORE)
    back = tokens[:, :-3]
    targets[:, 3:] = torch.where(back < 8, back, tokens[:, 3:])
    return tokens, targets


def sink_logit(seeds: int) -> list[dict]:
    """The lesson's model with a learned sink, with and without it, one row per seed."""
    rows = []
    for seed in range(seeds):
        torch.manual_seed(seed)
        model = EchoModel(16, 32, 2, max_len=256, positions="rotary",
                          rotary=SinkRotaryAttention)
        optimizer = AdamW(model.parameters(), lr=3e-2, weight_decay=0.0)
        batches = torch.Generator().manual_seed(seed)
        for _ in range(45):
            tokens, targets = echo_or_self(64, 16, batches)
            loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten(),
                                   ignore_index=IGNORE)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        tokens, targets = echo_or_self(64, 256, torch.Generator().manual_seed(100 + seed))
        scored = targets != IGNORE
        with torch.no_grad():
            x = model.token(tokens)
            h = model.norm(x)
            out, weights = model.attention(h, h, h)
            row = {"seed": seed, "sink_share": 1 - weights.sum(-1).mean().item(),
                   "with_sink": (model.read_out(x + out).argmax(-1) == targets)[scored]
                   .float().mean().item()}
            model.attention.use_sink = False
            out, _ = model.attention(h, h, h)
            row["without_sink"] = (model.read_out(x + out).argmax(-1) == targets)[scored] \
                .float().mean().item()
        rows.append(row)
    return rows


def measure(quick: bool = False) -> dict:
    torch.set_num_threads(1)  # as the notebooks compute
    return {"decoding": decoding((128, 256) if quick else (256, 1024, 4096)),
            "lengths": lengths(1 if quick else 5),
            "sink_logit": sink_logit(1 if quick else 15)}


def report(results: dict) -> str:
    by = {(r["cache"], r["stream_length"]): r for r in results["decoding"]}
    lines = []
    for L in sorted({r["stream_length"] for r in results["decoding"]}):
        a, b = by["lesson 07's cache", L], by["rolling cache", L]
        lines.append(f"stream of {L}: lesson 07's cache {a['bytes'] / 1024:.0f} KiB, "
                     f"{a['seconds_per_token'] * 1e3:.2f} ms/token; rolling cache "
                     f"{b['bytes'] / 1024:.0f} KiB, {b['seconds_per_token'] * 1e3:.2f} ms/token")
    names = [k for k in results["lengths"][0] if k not in ("seed", "first_4_share",
                                                           "uniform_share")]
    for name in names:
        values = [r[name] for r in results["lengths"]]
        lines.append(f"echo 16x past training, {name}: accuracy {min(values):.0%}-"
                     f"{max(values):.0%} over {len(values)} seeds")
    shares = [r["first_4_share"] for r in results["lengths"]]
    lines.append(f"weight on the first 4 keys under full attention: {min(shares):.1%}-"
                 f"{max(shares):.1%} (uniform {results['lengths'][0]['uniform_share']:.1%})")
    for r in results["sink_logit"]:
        lines.append(f"sink logit, seed {r['seed']}: share {r['sink_share']:.0%}, accuracy "
                     f"{r['with_sink']:.1%} with it, {r['without_sink']:.1%} without")
    for label, keep in (("under 10%", lambda share: share < 0.1),
                        ("10% or more", lambda share: share >= 0.1)):
        costs = [r["with_sink"] - r["without_sink"] for r in results["sink_logit"]
                 if keep(r["sink_share"])]
        if costs:
            lines.append(f"sink logit, share {label}: taking the sink away costs "
                         f"{min(costs):.1%} to {max(costs):.1%} of the answers "
                         f"({len(costs)} seeds)")
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
