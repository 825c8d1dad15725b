"""Checks for lesson 07_inference_and_scale: cached attention, grouped-query attention and
tiled attention with an online softmax."""

import torch

from .. import attention, inference, tiled
from .framework import Case, Exercise, Harnessed, Mistake, randn, run_check, seeded
from .lesson02 import (
    ATTENTION_BUILTINS,
    ATTENTION_OUTPUTS,
    IGNORES_SCALE,
    NO_BUILT_IN_ATTENTION,
    SCALE_MISTAKES,
)
from .student import harness
from .student.shortcuts import forbid

NEG_INF = float("-inf")
SCALES = {"sqrt": lambda D: D ** -0.5, "none": lambda D: 1.0, "d": lambda D: 1.0 / D,
          "times_sqrt": lambda D: D ** 0.5}


# ---------------------------------------------------------------- cached attention

def cached_variant(query, key, value, past_key=None, past_value=None, *, order="old_first",
                   mask="bottom_right", returned="all", scale_rule="sqrt"):
    """Cached attention with one of the known slips: the cache appended in another order, the
    causal mask placed elsewhere, another cache returned, another scale."""
    new_key, new_value = key, value
    if past_key is not None:
        first = (past_key, past_value) if order == "old_first" else (key, value)
        then = (key, value) if order == "old_first" else (past_key, past_value)
        key = torch.cat([first[0], then[0]], dim=-2)
        value = torch.cat([first[1], then[1]], dim=-2)
    T, S = query.shape[-2], key.shape[-2]
    diagonal = {"bottom_right": S - T, "top_left": 0, "late": S - T + 1, "early": S - T - 1,
                "none": S}[mask]
    allowed = torch.ones(T, S, dtype=torch.bool, device=query.device).tril(diagonal=diagonal)
    out, _ = attention.scaled_dot_product_attention(
        query, key, value, attn_mask=allowed, scale=SCALES[scale_rule](query.shape[-1]))
    returns = {"all": (key, value), "new_only": (new_key, new_value),
               "past_only": (past_key, past_value)}[returned]
    return (out, *returns)


CACHE_WRONG_ORDER = Mistake(
    "cache appended in the wrong order (the new keys before the cached ones)",
    "Position s of the cache must hold token s: the P cached tokens come first, the T new ones "
    "after them. Concatenate the cache first, then the new keys (and the same for the values).",
    {"order": "new_first"})
MASK_TOP_LEFT = Mistake(
    "causal mask aligned top-left (the new tokens placed at positions 0 .. T-1)",
    "The new tokens are the LAST T of the S = P + T positions: new token t sits at position "
    "P + t and sees keys 0 .. P + t. A causal mask built for T queries and S keys as in lesson 03 "
    "(or is_causal=True) puts them at 0 .. T-1 instead: shift the diagonal by S - T.",
    {"mask": "top_left"})
NEW_TOKENS_UNMASKED = Mistake(
    "new tokens see the ones after them (no causal mask among the new tokens)",
    "With a single new token every key is in its past, but a chunk of several new tokens (the "
    "prompt, for one) still needs the causal mask among them: new token t sees keys up to "
    "position P + t only.", {"mask": "none"})
POSITIONS_ONE_LATE = Mistake(
    "positions of the new tokens off by one (each new token sees the next one)",
    "New token t is at position P + t, where P is the number of cached tokens (the cache's "
    "length before appending): it may see keys s <= P + t, not P + t + 1.", {"mask": "late"})
POSITIONS_ONE_EARLY = Mistake(
    "positions of the new tokens off by one (a new token cannot see itself)",
    "New token t is at position P + t, where P is the number of cached tokens: the keys it may "
    "see include its own, s <= P + t.", {"mask": "early"})
RETURNED_NEW_ONLY = Mistake(
    "cache returned without the earlier tokens (only the new keys and values)",
    "The next step needs every key and value so far: return the concatenated cache, the P "
    "cached tokens followed by the T new ones.", {"returned": "new_only"})
RETURNED_PAST_ONLY = Mistake(
    "cache returned without the new tokens (the cache as it came in)",
    "Return the cache after appending the new keys and values, or the next step will never "
    "see these tokens.", {"returned": "past_only"})

