"""Checks for lesson 08_flash_backward: the gradients of attention from the whole matrix, the
tiled backward pass that recomputes the weights from the logsumexps, and the
``torch.autograd.Function`` that puts FlashAttention's forward and backward together."""

import torch
import torch.autograd.functional
import torch.func

from .. import flash, tiled
from ..attention import compute_dtype
from .framework import Case, Exercise, Harnessed, Mistake, randn, run_check, seeded
from .lesson02 import ATTENTION_BUILTINS, IGNORES_SCALE, NO_BUILT_IN_ATTENTION
from .lesson07 import OUT_OF_TORCH, OUT_OF_TORCH_BUILTINS, scale_factor
from .student import harness
from .student.shortcuts import forbid

NEG_INF = float("-inf")
# the gradients by autograd instead of by hand: what every exercise of this lesson replaces
AUTOGRAD = (torch.autograd.grad, torch.autograd.backward, torch.Tensor.backward,
            torch.autograd.functional.vjp, torch.func.vjp, torch.func.grad,
            torch.autograd.graph._engine_run_backward, harness._engine_backward)
ENGINE = ("run_backward",)  # the autograd engine itself, which all of the above end in


def _hidden(T: int, S: int, first_key: int, b: int, device, top_left: bool = False):
    """(T, b) bool: keys first_key .. first_key+b-1 hidden from the T queries (causal mask at
    the bottom-right, or at the top-left)."""
    rows = torch.arange(T, device=device)[:, None] + (0 if top_left else S - T)
    return torch.arange(first_key, first_key + b, device=device) > rows


def _softmax_backward(p, dp, d, d_term: str):
    """dS from P, dP and D: with the D term, without it, or with dP's unweighted row sum."""
    if d_term == "none":
        return p * dp
    if d_term == "rowsum_dp":
        return p * (dp - dp.sum(dim=-1, keepdim=True))
    if d_term == "identity":
        return dp
    return p * (dp - d)


# ---------------------------------------------------------------- the gradients, whole matrix

def backward_variant(query, key, value, dout, scale=None, *, d_term="rowsum_do_o",
                     grad_scale=1, swap=False, scale_rule="sqrt", honour_scale=True):
    """attention_backward with one of the known slips: the softmax's backward without its D
    term or with another one, the scale left out of dQ and dK or applied twice, dQ and dK
    swapped, the scale argument ignored."""
    factor = scale_factor(scale, query.shape[-1], scale_rule, honour_scale)
    p = torch.softmax(query @ key.transpose(-2, -1) * factor, dim=-1)
    out = p @ value
    dv = p.transpose(-2, -1) @ dout
    dp = dout @ value.transpose(-2, -1)
    ds = _softmax_backward(p, dp, (dout * out).sum(-1, keepdim=True), d_term)
    dq = ds @ key * factor ** grad_scale
    dk = ds.transpose(-2, -1) @ query * factor ** grad_scale
    return (dk, dq, dv) if swap else (dq, dk, dv)


D_MISSING = Mistake(
    "the D term missing from the softmax's backward (dS = P * dP)",
    "Each weight of a row moves the others: they add up to 1. The softmax's backward is "
    "dS = P * (dP - D), where D holds one number per query, the sum over its keys of P * dP, "
    "which equals rowsum(dO * O).", {"d_term": "none"})
D_UNWEIGHTED = Mistake(
    "D summed without the weights (rowsum(dP) instead of rowsum(P * dP))",
    "D is the weighted sum sum_s P_s dP_s of each query's row, the same as rowsum(dO * O): "
    "the plain sum of dP over the keys is not it.", {"d_term": "rowsum_dp"})
NO_SOFTMAX_BACKWARD = Mistake(
    "the softmax's backward left out (dS = dP)",
    "The scores go through the softmax before they meet V: the gradient of the scores is "
    "P * (dP - D), not the gradient of the weights dP itself.", {"d_term": "identity"})
SCALE_LEFT_OUT = Mistake(
    "the scale left out of dQ and dK",
    "The scores are Q K^T * scale: the chain rule brings the scale back, once, into both "
    "dQ = dS K * scale and dK = dS^T Q * scale.", {"grad_scale": 0})
SCALE_TWICE = Mistake(
    "the scale applied twice to dQ and dK",
    "The scores are Q K^T * scale, so dQ = dS K * scale and dK = dS^T Q * scale, with the "
    "scale once. If dS already includes it (the gradient of Q K^T), do not multiply again.",
    {"grad_scale": 2})
