"""Checks for lesson 04_multi_head: splitting and merging heads, the MultiHeadAttention module
(its constructor and forward, in eval and in training mode)."""

import copy

import torch
import torch.nn.functional as F
from torch import nn

from .. import masks, multihead
from .framework import Case, Exercise, Harnessed, Mistake, randn, run_check, seeded
from .lesson03 import (
    CAUSAL_IGNORED_WITH_MASK,
    EMPTY_ROWS_NAN,
    FLOAT_MASK_AS_BOOL,
    FLOAT_MASK_IGNORED,
    LARGE_NEGATIVE,
    LARGE_NEGATIVE_HINT,
    NAN_REPLACED_AFTER_SOFTMAX,
    _empty_rows_filled,
    masked_attention_variant,
)
from .student import harness
from .student.shortcuts import forbid

# ---------------------------------------------------------------- split and merge heads

def split_variant(x, n_heads, *, method="transpose"):
    *batch, T, C = x.shape
    D = C // n_heads
    if method == "view":
        return x.reshape(*batch, n_heads, T, D)
    if method == "head_dim_first":
        return x.unflatten(-1, (D, n_heads)).movedim(-1, -3)  # (B,T,D,H) -> (B,H,T,D)
    return x.unflatten(-1, (n_heads, D)).transpose(-3, -2)


def merge_variant(x, *, method="transpose"):
    *batch, H, T, D = x.shape
    if method == "reshape":
        return x.reshape(*batch, T, H * D)
    return x.transpose(-3, -2).flatten(-2)


SPLIT_WITHOUT_TRANSPOSE = Mistake(
    "heads split with view and no transpose",
    "view(B, H, T, D) on a (B, T, C) tensor mixes tokens across heads. Reshape to "
    "(B, T, H, D) first, then swap the T and H axes.", {"split": "view"})
MERGE_WITHOUT_TRANSPOSE = Mistake(
    "heads merged without the inverse transpose",
    "Reshaping (B, H, T, D) straight to (B, T, C) mixes tokens. Swap H and T back first "
    "(B, T, H, D), then flatten the last two axes.", {"merge": "reshape"})

SPLIT_HEADS = Exercise(
    name="split_heads",
    reference=multihead.split_heads,
    inputs=("x", "n_heads"),
    outputs=(("heads", "(B, H, T, D) with D = C / H"),),
    variant=lambda x, n_heads, split="transpose": split_variant(x, n_heads, method=split),
    mistakes=(
        SPLIT_WITHOUT_TRANSPOSE,
        Mistake("head dim and head count swapped in the split",
                "Head h owns the contiguous slice C[h*D:(h+1)*D]: reshape the last axis to "
                "(H, D), not (D, H).", {"split": "head_dim_first"}),
    ),
    forbidden=forbid([multihead.split_heads]),
)

MERGE_HEADS = Exercise(
    name="merge_heads",
    reference=multihead.merge_heads,
    inputs=("x",),
    outputs=(("merged", "(B, T, C) with C = H * D"),),
    variant=lambda x, merge="transpose": merge_variant(x, method=merge),
    mistakes=(MERGE_WITHOUT_TRANSPOSE,),
    forbidden=forbid([multihead.merge_heads]),
)


def check_split_heads(fn, seed: int = 0) -> None:
    """Check split_heads(x, n_heads): (B, T, C) -> (B, H, T, D). Lesson: 04_multi_head"""
    g = seeded(seed)
    cases = [
        Case("B, T, C = 2, 5, 12 into H = 3 heads of D = 4", (randn(2, 5, 12, generator=g), 3)),
        Case("the same width into H = 4 heads of D = 3", (randn(2, 5, 12, generator=g), 4)),
        Case("float64, with gradients", (randn(2, 5, 12, generator=g, dtype=torch.float64), 3),
             grad=True),
        Case("one head (H = 1)", (randn(2, 5, 6, generator=g), 1)),
    ]
    run_check(SPLIT_HEADS, fn, cases)


def check_merge_heads(fn, seed: int = 0) -> None:
    """Check merge_heads(x): (B, H, T, D) -> (B, T, H * D). Lesson: 04_multi_head"""
    g = seeded(seed)
    cases = [
        Case("B, H, T, D = 2, 3, 5, 4", (randn(2, 3, 5, 4, generator=g),)),
        Case("B, H, T, D = 2, 4, 5, 3", (randn(2, 4, 5, 3, generator=g),)),
        Case("float64, with gradients", (randn(2, 3, 5, 4, generator=g, dtype=torch.float64),),
             grad=True),
    ]
    run_check(MERGE_HEADS, fn, cases)


# ---------------------------------------------------------------- MultiHeadAttention

