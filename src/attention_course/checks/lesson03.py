"""Checks for lesson 03_masking: causal and padding masks, applying masks, masked attention,
attention over packed sequences of different lengths, converting to nn.MultiheadAttention's
convention."""

import torch

from .. import attention, masks
from .framework import Case, Exercise, Mistake, randn, run_check, seeded
from .lesson02 import (
    ATTENTION_BUILTINS,
    ATTENTION_OUTPUTS,
    IGNORES_SCALE,
    NO_BUILT_IN_ATTENTION,
    SOFTMAX_OVER_QUERIES,
    ZERO_SCALE_AS_NONE,
    attention_inputs,
    scores_variant,
)
from .student.shortcuts import forbid

FILLS = {"-inf": float("-inf"), "zero": 0.0}

INVERTED = Mistake(
    "mask polarity inverted",
    "In this course (and in F.scaled_dot_product_attention) True means 'may attend'. "
    "nn.MultiheadAttention uses the opposite convention (True = ignore).", {"inverted": True})
FILLED_WITH_ZERO = Mistake(
    "masked positions filled with 0 instead of -inf",
    "A score of 0 (from filling with 0 or from multiplying the scores by the mask) still gets "
    "weight exp(0) > 0 after the softmax. Fill hidden positions with float('-inf') so they get "
    "exactly 0.", {"fill": "zero"})
LARGE_NEGATIVE = "masked positions filled with a large negative number instead of -inf"
LARGE_NEGATIVE_HINT = ("-1e9 looks the same after the softmax, until a query has no allowed "
                       "key: its row then gets weights instead of staying empty. Use "
                       "float('-inf').")
FLOAT_MASK_IGNORED = Mistake(
    "float mask ignored",
    "A float mask is added to the scores (0 keeps a position, -inf hides it).",
    {"float_mask": "ignore"})
FLOAT_MASK_AS_BOOL = Mistake(
    "float mask treated as a bool mask",
    "A float mask does not pick positions: it is added to the scores, so 0 keeps a position, "
    "-inf hides it and any other value shifts the score. Only a bool mask picks positions; "
    "tell the two kinds apart by their dtype.", {"float_mask": "as_bool"})
EMPTY_ROWS_NAN = Mistake(
    "fully masked rows give NaN",
    "A query with no allowed key has a row of -inf scores, and softmax gives NaN there. Set "
    "such rows' weights to 0 (as F.scaled_dot_product_attention does).", {"empty_rows": "nan"})
CAUSAL_IGNORED_WITH_FLOAT_MASK = Mistake(
    "is_causal ignored when attn_mask is a float mask",
    "is_causal=True applies with a float mask too. A bool causal mask and a float mask do not "
    "combine with &: turn the causal mask into 0 / -inf and add both to the scores.",
    {"causal": "without_float_mask"})
EMPTY_ROWS_NAN_WITH_FLOAT_MASK = Mistake(
    "rows hidden by a float mask give NaN",
    "A float mask can hide a whole row too (all -inf). Find the rows with no allowed key from "
    "the masked scores themselves, whatever the kind of mask, and give them zero weights.",
    {"empty_rows": "nan_with_float_mask"})
NAN_REPLACED_AFTER_SOFTMAX = Mistake(
    "NaN of fully masked rows replaced after the softmax (NaN gradients)",
    "The output is right, but the softmax of a row of -inf still computed NaN, and the backward "
    "pass goes through it: NaN * 0 is NaN, so nan_to_num, torch.where or masked_fill afterwards "
    "cannot clean the gradient. Never let the softmax see a row of -inf: give such rows finite "
    "scores (0, say) before the softmax, then set their weights to 0.")
CAUSAL_IGNORED_WITH_MASK = Mistake(
    "is_causal ignored when attn_mask is given",
    "is_causal=True and attn_mask apply together: a key is visible only if both allow it, "
    "whichever kind (bool or float) attn_mask is.", {"causal": "without_mask"})