DQ_DK_SWAPPED = Mistake(
    "dK and dQ swapped",
    "dQ has a row per query: dS (T, S) times K (S, D). dK has a row per key: dS^T (S, T) "
    "times Q (T, D). Return them in the order query, key, value.", {"swap": True})

ATTENTION_BACKWARD = Exercise(
    name="attention_backward",
    reference=flash.attention_backward,
    inputs=("query", "key", "value", "dout"),
    outputs=(("dq", "(B, H, T, D)"), ("dk", "(B, H, S, D)"), ("dv", "(B, H, S, Dv)")),
    variant=backward_variant,
    mistakes=(D_MISSING, D_UNWEIGHTED, NO_SOFTMAX_BACKWARD, SCALE_LEFT_OUT, SCALE_TWICE,
              DQ_DK_SWAPPED, IGNORES_SCALE),
    forbidden=forbid((flash.attention_backward, flash.flash_backward,
                      flash.FlashAttention.backward) + AUTOGRAD + NO_BUILT_IN_ATTENTION,
                     ATTENTION_BUILTINS + ENGINE),
)


def backward_inputs(g, *batch, T, S, D=4, Dv=3, dtype=torch.float32, spread=1.0):
    """Query, key, value and the gradient of the output: random, seeded."""
    return (spread * randn(*batch, T, D, generator=g, dtype=dtype),
            spread * randn(*batch, S, D, generator=g, dtype=dtype),
            randn(*batch, S, Dv, generator=g, dtype=dtype),
            randn(*batch, T, Dv, generator=g, dtype=dtype))


def check_attention_backward(fn, seed: int = 0) -> None:
    """Check attention_backward(query, key, value, dout, scale=None) -> (dq, dk, dv): the
    reference's values are those of autograd through attention. Lesson: 08_flash_backward"""
    g = seeded(seed)
    cases = [
        Case("T = 5 queries, S = 7 keys; B, H, D, Dv = 2, 3, 4, 3",
             backward_inputs(g, 2, 3, T=5, S=7)),
        Case("T = S = 6 (dq and dk have the same shape)", backward_inputs(g, 2, 3, T=6, S=6)),
        Case("float64", backward_inputs(g, 2, 3, T=4, S=6, dtype=torch.float64)),
        Case("an explicit scale=0.3", backward_inputs(g, 2, 3, T=5, S=7), {"scale": 0.3}),
        Case("large scores (about 100)", backward_inputs(g, 2, 3, T=5, S=7, spread=5.0)),
        Case("one sequence without batch dims, (T, D) and (S, D)", backward_inputs(g, T=4, S=6)),
    ]
    run_check(ATTENTION_BACKWARD, fn, cases)


# ---------------------------------------------------------------- the tiled backward

def flash_backward_variant(query, key, value, out, lse, dout, is_causal=False, scale=None,
                           block_size=64, *, recompute="lse", p_scale=True, d_term="rowsum_do_o",
                           mask="bottom_right", grad_scale=1, swap=False, drop_last=False,
                           scale_rule="sqrt", honour_scale=True):
    """The tiled backward with one of the known slips: P recomputed without the scale, without
    the logsumexp or by a softmax within the block; D missing or taken from each block's P;
    the causal mask left out or aligned top-left; dQ and dK swapped; the scale left out or
    applied twice; the last, shorter block left out; the scale argument ignored."""
    T, S = query.shape[-2], key.shape[-2]
    factor = scale_factor(scale, query.shape[-1], scale_rule, honour_scale)
    wide = compute_dtype(query.dtype)
    query, key, value, dout = (x.to(wide) for x in (query, key, value, dout))
    lse = lse.to(wide)[..., None]
    d = (dout * out.to(wide)).sum(-1, keepdim=True)
    dq = torch.zeros_like(query)
    dk, dv = torch.zeros_like(key), torch.zeros_like(value)
    end = S - S % block_size if drop_last else S
    for k0 in range(0, end, block_size):
        k, v = key[..., k0:k0 + block_size, :], value[..., k0:k0 + block_size, :]
        scores = query @ k.transpose(-2, -1) * (factor if p_scale else 1.0)
        if recompute == "lse":
            p = torch.exp(scores - lse)
        elif recompute == "none":
            p = torch.exp(scores)
        else:  # a softmax over the block's own keys
            p = torch.softmax(scores.masked_fill(_hidden(T, S, k0, k.shape[-2], query.device,
                                                         mask == "top_left"), NEG_INF)
                              if is_causal and mask != "none" else scores, dim=-1)
        if is_causal and mask != "none":
            p = p.masked_fill(_hidden(T, S, k0, k.shape[-2], query.device, mask == "top_left"),
                              0.0)
        dp = dout @ v.transpose(-2, -1)
        block_d = (p * dp).sum(-1, keepdim=True) if d_term == "block" else d
        ds = _softmax_backward(p, dp, block_d, "rowsum_do_o" if d_term == "block" else d_term)
        dv[..., k0:k0 + k.shape[-2], :] = p.transpose(-2, -1) @ dout
        dq = dq + ds @ k * factor ** grad_scale
        dk[..., k0:k0 + k.shape[-2], :] = ds.transpose(-2, -1) @ query * factor ** grad_scale
    dq, dk, dv = dq.to(out.dtype), dk.to(out.dtype), dv.to(out.dtype)
    return (dk, dq, dv) if swap else (dq, dk, dv)


