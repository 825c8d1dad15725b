"""Seeded inputs for the tests of lesson 07's references and checks, and the causal mask they
are compared with, built independently of the course's code."""

import torch


def qkv(*shape, S=None, Dv=None, dtype=torch.float64, seed=0):
    """Query (..., T, D), key (..., S, D), value (..., S, Dv) from sizes (..., T, D)."""
    g = torch.Generator().manual_seed(seed)
    *batch, T, D = shape
    S, Dv = S or T, Dv or D
    return (torch.randn(*batch, T, D, generator=g, dtype=dtype),
            torch.randn(*batch, S, D, generator=g, dtype=dtype),
            torch.randn(*batch, S, Dv, generator=g, dtype=dtype))


def bottom_right(T: int, S: int) -> torch.Tensor:
    """The causal mask of T queries that are the last T of S positions (True = may attend)."""
    return torch.ones(T, S, dtype=torch.bool).tril(S - T)
