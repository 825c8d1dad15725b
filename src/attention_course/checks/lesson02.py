"""Checks for lesson 02_scaled_dot_product: softmax, and attention from the scaled scores to the
weighted sum of the values."""

import torch
import torch.nn.functional as F
from torch import nn

from .. import attention
from .framework import Case, Exercise, Mistake, randn, run_check, seeded
from .student.shortcuts import forbid

# parts of the names of torch's built-ins (see shortcuts.Forbidden): every softmax of torch's,
# public or private, and every attention, which computes one inside
ATTENTION_BUILTINS = ("attention",)
SOFTMAX_BUILTINS = ("softmax", *ATTENTION_BUILTINS)
NO_BUILT_IN_ATTENTION = (nn.MultiheadAttention.forward, F.multi_head_attention_forward)


# ---------------------------------------------------------------- softmax

def softmax_variant(x, dim=-1, *, shift="dim", normalise_over="dim", shift_if_positive=False):
    def over(axis):  # keyword arguments reducing along an axis, or over everything
        return {} if axis is None else {"dim": axis, "keepdim": True}

    axes = {"all": None, "global": None, "last": -1, "dim": dim}
    maximum = 0 if shift == "none" else x.amax(**over(axes[shift]))
    shifted = x - (maximum.clamp(min=0) if shift_if_positive else maximum)
    exps = shifted.exp()
    return exps / exps.sum(**over(axes[normalise_over]))


SOFTMAX = Exercise(
    name="softmax",
    reference=attention.softmax,
    inputs=("x",),
    outputs=(("output", "(same shape as x)"),),
    variant=softmax_variant,
    mistakes=(
        Mistake("no max-subtraction (exp overflows on large logits)",
                "exp(1000) is inf in floating point. Subtract the maximum along `dim` "
                "(keepdim=True) before exp(): the result is mathematically the same.",
                {"shift": "none"}),
        Mistake("the max subtracted only where it is positive (rows far below 0 underflow)",
                "exp() of scores far below about -88 underflows to 0 in float32, and 0/0 = "
                "NaN: subtract the maximum whatever its sign.", {"shift_if_positive": True}),
        Mistake("max over the whole tensor instead of along dim",
                "One global maximum leaves rows far below it with exp() underflowing to 0, and "
                "0/0 = NaN: subtract each slice's own maximum (amax(dim=dim, keepdim=True)).",
                {"shift": "global"}),
        Mistake("sum over the whole tensor instead of along dim",
                "Each slice along `dim` must sum to 1: pass dim= and keepdim=True to sum().",
                {"normalise_over": "all"}),
        Mistake("ignores the dim argument (always the last axis)",
                "The entries that must sum to 1 lie along `dim`, which need not be the last "
                "axis: take the maximum and the sum along `dim`.",
                {"shift": "last", "normalise_over": "last"}),
        Mistake("max taken over the last axis instead of along dim",
                "The sum runs along `dim` but the maximum along the last axis, so each slice "
                "along `dim` is shifted by several different amounts and the shift no longer "
                "cancels out: take the maximum along `dim` too.", {"shift": "last"}),
        Mistake("sum taken over the last axis instead of along dim",
                "The maximum is taken along `dim` but the sum along the last axis: the slices "
                "along `dim` are the ones that must sum to 1.", {"normalise_over": "last"}),
    ),
    forbidden=forbid([attention.softmax], SOFTMAX_BUILTINS),
)


def check_softmax(fn, seed: int = 0) -> None:
    """Check a softmax(x, dim=-1) implementation. Lesson: 02_scaled_dot_product"""
    g = seeded(seed)
    with_minus_inf = randn(4, 6, generator=g)
    with_minus_inf[:, ::2] = float("-inf")
    cases = [
        Case("a (3, 5) matrix, softmax over the last axis", (randn(3, 5, generator=g),)),
        Case("a (2, 4, 6) tensor, softmax over dim=1", (randn(2, 4, 6, generator=g),),
             {"dim": 1}),
        Case("a (4, 7) matrix, softmax over dim=0", (randn(4, 7, generator=g),), {"dim": 0}),
        Case("float64, with gradients", (randn(3, 5, generator=g, dtype=torch.float64),),
             grad=True),
        Case("large logits (about 1000): exp() overflows unless you subtract the max",
             (1000 * randn(3, 5, generator=g),)),
        Case("every logit far below -88 (about -1000): exp() underflows to 0 unless you "
             "subtract the max", (randn(3, 5, generator=g) - 1000,)),
        Case("some entries are -inf (masked): they get probability 0", (with_minus_inf,)),
    ]
    run_check(SOFTMAX, fn, cases)


# ---------------------------------------------------------------- attention scores

def scores_variant(query, key, scale=None, *, scale_rule="sqrt", honour_scale=True,
                   transpose=False):
    D = query.shape[-1]
    default = {"sqrt": D ** -0.5, "none": 1.0, "d": 1.0 / D, "times_sqrt": D ** 0.5}[scale_rule]
    honoured = {True: scale is not None, False: False, "truthy": bool(scale)}[honour_scale]
    factor = scale if honoured else default
    scores = key @ query.transpose(-2, -1) if transpose else query @ key.transpose(-2, -1)
    return scores * factor