def _large_negative_scores(got, expected) -> bool:
    """Finite, very negative scores exactly where -inf was expected; equal elsewhere."""
    (got,), (expected,) = got, expected
    hidden = expected.isneginf()
    return bool(hidden.any() and (got[hidden] < -100).all() and got[hidden].isfinite().all()
                and torch.allclose(got[~hidden], expected[~hidden]))


def _empty_rows_filled(got, expected) -> bool:
    """Rows of weights that should be all 0 sum to 1 instead; all other rows are right."""
    weights, expected_weights = got[1], expected[1]
    empty = (expected_weights == 0).all(dim=-1)  # (B, H, T)
    return bool(empty.any() and torch.allclose(weights[empty].sum(-1), torch.ones(1).to(weights))
                and torch.allclose(weights[~empty], expected_weights[~empty]))


# ---------------------------------------------------------------- causal mask

def causal_variant(T, S=None, device=None, *, diagonal=0, transposed=False, inverted=False,
                   bottom_right=False, honour_device=True):
    S = T if S is None else S
    ones = torch.ones(T, S, dtype=torch.bool, device=device if honour_device else None)
    offset = diagonal + (S - T if bottom_right else 0)
    mask = ones.triu(-offset) if transposed else ones.tril(offset)
    return ~mask if inverted else mask


CAUSAL_TRANSPOSED = Mistake(
    "causal mask transposed (the future is visible)",
    "Query t (row t) may attend to keys s <= t (columns 0..t): a lower-triangular mask, "
    "not an upper one.", {"transposed": True})

CAUSAL_MASK = Exercise(
    name="causal_mask",
    reference=masks.causal_mask,
    inputs=("T", "S"),
    outputs=(("mask", "(T, S) bool"),),
    variant=causal_variant,
    mistakes=(
        CAUSAL_TRANSPOSED,
        Mistake("causal mask excludes the diagonal (a token cannot see itself)",
                "Position t may attend to itself: keep the diagonal.", {"diagonal": -1}),
        Mistake("causal mask off by one (each token sees the next one)",
                "Keys after t are the future: only s <= t is allowed.", {"diagonal": 1}),
        INVERTED,
        Mistake("causal mask aligned at the bottom-right corner",
                "For T != S we follow is_causal=True of F.scaled_dot_product_attention: "
                "query t sees keys 0..t (top-left aligned), whatever S is.",
                {"bottom_right": True}),
        Mistake("device argument ignored",
                "The mask must be built on the device it is given (a GPU, say), where the "
                "scores it masks live: pass device=device to the function that creates it.",
                {"honour_device": False}),
    ),
    forbidden=forbid([masks.causal_mask]),
)


def check_causal_mask(fn, seed: int = 0) -> None:
    """Check causal_mask(T, S=None, device=None) -> (T, S) bool. Lesson: 03_masking"""
    cases = [
        Case("T = 5 queries, S defaults to T", (5,)),
        Case("more keys than queries, T = 4, S = 6", (4, 6)),
        Case("more queries than keys, T = 6, S = 4", (6, 4)),
        Case("a single position", (1,)),
        Case("device given", (3,), {"device": "cpu"}),
        Case("device='cpu' while torch's default device is 'meta' (a device without data): the "
             "mask must be built on the device given", (4, 6), {"device": "cpu"},
             default_device="meta"),
    ]
    run_check(CAUSAL_MASK, fn, cases)


# ---------------------------------------------------------------- padding mask

def padding_variant(lengths, S, *, inverted=False, axis="key", inclusive=False):
    positions = torch.arange(S)  # (S,)
    keep = positions <= lengths[:, None] if inclusive else positions < lengths[:, None]
    keep = ~keep if inverted else keep  # (B, S)
    return keep[:, None, None, :] if axis == "key" else keep[:, None, :, None]


PADDING_MASK = Exercise(
    name="padding_mask",
    reference=masks.padding_mask,
    inputs=("lengths", "S"),
    outputs=(("mask", "(B, 1, 1, S) bool: one row of keys per sequence"),),
    variant=padding_variant,
    mistakes=(
        INVERTED,
        Mistake("padding mask on the query axis",
                "Padding hides keys (columns), so every query ignores them: shape (B, 1, 1, S), "
                "not (B, 1, S, 1).", {"axis": "query"}),
        Mistake("padding mask off by one (the first pad token is visible)",
                "A sequence of length L has real tokens at positions 0..L-1: keep s < L.",
                {"inclusive": True}),
    ),
    forbidden=forbid([masks.padding_mask]),
)