CACHED_ATTENTION = Exercise(
    name="cached_attention",
    reference=inference.cached_attention,
    inputs=("query", "key", "value", "past_key", "past_value"),
    outputs=(("out", "(B, H, T, Dv)"), ("keys", "(B, H, P + T, D): the cache after appending"),
             ("values", "(B, H, P + T, Dv): the cache after appending")),
    variant=cached_variant,
    mistakes=(CACHE_WRONG_ORDER, MASK_TOP_LEFT, NEW_TOKENS_UNMASKED, POSITIONS_ONE_LATE,
              POSITIONS_ONE_EARLY, RETURNED_NEW_ONLY, RETURNED_PAST_ONLY) + SCALE_MISTAKES,
    forbidden=forbid((inference.cached_attention,) + NO_BUILT_IN_ATTENTION, ATTENTION_BUILTINS),
)


def cache_inputs(g, *batch, P, T, D=4, Dv=6, kv_batch=None, dtype=torch.float32):
    """Query, key, value of T new tokens and a cache of P earlier ones (None when P = 0)."""
    kv_batch = batch if kv_batch is None else kv_batch
    new = (randn(*batch, T, D, generator=g, dtype=dtype),
           randn(*kv_batch, T, D, generator=g, dtype=dtype),
           randn(*kv_batch, T, Dv, generator=g, dtype=dtype))
    if P == 0:
        return (*new, None, None)
    return (*new, randn(*kv_batch, P, D, generator=g, dtype=dtype),
            randn(*kv_batch, P, Dv, generator=g, dtype=dtype))


def check_cached_attention(fn, seed: int = 0) -> None:
    """Check cached_attention(query, key, value, past_key=None, past_value=None)
    -> (out, keys, values). Lesson: 07_inference_and_scale"""
    g = seeded(seed)
    cases = [
        Case("a chunk of T = 3 new tokens after a cache of P = 5 (B, H, D, Dv = 2, 3, 4, 6)",
             cache_inputs(g, 2, 3, P=5, T=3)),
        Case("one decoding step: T = 1 new token after P = 6 cached ones",
             cache_inputs(g, 2, 3, P=6, T=1)),
        Case("an empty cache (None): the prompt's T = 4 tokens, causal among themselves",
             cache_inputs(g, 2, 3, P=0, T=4)),
        Case("float64, with gradients for the new and the cached keys and values",
             cache_inputs(g, 2, 3, P=4, T=2, dtype=torch.float64), grad=True),
        Case("query heads in pairs sharing one cached key/value head: query (2, 2, 2, T, D), "
             "keys and values (2, 2, 1, ., D), P = 5, T = 2",
             cache_inputs(g, 2, 2, 2, P=5, T=2, kv_batch=(2, 2, 1))),
        Case("one sequence, one head: (T, D) queries with a (P, D) cache, P = 7, T = 2",
             cache_inputs(g, P=7, T=2)),
    ]
    run_check(CACHED_ATTENTION, fn, cases)


# ---------------------------------------------------------------- grouped-query attention

