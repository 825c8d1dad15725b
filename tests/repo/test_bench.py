"""`make bench QUICK=1` produces every figure (a smoke test: it never asserts a speed)."""

import json
import subprocess
import sys

import pytest

from grader.course import read_lesson
from helpers.notebooks import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # 84-140 s, 74-87 CPU-s measured
# on 2 shared cores (about half of it the grading and cluster sections)


def test_quick_bench_produces_every_figure(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--quick",
                    "--out", str(tmp_path)], check=True, capture_output=True, cwd=ROOT)
    results = json.loads((tmp_path / "results.json").read_text())

    lessons = results["notebooks"]  # quick: only the floor runs beside the busy load
    assert lessons["floor_seconds"] > 0 and lessons["floor_busy_seconds"] > 0 and lessons["lessons"]
    assert all(row["seconds"] > 0 and row["ratio_to_floor"] > 0 and row["busy_ratio"] is None
               for row in lessons["lessons"])
    runs = results["copy_task"]["runs"]
    assert runs and all(run["steps"] > 0 and 0 <= run["accuracy"] <= 1 for run in runs)
    grading = results["grading"]
    assert grading["submissions"] >= 1 and grading["identical_points"] is True
    assert set(grading["per_minute"]) == {"ours", "ours unsandboxed", "stock"}
    assert all(rate > 0 for rate in grading["per_minute"].values())
    assert grading["sandbox"] is True and grading["sandbox_cost"] > 0
    cluster = results["cluster"]
    assert cluster["submissions"] >= 1 and cluster["identical_points"] is True
    assert set(cluster["per_minute"]) == {"here", "cluster", "cluster + PostgreSQL"}
    assert all(rate > 0 for rate in cluster["per_minute"].values())
    cost = results["attention_cost"]
    assert {row["implementation"] for row in cost} == {
        "course attention", "torch sdpa", "course MHA", "torch MHA"}
    assert all(row["seconds"] > 0 and row["peak_bytes"] >= 0 for row in cost)
    assert len(results["checks"]) >= 18 and all(row["pass_s"] > 0 for row in results["checks"])
    assert (tmp_path / "attention_cost.png").read_bytes().startswith(b"\x89PNG")
    lengths = results["rope_lengths"]["summary"]["kinds"]
    assert set(lengths) == {"none", "sinusoidal", "learned", "rotary"}
    assert (tmp_path / "rope_lengths.png").read_bytes().startswith(b"\x89PNG")
    scale = results["inference_and_scale"]
    assert scale["decoding"] and all(row["same_tokens"] and row["speedup"] > 0
                                     for row in scale["decoding"])
    assert {row["implementation"] for row in scale["attention"]} == {
        "course attention", "tiled_attention", "tiled in query blocks", "torch sdpa"}
    assert all(row["seconds"] > 0 and row["peak_bytes"] >= 0 for row in scale["attention"])
    training = results["flash_backward"]
    assert {row["implementation"] for row in training} == {
        "course attention", "tiled_attention + autograd", "flash_attention", "torch sdpa"}
    assert all(row["seconds"] > 0 and row["tensor_bytes"] > 0 for row in training)
    stream = results["streaming"]
    held = {(r["cache"], r["stream_length"]): r["bytes"] for r in stream["decoding"]}
    rolling = {b for (cache, _), b in held.items() if cache == "rolling cache"}
    assert len(rolling) == 1 and all(r["seconds_per_token"] > 0 for r in stream["decoding"])
    assert held["lesson 07's cache", 256] == 2 * held["lesson 07's cache", 128]
    assert stream["lengths"] and all(r["window 8"] == 1.0 for r in stream["lengths"])
    assert stream["sink_logit"] and all(r["with_sink"] > 0.9 for r in stream["sink_logit"])
    latent = results["latent_attention"]
    assert {(r["config"], r["kind"]) for r in latent["cache"]} >= {
        ("DeepSeek-V2-Lite", kind) for kind in ("MHA", "GQA", "MQA", "MLA")}
    assert all(r["measured"] == r["bytes_per_token"] for r in latent["cache"])
    assert latent["decoding"] and all(r["naive_s"] > 0 and r["absorbed_s"] > 0
                                      and r["largest_difference"] < 1e-3
                                      for r in latent["decoding"])
    assert latent["echo"] and all(0 <= r["up_to_16"] <= 1 for r in latent["echo"])
    autograder = results["gradescope"]
    full = read_lesson(autograder["lesson"]).max_score
    assert autograder["runs"] and all(run["exit"] == 0 and run["score"] == full
                                      for run in autograder["runs"])
    assert set(autograder["seconds"]) >= {"bubblewrap"}
    feedback = results["watch"]
    assert feedback["all_fetchable"] and feedback["students"] >= 1
    assert 0 < feedback["median_s"] <= feedback["worst_s"]