def check_padding_mask(fn, seed: int = 0) -> None:
    """Check padding_mask(lengths, S) -> (B, 1, 1, S) bool. Lesson: 03_masking"""
    cases = [
        Case("three sequences of lengths 3, 5, 1 padded to S = 6", (torch.tensor([3, 5, 1]), 6)),
        Case("a full-length and an empty sequence", (torch.tensor([4, 0]), 4)),
        Case("one sequence", (torch.tensor([2]), 3)),
    ]
    run_check(PADDING_MASK, fn, cases)


# ---------------------------------------------------------------- applying a mask

def apply_variant(scores, attn_mask, *, inverted=False, fill="-inf", float_mask="add"):
    if attn_mask is None:
        return scores
    if attn_mask.dtype != torch.bool and float_mask == "as_bool":  # 0 read as "hidden"
        return scores.masked_fill(attn_mask == 0, FILLS[fill])
    if attn_mask.dtype != torch.bool:
        return scores if float_mask == "ignore" else scores + attn_mask
    hidden = attn_mask if inverted else ~attn_mask
    return scores.masked_fill(hidden, FILLS[fill])


APPLY_MASK = Exercise(
    name="apply_mask",
    reference=masks.apply_mask,
    inputs=("scores", "attn_mask"),
    outputs=(("masked scores", "(B, H, T, S), like scores"),),
    variant=apply_variant,
    mistakes=(
        INVERTED, FILLED_WITH_ZERO,
        Mistake(LARGE_NEGATIVE, LARGE_NEGATIVE_HINT, sign=_large_negative_scores),
        FLOAT_MASK_IGNORED, FLOAT_MASK_AS_BOOL,
    ),
    forbidden=forbid([masks.apply_mask]),
)


def check_apply_mask(fn, seed: int = 0) -> None:
    """Check apply_mask(scores, attn_mask) -> masked scores. Lesson: 03_masking"""
    g = seeded(seed)
    scores = randn(2, 3, 5, 7, generator=g)
    padding = masks.padding_mask(torch.tensor([7, 4]), 7)
    additive = randn(5, 7, generator=g).masked_fill(randn(5, 7, generator=g) > 1, float("-inf"))
    additive[:, 0] = 0.0  # a float mask's 0 keeps a position: it does not hide it
    cases = [
        Case("a (T, S) = (5, 7) causal bool mask on (B, H, T, S) = (2, 3, 5, 7) scores",
             (scores, masks.causal_mask(5, 7))),
        Case("a (B, 1, 1, S) padding mask, lengths 7 and 4", (scores, padding)),
        Case("a float mask with some -inf entries, added to the scores", (scores, additive)),
        Case("float64 scores, with gradients",
             (scores.double(), masks.causal_mask(5, 7)), grad=True),
        Case("no mask (None): scores unchanged", (scores, None)),
        Case("(T, S) scores without batch dims, a (T, S) bool mask",
             (scores[0, 0], masks.causal_mask(5, 7))),
    ]
    run_check(APPLY_MASK, fn, cases)


# ---------------------------------------------------------------- masked attention