def gqa_variant(query, key, value, is_causal=False, scale=None, *, expand="interleave",
                honour_causal=True, scale_rule="sqrt", honour_scale=True):
    H, G = query.shape[-3], key.shape[-3]
    if expand == "interleave":  # head h reads key/value head h // (H / G)
        key, value = (x.repeat_interleave(H // G, dim=-3) for x in (key, value))
    else:  # "tile": head h reads key/value head h % G
        key, value = (x.repeat(*[1] * (x.ndim - 3), H // G, 1, 1) for x in (key, value))
    factor = SCALES[scale_rule](query.shape[-1]) if scale is None or not honour_scale else scale
    return attention.scaled_dot_product_attention(
        query, key, value, is_causal=is_causal and honour_causal, scale=factor)


GROUPS_TILED = Mistake(
    "key/value heads repeated in the wrong order (repeat instead of repeat_interleave)",
    "Query heads share key/value heads in consecutive groups: with H = 6 and G = 2, heads 0, 1, "
    "2 read key/value head 0 and heads 3, 4, 5 read head 1. Repeating the whole stack of G heads "
    "(0, 1, 0, 1, ...) pairs head 1 with key/value head 1 instead: repeat each head in place.",
    {"expand": "tile"})
GQA_CAUSAL_IGNORED = Mistake(
    "is_causal ignored",
    "With is_causal=True, query t must not see the keys after t.", {"honour_causal": False})

GROUPED_QUERY_ATTENTION = Exercise(
    name="grouped_query_attention",
    reference=inference.grouped_query_attention,
    inputs=("query", "key", "value"),
    outputs=ATTENTION_OUTPUTS,
    variant=gqa_variant,
    mistakes=(GROUPS_TILED, GQA_CAUSAL_IGNORED) + SCALE_MISTAKES + (IGNORES_SCALE,),
    forbidden=forbid((inference.grouped_query_attention,) + NO_BUILT_IN_ATTENTION,
                     ATTENTION_BUILTINS),
)


def gqa_inputs(g, *batch, H, G, T=5, S=7, D=4, Dv=3, dtype=torch.float32):
    return (randn(*batch, H, T, D, generator=g, dtype=dtype),
            randn(*batch, G, S, D, generator=g, dtype=dtype),
            randn(*batch, G, S, Dv, generator=g, dtype=dtype))


def check_grouped_query_attention(fn, seed: int = 0) -> None:
    """Check grouped_query_attention(query, key, value, is_causal=False, scale=None)
    -> (out, weights). Lesson: 07_inference_and_scale"""
    g = seeded(seed)
    cases = [
        Case("H = 6 query heads sharing G = 2 key/value heads (B, T, S, D, Dv = 2, 5, 7, 4, 3)",
             gqa_inputs(g, 2, H=6, G=2)),
        Case("H = 6 query heads sharing G = 3 key/value heads", gqa_inputs(g, 2, H=6, G=3)),
        Case("multi-query attention: one key/value head (G = 1) for H = 4 query heads",
             gqa_inputs(g, 2, H=4, G=1)),
        Case("G = H = 3: plain multi-head attention", gqa_inputs(g, 2, H=3, G=3)),
        Case("is_causal=True, T = S = 6, H = 4, G = 2", gqa_inputs(g, 2, H=4, G=2, T=6, S=6),
             {"is_causal": True}),
        Case("float64, with gradients, H = 6, G = 2",
             gqa_inputs(g, 2, H=6, G=2, dtype=torch.float64), grad=True),
        Case("an explicit scale=0.3, H = 4, G = 2", gqa_inputs(g, 2, H=4, G=2), {"scale": 0.3}),
        Case("extra leading dims (2, 2, H, T, D), H = 6, G = 2", gqa_inputs(g, 2, 2, H=6, G=2)),
    ]
    run_check(GROUPED_QUERY_ATTENTION, fn, cases)


# ---------------------------------------------------------------- tiled attention

def tiled_variant(query, key, value, is_causal=False, scale=None, block_size=64, *,
                  rescale_output=True, rescale_normaliser=True, divide=True,
                  positions="absolute", drop_last=False, shift="running", scale_rule="sqrt",
                  honour_scale=True):
    """Tiled attention with one of the known slips in its online softmax, its causal mask, its
    loop over the blocks or its scale."""
    T, S = query.shape[-2], key.shape[-2]
    factor = SCALES[scale_rule](query.shape[-1]) if scale is None or not honour_scale else scale
    m = torch.full_like(query[..., :1], 0.0 if shift == "from_zero" else NEG_INF)
    l = torch.zeros_like(m)
    acc = query.new_zeros(*query.shape[:-1], value.shape[-1])
    offset = {"absolute": S - T, "block": S - T, "top_left": 0}[positions]
    end = S - S % block_size if drop_last else S
    for start in range(0, end, block_size):
        k, v = key[..., start:start + block_size, :], value[..., start:start + block_size, :]
        scores = query @ k.transpose(-2, -1) * factor
        if is_causal:
            first = 0 if positions == "block" else start
            keys_at = torch.arange(first, first + k.shape[-2], device=query.device)
            place = torch.arange(offset, offset + T, device=query.device)[:, None]
            scores = scores.masked_fill(keys_at > place, NEG_INF)
        if shift == "none":
            m_new = torch.zeros_like(m)
        else:
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
        rescale = torch.exp(m - m_new) if shift != "none" else torch.ones_like(m)
        p = torch.exp(scores - m_new)
        l = (l * rescale if rescale_normaliser else l) + p.sum(dim=-1, keepdim=True)
        acc = (acc * rescale if rescale_output else acc) + p @ v
        m = m_new
    return acc / l if divide else acc


TILED_MISTAKES = (
    Mistake("running max not used to rescale the accumulated output",
            "When a block brings a larger maximum m_new, everything accumulated so far was "
            "summed as exp(score - m_old) * value: multiply the accumulator by "
            "exp(m_old - m_new) before adding the new block.", {"rescale_output": False}),
    Mistake("normaliser not rescaled",
            "The running sum of exp(score - m) was taken against the old maximum: multiply it "
            "by exp(m_old - m_new) too before adding the new block's sum, exactly as the "
            "accumulated output.", {"rescale_normaliser": False}),
    Mistake("final division missing",
            "The accumulator holds sum(exp(score - m) * value); the softmax weights are "
            "exp(score - m) / l, so divide by the running sum l once, after the last block.",
            {"divide": False}),
    Mistake("no running max: exp of the raw scores overflows",
            "exp(score) overflows to inf for scores above about 88 (float32). Keep the "
            "running maximum m of each query's scores and exponentiate score - m.",
            {"shift": "none"}),
    Mistake("running max started at 0 instead of -inf",
            "A running maximum that starts at 0 never drops below 0: when every score of a "
            "query is far below 0 (under about -88 in float32), exp(score - 0) underflows to "
            "0 for every key, the sum is 0 and 0 / 0 is NaN. Start it at -inf, so the first "
            "block's own maximum takes over.", {"shift": "from_zero"}),
    Mistake("causal mask built from the positions inside the block",
            "Key j of a block that starts at `start` is key start + j of the sequence: compare "
            "the queries' positions with the keys' positions in the whole sequence, not in "
            "the block.", {"positions": "block"}),
    Mistake("causal mask aligned top-left (queries placed at positions 0 .. T-1)",
            "Here the T queries are the LAST T of the S positions (as after a cache): query t "
            "sits at position S - T + t and sees the keys up to there.",
            {"positions": "top_left"}),
    Mistake("last, shorter block of keys left out",
            "When block_size does not divide S, the last block is shorter: the loop must still "
            "reach it (slicing past the end of a tensor just stops at the end).",
            {"drop_last": True}),
) + SCALE_MISTAKES + (IGNORES_SCALE,)

TILED_ATTENTION = Exercise(
    name="tiled_attention",
    reference=tiled.tiled_attention,
    inputs=("query", "key", "value"),
    outputs=(("out", "(B, H, T, Dv)"),),
    variant=tiled_variant,
    mistakes=TILED_MISTAKES,
    forbidden=forbid((tiled.tiled_attention, tiled.flash_attention,
                      attention.scaled_dot_product_attention) + NO_BUILT_IN_ATTENTION,
                     ATTENTION_BUILTINS),
)


def check_tiled_attention(fn, seed: int = 0) -> None:
    """Check tiled_attention(query, key, value, is_causal=False, scale=None, block_size=64)
    -> out. Besides the output, no tensor as large as every query against every key may be
    created along the way. Lesson: 07_inference_and_scale"""
    g = seeded(seed)

    def inputs(*batch, T, S, D=4, Dv=5, dtype=torch.float32, spread=1.0):
        return (spread * randn(*batch, T, D, generator=g, dtype=dtype),
                spread * randn(*batch, S, D, generator=g, dtype=dtype),
                randn(*batch, S, Dv, generator=g, dtype=dtype))

    def far_below(*batch, T, S, D=4, Dv=5):  # query against key: every score about -200 or less
        return (-10 * (1 + torch.rand(*batch, T, D, generator=g)),
                10 * (1 + torch.rand(*batch, S, D, generator=g)),
                randn(*batch, S, Dv, generator=g))

    cases = [
        Case("T = 20 queries, S = 30 keys in blocks of 4 (the last block holds 2); B, H, D, Dv "
             "= 2, 3, 4, 5", inputs(2, 3, T=20, S=30), {"block_size": 4}),
        Case("is_causal=True, T = S = 8, blocks of 3", inputs(2, 3, T=8, S=8),
             {"is_causal": True, "block_size": 3}),
        Case("is_causal=True with T = 4 < S = 11: the queries are the last 4 positions, blocks "
             "of 3", inputs(2, 3, T=4, S=11), {"is_causal": True, "block_size": 3}),
        Case("float64, with gradients, blocks of 2", inputs(2, 3, T=5, S=7, dtype=torch.float64),
             {"block_size": 2}, grad=True),
        Case("large scores (about 100): exp() overflows without a running max, blocks of 3",
             inputs(2, 3, T=5, S=9, spread=6.0), {"block_size": 3}),
        Case("every score far below -88 (about -200 and lower): exp() underflows to 0 unless "
             "each query's running max starts at -inf, blocks of 3", far_below(2, 3, T=5, S=7),
             {"block_size": 3}),
        Case("an explicit scale=0.3, blocks of 3", inputs(2, 3, T=5, S=7),
             {"scale": 0.3, "block_size": 3}),
        Case("block_size = 16, larger than S = 7: a single block", inputs(2, 3, T=5, S=7),
             {"block_size": 16}),
        Case("one sequence without batch dims, (T, D) and (S, D), blocks of 3",
             inputs(T=5, S=7), {"is_causal": True, "block_size": 3}),
    ]
    run_check(TILED_ATTENTION, Harnessed(harness.WithinBlocks, (fn,)), cases)