P_WITHOUT_SCALE = Mistake(
    "P recomputed without the scale",
    "The logsumexp was taken over the scaled scores: recompute P = exp(Q K^T * scale - L), "
    "with the same scale as the forward pass.", {"p_scale": False})
P_WITHOUT_LSE = Mistake(
    "P recomputed without subtracting the logsumexp",
    "exp(score) alone is the softmax's numerator: L = log(sum of exp(score)) over the whole "
    "row is the denominator, so P = exp(score - L), which also never overflows.",
    {"recompute": "none"})
P_BLOCK_SOFTMAX = Mistake(
    "P recomputed by a softmax within each block",
    "A softmax over one block's keys normalises over that block only, and each block's weights "
    "then add up to 1. The saved L is the logsumexp of the whole row: P = exp(score - L) "
    "gives every block its true share.", {"recompute": "block_softmax"})
D_FROM_BLOCK = Mistake(
    "D taken from each block's P and dP (a part of the sum) instead of from O",
    "D = sum over ALL the keys of P * dP, one number per query. A block sees a part of that sum "
    "only. rowsum(dO * O) is the same number, computed once before the loop from what the "
    "forward saved.", {"d_term": "block"})
MASK_NOT_APPLIED = Mistake(
    "causal mask not applied to the recomputed P: hidden keys get gradients",
    "exp(score - L) is not 0 for a key the forward pass hid: set P to 0 where the causal mask "
    "hides the key (in the tiles on the diagonal), so those keys' dK and dV get nothing from "
    "these queries.", {"mask": "none"})
MASK_TOP_LEFT = Mistake(
    "causal mask aligned top-left (queries placed at positions 0 .. T-1)",
    "As in the forward pass, the T queries are the last T of the S positions: query t sits at "
    "position S - T + t and sees the keys up to there.", {"mask": "top_left"})
LAST_BLOCK_LEFT_OUT = Mistake(
    "last, shorter block of keys left out",
    "When block_size does not divide S, the last block is shorter: the loop must still reach "
    "it, or its keys get no gradient and the queries lose their share.", {"drop_last": True})

FLASH_BACKWARD = Exercise(
    name="flash_backward",
    reference=flash.flash_backward,
    inputs=("query", "key", "value", "out", "lse", "dout"),
    outputs=(("dq", "(B, H, T, D)"), ("dk", "(B, H, S, D)"), ("dv", "(B, H, S, Dv)")),
    variant=flash_backward_variant,
    mistakes=(P_WITHOUT_SCALE, P_WITHOUT_LSE, P_BLOCK_SOFTMAX, D_MISSING, D_FROM_BLOCK,
              MASK_NOT_APPLIED, MASK_TOP_LEFT, DQ_DK_SWAPPED, SCALE_TWICE, SCALE_LEFT_OUT,
              LAST_BLOCK_LEFT_OUT, IGNORES_SCALE),
    forbidden=forbid((flash.attention_backward, flash.flash_backward,
                      flash.FlashAttention.backward) + AUTOGRAD + NO_BUILT_IN_ATTENTION
                     + OUT_OF_TORCH, ATTENTION_BUILTINS + ENGINE + OUT_OF_TORCH_BUILTINS),
)


def forward_saved(query, key, value, is_causal=False, scale=None, g=None):
    """What the forward pass saved (its output and logsumexps), and a gradient of the output."""
    out, lse = flash.flash_forward(query, key, value, is_causal, scale)
    return query, key, value, out, lse, randn(*out.shape, generator=g, dtype=out.dtype)