def masked_attention_variant(query, key, value, attn_mask=None, is_causal=False, scale=None, *,
                             inverted=False, fill="-inf", after_softmax=False,
                             empty_rows="zero", causal="lower", softmax_dim=-1,
                             use_mask=True, honour_scale=True, float_mask="add"):
    scores = scores_variant(query, key, scale, honour_scale=honour_scale)  # (B, H, T, S)
    T, S = scores.shape[-2:]
    causal_mask = causal_variant(T, S, transposed=causal == "transposed")
    float_mask_given = attn_mask is not None and attn_mask.dtype != torch.bool
    hide_future = is_causal and (causal in ("lower", "transposed")
                                 or causal == "without_mask" and attn_mask is None
                                 or causal == "without_float_mask" and not float_mask_given)
    attn_mask = attn_mask if use_mask else None
    if hide_future:
        attn_mask = masks.combine_masks(causal_mask, attn_mask)
    if after_softmax:
        hidden = apply_variant(torch.zeros_like(scores), attn_mask).isneginf()
        weights = torch.softmax(scores, dim=softmax_dim).masked_fill(hidden, 0.0)
        return weights @ value, weights
    scores = apply_variant(scores, attn_mask, inverted=inverted, fill=fill, float_mask=float_mask)
    if empty_rows == "zero" or empty_rows == "nan_with_float_mask" and not float_mask_given:
        # rows with no allowed key: finite scores into the softmax (no NaN, in the gradients
        # either), zero weights out of it
        empty = scores.isneginf().all(dim=-1, keepdim=True)  # (B, H, T, 1)
        weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=softmax_dim)
        return weights.masked_fill(empty, 0.0).nan_to_num(0.0) @ value, \
            weights.masked_fill(empty, 0.0).nan_to_num(0.0)
    weights = torch.softmax(scores, dim=softmax_dim)
    return weights @ value, weights


MASKED_ATTENTION = Exercise(
    name="masked_attention",
    reference=attention.masked_attention,
    inputs=("query", "key", "value", "attn_mask"),
    outputs=ATTENTION_OUTPUTS,
    variant=masked_attention_variant,
    mistakes=(
        INVERTED, FILLED_WITH_ZERO,
        Mistake(LARGE_NEGATIVE, LARGE_NEGATIVE_HINT, sign=_empty_rows_filled),
        Mistake("mask applied after the softmax",
                "Zeroing weights after the softmax leaves rows that no longer sum to 1. Mask "
                "the scores (with -inf) before the softmax.", {"after_softmax": True}),
        EMPTY_ROWS_NAN, EMPTY_ROWS_NAN_WITH_FLOAT_MASK,
        Mistake("is_causal ignored",
                "When is_causal=True, also hide the future (combined with attn_mask if both "
                "are given).", {"causal": "ignored"}),
        CAUSAL_IGNORED_WITH_MASK, CAUSAL_IGNORED_WITH_FLOAT_MASK,
        Mistake(CAUSAL_TRANSPOSED.name, CAUSAL_TRANSPOSED.hint, {"causal": "transposed"}),
        Mistake("attn_mask ignored",
                "Apply attn_mask to the scores before the softmax (and combine it with the "
                "causal mask when is_causal=True).", {"use_mask": False}),
        FLOAT_MASK_IGNORED, FLOAT_MASK_AS_BOOL,
        SOFTMAX_OVER_QUERIES, IGNORES_SCALE, ZERO_SCALE_AS_NONE,
    ),
    nan_gradient=NAN_REPLACED_AFTER_SOFTMAX,
    forbidden=forbid((attention.masked_attention, attention.scaled_dot_product_attention)
                     + NO_BUILT_IN_ATTENTION, ATTENTION_BUILTINS),
)