SCALE_MISTAKES = (
    Mistake("missing 1/sqrt(D)",
            "Scale the dot products by 1/sqrt(D), D = query.shape[-1], so their variance "
            "stays near 1 and the softmax does not saturate.", {"scale_rule": "none"}),
    Mistake("1/D instead of 1/sqrt(D)",
            "The dot product of two random D-dim vectors has standard deviation sqrt(D): "
            "divide by sqrt(D), not D.", {"scale_rule": "d"}),
    Mistake("multiplied by sqrt(D) instead of dividing",
            "The scale is 1/sqrt(D): divide by sqrt(D).", {"scale_rule": "times_sqrt"}),
)

IGNORES_SCALE = Mistake(
    "ignores the scale argument",
    "Use `scale` when it is given; fall back to 1/sqrt(D) only when it is None.",
    {"honour_scale": False})
ZERO_SCALE_AS_NONE = Mistake(
    "scale=0 treated as no scale (scale or default)",
    "`scale or 1/sqrt(D)` replaces every falsy scale, and 0 is falsy: a scale of 0 is a legal "
    "choice (every key gets the same weight). Test `scale is None` instead.",
    {"honour_scale": "truthy"})

def attention_inputs(g, *shape, dtype=torch.float32, dv=None):
    """Query (..., T, D), key (..., S, D) and, if ``dv``, value (..., S, dv) from sizes."""
    *batch, T, S, D = shape
    tensors = (randn(*batch, T, D, generator=g, dtype=dtype),
               randn(*batch, S, D, generator=g, dtype=dtype))
    return tensors + ((randn(*batch, S, dv, generator=g, dtype=dtype),) if dv else ())


DISTINCT = "distinct sizes B, H, T, S, D = 2, 3, 5, 7, 4"


# ---------------------------------------------------------------- scaled dot-product attention

def attention_variant(query, key, value, scale=None, *, scale_rule="sqrt", softmax_dim=-1,
                      mix="weights", honour_scale=True):
    scores = scores_variant(query, key, scale, scale_rule=scale_rule, honour_scale=honour_scale)
    weights = torch.softmax(scores, dim=softmax_dim)
    return (weights if mix == "weights" else scores) @ value, weights


SOFTMAX_OVER_QUERIES = Mistake(
    "softmax over the query axis",
    "Each query's weights must sum to 1 over the keys: softmax along the last axis (dim=-1).",
    {"softmax_dim": -2})
SCORES_TIMES_VALUES = Mistake(
    "scores multiplied by V instead of the weights",
    "Multiply the softmax weights (rows summing to 1), not the raw scores, by the values.",
    {"mix": "scores"})


def _unmasked_attention(query, key, value, scale=None):
    return attention.scaled_dot_product_attention(query, key, value, scale=scale)


ATTENTION_OUTPUTS = (("out", "(B, H, T, Dv)"), ("weights", "(B, H, T, S)"))

SCALED_DOT_PRODUCT_ATTENTION = Exercise(
    name="scaled_dot_product_attention",
    reference=_unmasked_attention,
    inputs=("query", "key", "value"),
    outputs=ATTENTION_OUTPUTS,
    variant=attention_variant,
    mistakes=SCALE_MISTAKES + (SOFTMAX_OVER_QUERIES, SCORES_TIMES_VALUES, IGNORES_SCALE,
                               ZERO_SCALE_AS_NONE),
    forbidden=forbid((attention.scaled_dot_product_attention, attention.attention_scores)
                     + NO_BUILT_IN_ATTENTION, ATTENTION_BUILTINS),
)


def check_scaled_dot_product_attention(fn, seed: int = 0) -> None:
    """Check scaled_dot_product_attention(query, key, value, scale=None) -> (out, weights),
    written whole: the scaled scores, the softmax over the keys, the weighted sum of the values.

    Lesson: 02_scaled_dot_product
    """
    g = seeded(seed)
    cases = [
        Case(f"{DISTINCT}, Dv = 6", attention_inputs(g, 2, 3, 5, 7, 4, dv=6)),
        Case("float64, with gradients", attention_inputs(g, 2, 3, 5, 7, 4, dv=6,
                                                         dtype=torch.float64), grad=True),
        Case("self-attention sizes, T = S = 6", attention_inputs(g, 2, 3, 6, 6, 4, dv=4)),
        Case("an explicit scale=0.3", attention_inputs(g, 2, 3, 5, 7, 4, dv=6), {"scale": 0.3}),
        Case("scale=0 (legal: every key gets the same weight)",
             attention_inputs(g, 2, 3, 5, 7, 4, dv=6), {"scale": 0.0}),
        Case("a negative scale=-0.5, float64, with gradients",
             attention_inputs(g, 2, 3, 5, 7, 4, dv=6, dtype=torch.float64), {"scale": -0.5},
             grad=True),
        Case("one sequence without batch dims", attention_inputs(g, 5, 7, 4, dv=6)),
        Case("extra batch dims (2, 2, 3, T, D)", attention_inputs(g, 2, 2, 3, 5, 7, 4, dv=6)),
    ]
    run_check(SCALED_DOT_PRODUCT_ATTENTION, fn, cases)