def check_flash_backward(fn, seed: int = 0) -> None:
    """Check flash_backward(query, key, value, out, lse, dout, is_causal=False, scale=None,
    block_size=64) -> (dq, dk, dv). No tensor as large as every query against every key may be
    created along the way. Lesson: 08_flash_backward"""
    g = seeded(seed)

    def inputs(*batch, T, S, D=4, Dv=5, dtype=torch.float32, spread=1.0, is_causal=False,
               scale=None):
        q = spread * randn(*batch, T, D, generator=g, dtype=dtype)
        k = spread * randn(*batch, S, D, generator=g, dtype=dtype)
        v = randn(*batch, S, Dv, generator=g, dtype=dtype)
        return forward_saved(q, k, v, is_causal, scale, g)

    cases = [
        Case("T = 20 queries, S = 30 keys in blocks of 4 (the last block holds 2); B, H, D, Dv "
             "= 2, 3, 4, 5", inputs(2, 3, T=20, S=30), {"block_size": 4}),
        Case("is_causal=True, T = S = 8, blocks of 3", inputs(2, 3, T=8, S=8, is_causal=True),
             {"is_causal": True, "block_size": 3}),
        Case("is_causal=True with T = 4 < S = 11: the queries are the last 4 positions, blocks "
             "of 3", inputs(2, 3, T=4, S=11, is_causal=True),
             {"is_causal": True, "block_size": 3}),
        Case("float64, is_causal=True, T = 9, S = 13, blocks of 2",
             inputs(2, 3, T=9, S=13, dtype=torch.float64, is_causal=True),
             {"is_causal": True, "block_size": 2}),
        Case("large scores (about 100): exp() of a score overflows, blocks of 3",
             inputs(2, 3, T=5, S=9, spread=6.0), {"block_size": 3}),
        Case("an explicit scale=0.3, blocks of 3", inputs(2, 3, T=5, S=7, scale=0.3),
             {"scale": 0.3, "block_size": 3}),
        Case("block_size = 16, larger than S = 7: a single block", inputs(2, 3, T=5, S=7),
             {"block_size": 16}),
        Case("one sequence without batch dims, (T, D) and (S, D), is_causal=True, blocks of 3",
             inputs(T=5, S=7, is_causal=True), {"is_causal": True, "block_size": 3}),
    ]
    run_check(FLASH_BACKWARD, Harnessed(harness.WithinBlocks, (fn,)), cases)


# ---------------------------------------------------------------- the autograd.Function

def flash_forward_variant(query, key, value, is_causal=False, scale=None, block_size=64, *,
                          lse="exact", mask="bottom_right", scale_rule="sqrt",
                          honour_scale=True):
    """The forward's (out, lse) with one of the known slips in the logsumexp (without the
    maximum, the maximum alone, log(l) alone), the causal mask aligned top-left, or the scale
    argument ignored."""
    factor = scale_factor(scale, query.shape[-1], scale_rule, honour_scale)
    T, S = query.shape[-2], key.shape[-2]
    wide = compute_dtype(query.dtype)
    q = query.to(wide)
    m = torch.full_like(q[..., :1], NEG_INF)
    l, raw = torch.zeros_like(m), torch.zeros_like(m)  # raw: the sum of exp(score), unshifted
    acc = q.new_zeros(*q.shape[:-1], value.shape[-1])
    for k0 in range(0, S, block_size):
        k, v = key[..., k0:k0 + block_size, :].to(wide), value[..., k0:k0 + block_size, :]
        scores = q @ k.transpose(-2, -1) * factor
        if is_causal:
            scores = scores.masked_fill(_hidden(T, S, k0, k.shape[-2], query.device,
                                                mask == "top_left"), NEG_INF)
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        p = torch.exp(scores - m_new)
        l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True)
        acc = acc * torch.exp(m - m_new) + p @ v.to(wide)
        raw = raw + torch.exp(scores).sum(-1, keepdim=True)
        m = m_new
    out = (acc / l).to(query.dtype)
    full = {"exact": m + torch.log(l), "no_max": torch.log(raw), "max_only": m,
            "log_l_only": torch.log(l)}[lse]
    return out, full[..., 0].detach()  # no gradient flows through the logsumexp