def check_masked_attention(fn, seed: int = 0) -> None:
    """Check masked_attention(query, key, value, attn_mask=None, is_causal=False, scale=None).

    Lesson: 03_masking
    """
    g = seeded(seed)
    qkv = attention_inputs(g, 2, 3, 5, 7, 4, dv=6)
    self_qkv = attention_inputs(g, 2, 3, 6, 6, 4, dv=4)
    with_empty_row = masks.causal_mask(5, 7).clone()
    with_empty_row[2] = False
    additive = randn(5, 7, generator=g).masked_fill(randn(5, 7, generator=g) > 1, float("-inf"))
    additive[:, 0] = 0.0
    additive_with_empty_row = additive.clone()
    additive_with_empty_row[3] = float("-inf")
    self_additive = randn(6, 6, generator=g).masked_fill(randn(6, 6, generator=g) > 1,
                                                         float("-inf"))
    self_additive[:, 0] = 0.0
    cases = [
        Case("no mask, B, H, T, S, D, Dv = 2, 3, 5, 7, 4, 6", qkv),
        Case("a (B, 1, 1, S) padding mask, lengths 7 and 4",
             qkv + (masks.padding_mask(torch.tensor([7, 4]), 7),)),
        Case("is_causal=True for self-attention, T = S = 6", self_qkv, {"is_causal": True}),
        Case("is_causal=True with T = 5 queries and S = 7 keys", qkv, {"is_causal": True}),
        Case("a mask whose query 2 may attend to nothing, float64, with gradients",
             tuple(x.double() for x in qkv) + (with_empty_row,), grad=True),
        Case("a float mask with some -inf entries", qkv + (additive,)),
        Case("is_causal=True together with a padding mask (both apply)",
             self_qkv + (masks.padding_mask(torch.tensor([6, 3]), 6),), {"is_causal": True}),
        Case("is_causal=True together with a float mask (both apply)",
             self_qkv + (self_additive,), {"is_causal": True}),
        Case("a float mask whose query 3 may attend to nothing (a row of -inf), with gradients",
             qkv + (additive_with_empty_row,), grad=True),
        Case("an explicit scale=0.3", qkv, {"scale": 0.3}),
        Case("scale=0 with a padding mask (every visible key gets the same weight)",
             qkv + (masks.padding_mask(torch.tensor([7, 4]), 7),), {"scale": 0.0}),
        Case("one sequence without batch dims, (T, D) and (S, D), with a (T, S) bool mask",
             attention_inputs(g, 5, 7, 4, dv=6) + (masks.causal_mask(5, 7),)),
        Case("extra batch dims (2, 2, 3, T, D), is_causal=True",
             attention_inputs(g, 2, 2, 3, 5, 7, 4, dv=6), {"is_causal": True}),
    ]
    run_check(MASKED_ATTENTION, fn, cases)


# ---------------------------------------------------------------- packed sequences

def _attend(query, key, value, allowed):
    """Attention where ``allowed`` (bool, broadcasting to the scores) says which keys each
    query sees; a query that sees none gets 0. Plain operations, so that the variant, used as
    an answer, calls no attention the checks refuse."""
    scores = (query @ key.transpose(-2, -1) * query.shape[-1] ** -0.5).masked_fill(
        ~allowed, float("-inf"))
    empty = scores.isneginf().all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    return weights @ value


def packed_variant(query, key, value, lengths, is_causal=False, *, pads="hidden", causal=True,
                   across=False, pad_rows=False):
    """Packed attention with one of the known slips: pad keys visible, the causal mask lost,
    the packed tokens attended as one sequence, the pad rows returned too."""
    hide_future = is_causal and causal
    if across:  # every token of every sequence in one attention
        N = query.shape[0]
        return _attend(query, key, value, masks.causal_mask(N) if hide_future
                       else torch.ones(N, N, dtype=torch.bool))
    B, L = lengths.shape[0], int(lengths.max())
    real = torch.arange(L) < lengths[:, None]  # (B, L)
    q, k, v = (x.new_zeros(B, L, x.shape[-1]).index_put((real,), x) for x in (query, key, value))
    allowed = real[:, None, :] if pads == "hidden" else torch.ones(1, 1, L, dtype=torch.bool)
    if hide_future:
        allowed = allowed & masks.causal_mask(L)
    out = _attend(q, k, v, allowed)  # (B, L, Dv)
    return out.flatten(0, 1) if pad_rows else out[real]


PACKED_ATTENTION = Exercise(
    name="packed_attention",
    reference=attention.packed_attention,
    inputs=("query", "key", "value", "lengths"),
    outputs=(("out", "(N, Dv): the packed rows of every sequence"),),
    variant=packed_variant,
    mistakes=(
        Mistake("pad keys not hidden (no padding mask, or one on the queries' axis)",
                "The real tokens of a short sequence see its pad keys too. Padding is about "
                "keys: the mask hides key s of sequence b when s >= lengths[b], for every query. "
                "Hiding pad queries instead changes only the pad rows, which are dropped.",
                {"pads": "visible"}),
        Mistake("causal mask lost (is_causal ignored, or combined with the padding mask by OR)",
                "With is_causal, a key is visible when BOTH masks allow it: AND. The OR of the "
                "two lets every token see all the real tokens of its sequence, the future "
                "included.", {"causal": False}),
        Mistake("the packed tokens attended as one sequence",
                "Attention over all N rows at once lets each sequence see the tokens of the "
                "others. Give every sequence a row of its own in a (B, L) batch, padded to the "
                "longest, and attend in that batch.", {"across": True}),
        Mistake("pad rows returned with the real ones",
                "The output is packed like the queries: N rows, the real tokens only, sequence "
                "after sequence. Drop the rows of the pad positions.", {"pad_rows": True}),
    ),
    forbidden=forbid((attention.packed_attention, attention.masked_attention,
                      attention.scaled_dot_product_attention) + NO_BUILT_IN_ATTENTION,
                     ATTENTION_BUILTINS),
)


