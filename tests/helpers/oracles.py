"""Slow, obviously correct references written with plain Python loops (no matmul, no softmax)."""

import itertools
import math

import torch
from torch import Tensor


def loop_attention(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None,
                   scale: float | None = None) -> tuple[Tensor, Tensor]:
    """Attention for (B, T, D), (B, S, D), (B, S, Dv) with a bool mask (B, T, S), True = may attend.

    Computed one number at a time with ``math.exp``; a query with no allowed key gets zero
    weights and a zero output. Returns float64 ``out`` (B, T, Dv) and ``weights`` (B, T, S).
    """
    B, T, D = query.shape
    S, Dv = value.shape[-2:]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    q, k, v = query.tolist(), key.tolist(), value.tolist()
    allowed = mask.tolist() if mask is not None else [[[True] * S] * T] * B
    out = torch.zeros(B, T, Dv, dtype=torch.float64)
    weights = torch.zeros(B, T, S, dtype=torch.float64)
    for b, t in itertools.product(range(B), range(T)):
        keys = [s for s in range(S) if allowed[b][t][s]]
        if not keys:
            continue
        scores = {s: scale * sum(q[b][t][d] * k[b][s][d] for d in range(D)) for s in keys}
        top = max(scores.values())
        exps = {s: math.exp(score - top) for s, score in scores.items()}
        total = sum(exps.values())
        for s in keys:
            weights[b, t, s] = exps[s] / total
            for j in range(Dv):
                out[b, t, j] += exps[s] / total * v[b][s][j]
    return out, weights


TOLERANCE = {torch.float32: {"atol": 1e-5, "rtol": 1e-5},
             torch.float64: {"atol": 1e-10, "rtol": 1e-10}}


def assert_close(actual: Tensor, expected: Tensor, **kwargs) -> None:
    """``torch.testing.assert_close`` with the suite's tolerance for the dtype of ``expected``."""
    tolerance = TOLERANCE[expected.dtype] | kwargs
    torch.testing.assert_close(actual, expected, equal_nan=True, **tolerance)