LSE_WITHOUT_MAX = Mistake(
    "logsumexp without the maximum: exp() overflows",
    "log(sum(exp(score))) overflows to inf for scores above about 88 (float32), and then every "
    "recomputed weight exp(score - L) is 0. Keep the running maximum m and the running sum l "
    "of exp(score - m), as the online softmax does: L = m + log(l).", {"lse": "no_max"})
LSE_MAX_ONLY = Mistake(
    "logsumexp is the running maximum alone (log(l) left out)",
    "The running maximum m only keeps the exponentials finite: the logarithm of the row's sum "
    "is m + log(l), with l the running sum of exp(score - m).", {"lse": "max_only"})
LSE_LOG_L_ONLY = Mistake(
    "logsumexp is log(l) alone (the maximum left out)",
    "l is the sum of exp(score - m), shifted by the running maximum m: log(sum(exp(score))) = "
    "m + log(l). Without m, P = exp(score - L) is off by a factor exp(m) per query.",
    {"lse": "log_l_only"})
FORWARD_MASK_TOP_LEFT = Mistake(
    "causal mask aligned top-left (queries placed at positions 0 .. T-1)",
    "The T queries are the last T of the S positions: query t sits at position S - T + t and "
    "sees the keys up to there.", {"forward_mask": "top_left"})
BACKWARD_NOT_CAUSAL = Mistake(
    "the backward pass ignores the causal mask: hidden keys get gradients",
    "exp(score - L) is not 0 for a key the forward pass hid. Keep is_causal on ctx and pass it "
    "on to the backward pass, which sets P to 0 where the mask hides the key (and may skip the "
    "tiles it hides entirely).", {"mask": "none"})
BACKWARD_IGNORES_SCALE = Mistake(
    "the scale not passed on to the backward pass (it uses 1/sqrt(D))",
    "The backward pass recomputes P = exp(Q K^T * scale - L) with the forward's scale, and "
    "multiplies dQ and dK by it: keep `scale` on ctx and pass it on, as given (None or a "
    "number).", {"backward_scale": False})


def forward_and_backward(query, key, value, dout, is_causal=False, scale=None, block_size=64):
    """The Function's out and lse, then its gradients of query, key and value for ``dout``:
    what the harness returns (the reference's forward and backward, called directly)."""
    out, lse = flash.flash_forward(query, key, value, is_causal, scale, block_size)
    return out, lse, *flash.flash_backward(query, key, value, out, lse, dout, is_causal, scale,
                                           block_size)


def forward_and_backward_variant(query, key, value, dout, is_causal=False, scale=None,
                                 block_size=64, *, lse="exact", forward_mask="bottom_right",
                                 backward_scale=True, honour_scale=True, scale_rule="sqrt",
                                 **backward_knobs):
    """``forward_and_backward`` with a slip in the forward (the logsumexp, the mask, the scale
    ignored) or in the backward (any of ``flash_backward``'s slips, the causal mask or the
    scale not passed on to it); the backward pass starts from what the forward saved."""
    out, saved = flash_forward_variant(query, key, value, is_causal, scale, block_size,
                                       lse=lse, mask=forward_mask, scale_rule=scale_rule,
                                       honour_scale=honour_scale)
    grads = flash_backward_variant(query, key, value, out, saved, dout, is_causal,
                                   scale if backward_scale else None, block_size,
                                   scale_rule=scale_rule, honour_scale=honour_scale,
                                   **backward_knobs)
    return out, saved, *grads


class _FunctionVariant(torch.autograd.Function):
    """A student's Function with the slips of ``forward_and_backward_variant``."""

    @staticmethod
    def forward(ctx, query, key, value, is_causal, scale, block_size, knobs):
        out, lse = flash_forward_variant(
            query, key, value, is_causal, scale, block_size, lse=knobs.get("lse", "exact"),
            mask=knobs.get("forward_mask", "bottom_right"),
            honour_scale=knobs.get("honour_scale", True))
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.settings, ctx.knobs = (is_causal, scale, block_size), knobs
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        query, key, value, out, lse = ctx.saved_tensors
        is_causal, scale, block_size = ctx.settings
        knobs = {k: v for k, v in ctx.knobs.items() if k not in ("lse", "forward_mask")}
        if not knobs.pop("backward_scale", True):
            scale = None
        grads = flash_backward_variant(query, key, value, out, lse, dout, is_causal, scale,
                                       block_size, **knobs)
        return (*grads, None, None, None, None)