def packed_inputs(g, lengths, D=4, Dv=3, dtype=torch.float32):
    """Packed (N, D) queries and keys, (N, Dv) values and the (B,) lengths."""
    lengths = torch.tensor(lengths)
    N = int(lengths.sum())
    return (randn(N, D, generator=g, dtype=dtype), randn(N, D, generator=g, dtype=dtype),
            randn(N, Dv, generator=g, dtype=dtype), lengths)


def check_packed_attention(fn, seed: int = 0) -> None:
    """Check packed_attention(query, key, value, lengths, is_causal=False) -> (N, Dv).

    Lesson: 03_masking
    """
    g = seeded(seed)
    first = [5, 2, 4] if seed == 0 else [4, 6, 1]
    cases = [
        Case(f"B = 3 sequences of lengths {first}, D = 4, Dv = 3", packed_inputs(g, first)),
        Case(f"the same lengths {first}, is_causal=True", packed_inputs(g, first),
             {"is_causal": True}),
        Case("lengths 3, 0, 6: a sequence with no token, is_causal=True",
             packed_inputs(g, [3, 0, 6]), {"is_causal": True}),
        Case("lengths 2, 6, 3, float64, with gradients",
             packed_inputs(g, [2, 6, 3], dtype=torch.float64), grad=True),
        Case("two sequences of the same length 4: no pads at all", packed_inputs(g, [4, 4])),
        Case("a single sequence of length 7, is_causal=True", packed_inputs(g, [7]),
             {"is_causal": True}),
    ]
    run_check(PACKED_ATTENTION, fn, cases)


# ---------------------------------------------------------------- nn.MultiheadAttention masks

def mha_mask_variant(attn_mask, *, flip_bool=True, float_to_bool=False):
    if attn_mask.dtype != torch.bool:
        return attn_mask.isneginf() if float_to_bool else attn_mask
    return ~attn_mask if flip_bool else attn_mask


TO_MHA_MASK = Exercise(
    name="to_mha_mask",
    reference=masks.to_mha_mask,
    inputs=("attn_mask",),
    outputs=(("mask", "(same shape as attn_mask)"),),
    variant=mha_mask_variant,
    mistakes=(
        Mistake("bool mask not inverted for nn.MultiheadAttention",
                "nn.MultiheadAttention reads True as 'ignore this key': flip a bool mask "
                "with ~mask (logical not).", {"flip_bool": False}),
        Mistake("float mask converted to bool",
                "A float mask is added to the scores in both conventions: return it unchanged.",
                {"float_to_bool": True}),
    ),
    forbidden=forbid([masks.to_mha_mask]),
)


def check_to_mha_mask(fn, seed: int = 0) -> None:
    """Check to_mha_mask(attn_mask): our bool convention -> nn.MultiheadAttention's.

    Lesson: 03_masking
    """
    g = seeded(seed)
    cases = [
        Case("a (5, 7) causal bool mask", (masks.causal_mask(5, 7),)),
        Case("a (B, 1, 1, S) padding mask", (masks.padding_mask(torch.tensor([3, 1]), 4),)),
        Case("a float mask (means the same in both conventions)",
             (randn(5, 7, generator=g).masked_fill(randn(5, 7, generator=g) > 1,
                                                   float("-inf")),)),
        Case("a float64 float mask", (randn(2, 1, 1, 4, generator=g, dtype=torch.float64),)),
    ]
    run_check(TO_MHA_MASK, fn, cases)