def mha_variant(module, query, key, value, attn_mask=None, is_causal=False, *,
                split="transpose", merge="transpose", scale="d_head", project_output=True,
                swap_kv=False, shared_kv=False, dropout="weights", **masking):
    """``masking``: how the masks are applied, as in lesson 03's masked attention; ``dropout``:
    where dropout acts while the module is training ("weights", "output" before the output
    projection, or "never")."""
    H, C = module.n_heads, module.d_model
    k_proj, v_proj = (module.v_proj, module.k_proj) if swap_kv else (module.k_proj, module.v_proj)
    k_proj = v_proj if shared_kv else k_proj  # one layer for both: it holds the values' weights
    q = split_variant(module.q_proj(query), H, method=split)  # (B, T, C) -> (B, H, T, D)
    k = split_variant(k_proj(key), H, method=split)
    v = split_variant(v_proj(value), H, method=split)
    factor = (C // H) ** -0.5 if scale == "d_head" else C ** -0.5
    out, weights = masked_attention_variant(q, k, v, attn_mask, is_causal, factor, **masking)
    p = module.dropout if module.training and dropout != "never" else 0.0
    if p > 0.0 and dropout == "weights":
        weights = F.dropout(weights, p)
        out = weights @ v  # (B, H, T, S) @ (B, H, S, D) -> (B, H, T, D)
    elif p > 0.0:
        out = F.dropout(out, p)
    out = merge_variant(out, method=merge)  # (B, H, T, D) -> (B, T, C)
    return (module.out_proj(out) if project_output else out), weights


def _dropout_in_eval_mode(got, expected) -> bool:
    """Weights that are the expected ones, some zeroed and the rest scaled by 1/(1-p)."""
    weights, expected_weights = got[1], expected[1]
    dropped = weights == 0
    scale = (weights[~dropped] / expected_weights[~dropped]).mean()
    return bool((dropped & (expected_weights > 0)).any()
                and torch.allclose(weights[~dropped], scale * expected_weights[~dropped])
                and scale > 1.0)


DROPOUT_IN_EVAL_MODE = Mistake(
    "dropout applied in eval mode",
    "Dropout is for training only: pass dropout_p=self.dropout if self.training else 0.0.",
    sign=_dropout_in_eval_mode)


MHA_MISTAKES = (
    SPLIT_WITHOUT_TRANSPOSE,
    MERGE_WITHOUT_TRANSPOSE,
    Mistake("d_model instead of d_head in the scale",
            "Each head computes dot products of D = C / H dimensions: scale by 1/sqrt(D), which "
            "the attention function does by default from the last axis of q.",
            {"scale": "d_model"}),
    Mistake("missing output projection",
            "After merging the heads, apply self.out_proj: it mixes what the heads found.",
            {"project_output": False}),
    Mistake("key and value projections swapped",
            "Keys come from self.k_proj(key) and values from self.v_proj(value).",
            {"swap_kv": True}),
    Mistake("one projection shared by key and value",
            "Keys and values need projections of their own, two separate nn.Linear layers: a "
            "layer assigned to both names (or used for both) gives the keys the values' "
            "weights.", {"shared_kv": True}),
    Mistake("is_causal not passed on",
            "Pass is_causal on to the attention function: with is_causal=True query t must not "
            "see the keys after t.", {"causal": "ignored"}),
    CAUSAL_IGNORED_WITH_MASK,
    Mistake("attn_mask not passed on",
            "Pass attn_mask on to the attention function.", {"use_mask": False}),
    FLOAT_MASK_AS_BOOL, FLOAT_MASK_IGNORED, EMPTY_ROWS_NAN,
    Mistake(LARGE_NEGATIVE, LARGE_NEGATIVE_HINT, sign=_empty_rows_filled),
    DROPOUT_IN_EVAL_MODE,
)


DROPOUT_NEVER_IN_TRAINING = Mistake(
    "dropout never applied in training",
    "While the module is training (self.training is True), attention drops each weight with "
    "probability self.dropout, the dropout the constructor was given; in eval mode it drops "
    "nothing.", {"dropout": "never"})
DROPOUT_ON_THE_OUTPUT = Mistake(
    "dropout applied to the output instead of the weights",
    "Attention dropout acts on the (B, H, T, S) weights, before they multiply the values, and "
    "the weights returned are the ones used, after dropout.", {"dropout": "output"})
TRAINING_MISTAKES = (DROPOUT_NEVER_IN_TRAINING, DROPOUT_ON_THE_OUTPUT)


def _forbidden_mha():
    return forbid([multihead.MultiHeadAttention.forward, nn.MultiheadAttention.forward,
                   F.multi_head_attention_forward], ["_native_multi_head_attention"])


def _mha_exercise(references: dict, mistakes: tuple) -> Exercise:
    return Exercise(
        name="MultiHeadAttention",
        reference=lambda q, k, v, **kw: references[q.dtype](q, k, v, **kw),
        inputs=("query", "key", "value"),
        outputs=(("out", "(B, T, C)"), ("weights", "(B, H, T, S)")),
        variant=lambda q, k, v, **kw: mha_variant(references[q.dtype], q, k, v, **kw),
        mistakes=mistakes,
        forbidden=_forbidden_mha(),
        nan_gradient=NAN_REPLACED_AFTER_SOFTMAX,
    )


def _in_both_precisions(module: nn.Module) -> dict:
    return {torch.float32: module, torch.float64: copy.deepcopy(module).double()}


def check_multi_head_attention(cls, seed: int = 0) -> None:
    """Check a MultiHeadAttention class, its constructor and its forward.

    The student's module is built with the constructor's arguments and gets the reference's
    weights (their names and shapes are the contract), then both run on the same inputs: in
    eval mode with dropout=0.5 and biases, then in training mode with dropout=1.0 and
    bias=False, where every attention weight is dropped: the weights are 0 and so is the output.
    Lesson: 04_multi_head
    """
    torch.manual_seed(seed)
    reference = multihead.MultiHeadAttention(12, 3, dropout=0.5).eval()
    references = _in_both_precisions(reference)
    # in eval mode with dropout 0.5: in eval mode dropout must do nothing
    init = {"d_model": reference.d_model, "n_heads": reference.n_heads, "dropout": 0.5}
    student = Harnessed(harness.ModuleUnderTest, (cls, init, dict(reference.state_dict())))
    cases = _mha_cases(seed)
    run_check(_mha_exercise(references, MHA_MISTAKES), student, cases,
              reference_parameters=lambda: dict(references[torch.float64].named_parameters()),
              quiet=True)

    # in training mode with dropout 1.0: every weight is dropped, and without biases the output
    # projection of the zero attention output is 0 too (the reference computes exactly that)
    training = multihead.MultiHeadAttention(12, 3, dropout=1.0, bias=False).train()
    trained = _in_both_precisions(training)
    init = {"d_model": 12, "n_heads": 3, "dropout": 1.0, "bias": False}
    student = Harnessed(harness.ModuleUnderTest, (cls, init, dict(training.state_dict()), True))
    run_check(_mha_exercise(trained, TRAINING_MISTAKES), student, _training_cases(seed),
              earlier=len(cases))


def _training_cases(seed: int) -> list[Case]:
    g = seeded(seed + 100)
    x, memory = randn(2, 5, 12, generator=g), randn(2, 7, 12, generator=g)
    return [
        Case("training mode, dropout=1.0, bias=False: self-attention, B, T, C = 2, 5, 12",
             (x, x, x)),
        Case("training mode, dropout=1.0, bias=False: cross-attention, causal, T = 5, S = 7",
             (x, memory, memory), {"is_causal": True}),
    ]


def _mha_cases(seed: int) -> list[Case]:
    g = seeded(seed)
    x = randn(2, 5, 12, generator=g)
    memory = randn(2, 7, 12, generator=g)
    additive = randn(5, 7, generator=g).masked_fill(randn(5, 7, generator=g) > 1, float("-inf"))
    additive[:, 0] = 0.0  # every query keeps key 0; a 0 keeps a position, it does not hide it
    with_empty_row = randn(5, 7, generator=g) < 1
    with_empty_row[:, 0] = True
    with_empty_row[2] = False
    padding = masks.padding_mask(torch.tensor([7, 4]), 7)
    return [
        Case("self-attention, B, T, C = 2, 5, 12 with H = 3 heads", (x, x, x)),
        Case("cross-attention: T = 5 queries, S = 7 keys and values", (x, memory, memory)),
        Case("causal self-attention", (x, x, x), {"is_causal": True}),
        Case("a (B, 1, 1, S) padding mask, lengths 7 and 4", (x, memory, memory),
             {"attn_mask": padding}),
        Case("float64, with gradients for the inputs and every parameter",
             (x.double(), memory.double(), memory.double()), grad=True),
        Case("a (T, S) float mask added to the scores, some entries -inf", (x, memory, memory),
             {"attn_mask": additive}),
        Case("a (T, S) bool mask whose query 2 may attend to nothing, float64, with gradients",
             (x.double(), memory.double(), memory.double()), {"attn_mask": with_empty_row},
             grad=True),
        Case("is_causal=True together with a padding mask (both apply), T = 5, S = 7",
             (x, memory, memory), {"attn_mask": padding, "is_causal": True}),
    ]