def function_variant(query, key, value, is_causal=False, scale=None, block_size=64, **knobs):
    """The wrong variant shaped as the student writes it: a Function applied, (out, lse)."""
    return _FunctionVariant.apply(query, key, value, is_causal, scale, block_size, knobs)


FLASH_ATTENTION = Exercise(
    name="flash_attention",
    reference=forward_and_backward,
    inputs=("query", "key", "value", "dout"),
    outputs=(("out", "(B, H, T, Dv)"), ("lse", "(B, H, T)"), ("dq", "(B, H, T, D)"),
             ("dk", "(B, H, S, D)"), ("dv", "(B, H, S, Dv)")),
    variant=forward_and_backward_variant,
    mistakes=(LSE_WITHOUT_MAX, LSE_MAX_ONLY, LSE_LOG_L_ONLY, FORWARD_MASK_TOP_LEFT,
              IGNORES_SCALE, P_WITHOUT_SCALE, P_WITHOUT_LSE, P_BLOCK_SOFTMAX, D_MISSING,
              D_FROM_BLOCK, BACKWARD_NOT_CAUSAL, MASK_TOP_LEFT, DQ_DK_SWAPPED, SCALE_TWICE,
              SCALE_LEFT_OUT, LAST_BLOCK_LEFT_OUT, BACKWARD_IGNORES_SCALE),
    forbidden=forbid((flash.flash_forward, flash.flash_attention, flash.FlashAttention.forward,
                      flash.FlashAttention.backward, flash.SavedWeightsAttention.forward,
                      flash.SavedWeightsAttention.backward, tiled.tiled_attention,
                      tiled.flash_attention)
                     + AUTOGRAD + NO_BUILT_IN_ATTENTION + OUT_OF_TORCH,
                     ATTENTION_BUILTINS + ENGINE + OUT_OF_TORCH_BUILTINS),
)


def check_flash_attention(fn, seed: int = 0) -> None:
    """Check flash_attention(query, key, value, is_causal=False, scale=None, block_size=64) ->
    (out, lse), and the gradients its backward pass gives the query, the key and the value for
    a given gradient of the output (the same as autograd's through attention). The backward
    pass runs inside the check's watch, like the forward: no shortcut, and no tensor as large
    as every query against every key, in either. Lesson: 08_flash_backward"""
    g = seeded(seed)

    def inputs(*batch, T, S, D=4, Dv=5, dtype=torch.float32, spread=1.0):
        return (spread * randn(*batch, T, D, generator=g, dtype=dtype),
                spread * randn(*batch, S, D, generator=g, dtype=dtype),
                randn(*batch, S, Dv, generator=g, dtype=dtype),
                randn(*batch, T, Dv, generator=g, dtype=dtype))

    cases = [
        Case("float64, large scores (about 1000): exp() of a score overflows even in float64; "
             "T = S = 9 (dq and dk of the same shape), blocks of 3",
             inputs(2, 3, T=9, S=9, dtype=torch.float64, spread=30.0), {"block_size": 3}),
        Case("T = 20 queries, S = 30 keys in blocks of 4 (the last block holds 2); B, H, D, Dv "
             "= 2, 3, 4, 5", inputs(2, 3, T=20, S=30), {"block_size": 4}),
        Case("float64, is_causal=True, T = S = 10, blocks of 3",
             inputs(2, 3, T=10, S=10, dtype=torch.float64), {"is_causal": True, "block_size": 3}),
        Case("float64, T = 9, S = 13, blocks of 4", inputs(2, 3, T=9, S=13, dtype=torch.float64),
             {"block_size": 4}),
        Case("float64, is_causal=True with T = 5 < S = 12: the queries are the last 5 "
             "positions, blocks of 3", inputs(2, 3, T=5, S=12, dtype=torch.float64),
             {"is_causal": True, "block_size": 3}),
        Case("float32, is_causal=True, T = S = 12, blocks of 5", inputs(2, 2, T=12, S=12),
             {"is_causal": True, "block_size": 5}),
        Case("float64, an explicit scale=0.3, blocks of 3",
             inputs(2, 3, T=5, S=7, dtype=torch.float64), {"scale": 0.3, "block_size": 3}),
        Case("one sequence without batch dims, (T, D) and (S, D), is_causal=True, blocks of 3",
             inputs(T=5, S=7, dtype=torch.float64), {"is_causal": True, "block_size": 3}),
    ]
    run_check(FLASH_ATTENTION, Harnessed(harness.ForwardAndBackward, (fn,)), cases)
