"""Checks for lesson 07_inference_and_scale: cached attention, rotary positions in the cache,
grouped-query attention as a layer, tiled attention with an online softmax,
and merging two partial attentions."""

import copy

import torch

from .. import attention, inference, tiled
from ..attention import compute_dtype
from ..multihead import merge_heads, split_heads
from ..rope import apply_rotary, rotary_angles
from .framework import Case, Exercise, Harnessed, Mistake, matches, randn, run_check, seeded
from .lesson02 import (
    ATTENTION_BUILTINS,
    IGNORES_SCALE,
    NO_BUILT_IN_ATTENTION,
    SCALE_MISTAKES,
    ZERO_SCALE_AS_NONE,
)
from .student import harness
from .student.shortcuts import forbid

NEG_INF = float("-inf")
SCALES = {"sqrt": lambda D: D ** -0.5, "none": lambda D: 1.0, "d": lambda D: 1.0 / D,
          "times_sqrt": lambda D: D ** 0.5}


def scale_factor(scale, D: int, scale_rule: str, honour_scale) -> float:
    """The factor a variant scales by: ``scale`` where it is honoured (given; with "truthy", as
    ``scale or default`` honours it: not when 0), else the rule's default."""
    honoured = {True: scale is not None, False: False, "truthy": bool(scale)}[honour_scale]
    return scale if honoured else SCALES[scale_rule](D)


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


# ---------------------------------------------------------------- rotary positions in the cache

def cached_rotary_variant(module, x, past_key=None, past_value=None, *, positions="cache",
                          cache_rotation="once", rotate_values=False, mask="bottom_right",
                          returned="all"):
    """A decoding step of the rotary layer with one of the known slips: the new tokens (or
    their queries only) rotated as if at 0 .. T-1; the whole cache rotated at use, at
    0 .. S-1, and stored so ("again") or stored un-rotated ("at_use"); values rotated; the
    causal mask top-left; the cache returned without the new tokens."""
    P, T = 0 if past_key is None else past_key.shape[-2], x.shape[-2]
    q, k, v = (split_heads(proj(x), module.n_heads)
               for proj in (module.q_proj, module.k_proj, module.v_proj))  # (B, H, T, D)

    def angles(start, n):
        return rotary_angles(torch.arange(start, start + n, device=x.device), module.d_head,
                             base=module.base, dtype=compute_dtype(q.dtype))

    new_at = 0 if positions == "from_zero" else P
    q = apply_rotary(q, angles(P if positions == "cache" else 0, T))
    v = apply_rotary(v, angles(new_at, T)) if rotate_values else v
    if cache_rotation == "once":
        k = apply_rotary(k, angles(new_at, T))
    stored = k if past_key is None else torch.cat([past_key, k], dim=-2)
    used = stored if cache_rotation == "once" else apply_rotary(stored, angles(0, P + T))
    stored = used if cache_rotation == "again" else stored
    values = v if past_value is None else torch.cat([past_value, v], dim=-2)
    S = used.shape[-2]
    allowed = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(
        diagonal=S - T if mask == "bottom_right" else 0)
    out, _ = attention.scaled_dot_product_attention(q, used, values, attn_mask=allowed)
    if returned == "past_only" and past_key is not None:
        stored, values = past_key, past_value
    return module.out_proj(merge_heads(out)), stored, values


ROTARY_MISTAKES = (
    Mistake("new tokens rotated at positions 0 .. T-1 (positions counted from 0 at every step)",
            "After a cache of P tokens the new tokens sit at positions P .. P+T-1: rotate their "
            "queries and keys by the angles of those positions, not of 0 .. T-1. Counted from "
            "0, every decoding step puts its token at position 0.", {"positions": "from_zero"}),
    Mistake("queries rotated at positions 0 .. T-1 (the keys at their own)",
            "A query and the key of the same token turn by the same angle, that of its "
            "position P + t: the queries need the positions P .. P+T-1 as much as the keys.",
            {"positions": "queries_from_zero"}),
    Mistake("cached keys rotated again (a second rotation at every step)",
            "The cached keys were rotated when they entered the cache, each at its own "
            "position: rotate only the new keys, then append them. Rotating the whole cache "
            "again turns the old keys twice.", {"cache_rotation": "again"}),
    Mistake("un-rotated keys cached (the cache rotated at every use)",
            "The contract's cache holds keys already rotated at their positions: rotate the new "
            "keys once, before appending them. A cache of raw keys rotated at every step would "
            "attend the same, but redoes the whole cache's rotation each step, and the cache "
            "you are handed is rotated: rotating it again turns its keys twice.",
            {"cache_rotation": "at_use"}),
    Mistake("values rotated too",
            "Rotary positions turn the queries and keys, whose dot products become functions "
            "of the offset; the values are what the weights average and are never rotated.",
            {"rotate_values": True}),
    Mistake("causal mask aligned top-left (the new tokens placed at positions 0 .. T-1)",
            "The T new tokens are the last T of the S = P + T keys: new token t sees keys "
            "0 .. P + t. The mask is aligned at the bottom-right, as in cached_attention.",
            {"mask": "top_left"}),
    Mistake("cache returned without the new tokens (the cache as it came in)",
            "Return the cache after appending the new (rotated) keys and the new values, or "
            "the next step will never see these tokens.", {"returned": "past_only"}),
)


def _rotary_exercise(references: dict) -> Exercise:
    return Exercise(
        name="CachedRotaryAttention",
        reference=lambda x, *cache: references[x.dtype](x, *cache),
        inputs=("x", "past_key", "past_value"),
        outputs=(("out", "(B, T, C)"),
                 ("keys", "(B, H, P + T, D): the cache after appending, rotated keys"),
                 ("values", "(B, H, P + T, D): the cache after appending")),
        variant=lambda x, *cache, **kw: cached_rotary_variant(references[x.dtype], x, *cache,
                                                              **kw),
        mistakes=ROTARY_MISTAKES,
        forbidden=forbid((inference.CachedRotaryAttention.forward,) + NO_BUILT_IN_ATTENTION,
                         ATTENTION_BUILTINS),
    )


def check_cached_rotary_attention(cls, seed: int = 0) -> None:
    """Check a CachedRotaryAttention class (lesson 06's rotary layer, the student's forward):
    built with the reference's weights, it runs new tokens after caches the reference built
    from the tokens before them. Lesson: 07_inference_and_scale"""
    torch.manual_seed(seed)
    reference = inference.CachedRotaryAttention(16, 2).eval()
    references = {torch.float32: reference, torch.float64: copy.deepcopy(reference).double()}
    init = {"d_model": 16, "n_heads": 2}
    student = Harnessed(harness.ModuleUnderTest, (cls, init, dict(reference.state_dict())))
    g = seeded(seed)

    def after(P, T, dtype=torch.float32):
        """T new tokens after the cache the reference built from the P tokens before them."""
        x = randn(2, P + T, 16, generator=g, dtype=dtype)
        if P == 0:
            return x, None, None
        with torch.no_grad():
            _, keys, values = references[dtype](x[:, :P])
        return x[:, P:], keys, values

    cases = [
        Case("a chunk of T = 3 new tokens after a cache of P = 5 (B, C, H = 2, 16, 2)",
             after(5, 3)),
        Case("one decoding step: T = 1 new token after P = 7 cached ones", after(7, 1)),
        Case("an empty cache (None): the prompt's T = 4 tokens at positions 0 .. 3",
             after(0, 4)),
        Case("far along: T = 2 new tokens after P = 40 (positions 40 and 41)", after(40, 2)),
        Case("float64, with gradients: T = 2 after P = 3", after(3, 2, torch.float64),
             grad=True),
    ]
    run_check(_rotary_exercise(references), student, cases,
              reference_parameters=lambda: dict(references[torch.float64].named_parameters()))


# ---------------------------------------------------------------- grouped-query attention

def gqa_variant(query, key, value, is_causal=False, scale=None, *, expand="interleave",
                honour_causal=True, scale_rule="sqrt", honour_scale=True):
    H, G = query.shape[-3], key.shape[-3]
    if expand == "interleave":  # head h reads key/value head h // (H / G)
        key, value = (x.repeat_interleave(H // G, dim=-3) for x in (key, value))
    else:  # "tile": head h reads key/value head h % G
        key, value = (x.repeat(*[1] * (x.ndim - 3), H // G, 1, 1) for x in (key, value))
    factor = scale_factor(scale, query.shape[-1], scale_rule, honour_scale)
    return attention.scaled_dot_product_attention(
        query, key, value, is_causal=is_causal and honour_causal, scale=factor)


GROUPS_TILED = Mistake(
    "key/value heads repeated in the wrong order (repeat instead of repeat_interleave)",
    "Query heads share key/value heads in consecutive groups: with H = 6 and G = 2, heads 0, 1, "
    "2 read key/value head 0 and heads 3, 4, 5 read head 1. Repeating the whole stack of G heads "
    "(0, 1, 0, 1, ...) pairs head 1 with key/value head 1 instead: repeat each head in place.",
    {"expand": "tile"})


# ---------------------------------------------------------------- the grouped-query layer

def gqa_layer_variant(module, query, key, value, is_causal=False, *, expand="interleave",
                      project_output=True, swap_kv=False, scale="d_head", honour_causal=True):
    """The grouped-query layer with one of the known slips."""
    H, G = module.n_heads, module.n_kv_heads
    k_proj, v_proj = (module.v_proj, module.k_proj) if swap_kv else (module.k_proj, module.v_proj)
    q = split_heads(module.q_proj(query), H)  # (B, T, C) -> (B, H, T, D)
    k, v = split_heads(k_proj(key), G), split_heads(v_proj(value), G)  # (B, G, S, D)
    factor = {"d_head": module.d_head ** -0.5, "d_model": module.d_model ** -0.5, "none": 1.0,
              "d": 1.0 / module.d_head, "times_sqrt": module.d_head ** 0.5}[scale]
    out, weights = gqa_variant(q, k, v, is_causal=is_causal and honour_causal, scale=factor,
                               expand=expand)
    out = merge_heads(out)  # (B, H, T, D) -> (B, T, C)
    return (module.out_proj(out) if project_output else out), weights


GQA_LAYER_MISTAKES = (
    GROUPS_TILED,
    Mistake("missing output projection",
            "After merging the heads, apply self.out_proj: it mixes what the heads found.",
            {"project_output": False}),
    Mistake("key and value projections swapped",
            "Keys come from self.k_proj(key) and values from self.v_proj(value).",
            {"swap_kv": True}),
    Mistake("d_model instead of d_head in the scale",
            "Each head's scores are dot products of width D = C / H: scale by 1/sqrt(D), which "
            "the attention function does by default.", {"scale": "d_model"}),
    Mistake("missing 1/sqrt(D)",
            "Scale each head's dot products by 1/sqrt(D), D = C / H the head width, so their "
            "variance stays near 1 and the softmax does not saturate.", {"scale": "none"}),
    Mistake("1/D instead of 1/sqrt(D)",
            "The dot product of two random D-dim vectors has standard deviation sqrt(D): "
            "divide by sqrt(D), D = C / H, not by D.", {"scale": "d"}),
    Mistake("multiplied by sqrt(D) instead of dividing",
            "The scale is 1/sqrt(D), D = C / H: divide by sqrt(D).", {"scale": "times_sqrt"}),
    Mistake("is_causal not passed on",
            "Pass is_causal on to the attention: with is_causal=True query t must not see the "
            "keys after t.", {"honour_causal": False}),
)


def _gqa_layer_exercise(references: dict) -> Exercise:
    return Exercise(
        name="GroupedQueryAttention",
        reference=lambda q, k, v, **kw: references[q.dtype](q, k, v, **kw),
        inputs=("query", "key", "value"),
        outputs=(("out", "(B, T, C)"), ("weights", "(B, H, T, S)")),
        variant=lambda q, k, v, **kw: gqa_layer_variant(references[q.dtype], q, k, v, **kw),
        mistakes=GQA_LAYER_MISTAKES,
        forbidden=forbid((inference.GroupedQueryAttention.forward,
                          inference.grouped_query_attention) + NO_BUILT_IN_ATTENTION,
                         ATTENTION_BUILTINS),
    )


def check_grouped_query_attention_layer(cls, seed: int = 0) -> None:
    """Check a GroupedQueryAttention class, its constructor and its forward: built with the
    constructor's arguments and loaded with the reference's weights (their names and shapes are
    the contract), for G = 2 of H = 6 heads, then G = 3, then G = 1 without biases, then G = H.
    Query head h must read key/value head h // (H / G): at G = 2 and G = 3 of H = 6 the groups
    tiled (h % G), a repeat by G instead of H / G or no repeat at all give other outputs or
    errors.
    Lesson: 07_inference_and_scale"""
    torch.manual_seed(seed)
    g = seeded(seed)
    runs = [
        ({"d_model": 24, "n_heads": 6, "n_kv_heads": 2}, lambda: [
            Case("self-attention, H = 6 query heads sharing G = 2 key/value heads "
                 "(B, T, C = 2, 5, 24)", (x := randn(2, 5, 24, generator=g),) * 3),
            Case("cross-attention: T = 5 queries, S = 7 keys and values",
                 (x, *(randn(2, 7, 24, generator=g),) * 2)),
            Case("is_causal=True, T = S = 6", (randn(2, 6, 24, generator=g),) * 3,
                 {"is_causal": True}),
            Case("float64, with gradients",
                 (randn(2, 5, 24, generator=g, dtype=torch.float64),) * 3, grad=True)]),
        ({"d_model": 24, "n_heads": 6, "n_kv_heads": 3}, lambda: [
            Case("H = 6 query heads sharing G = 3 key/value heads, causal, T = S = 6",
                 (randn(2, 6, 24, generator=g),) * 3, {"is_causal": True})]),
        ({"d_model": 24, "n_heads": 6, "n_kv_heads": 1, "bias": False}, lambda: [
            Case("multi-query attention: G = 1 key/value head for H = 6, bias=False, T = 5, "
                 "S = 7", (randn(2, 5, 24, generator=g), *(randn(2, 7, 24, generator=g),) * 2))]),
        ({"d_model": 24, "n_heads": 6, "n_kv_heads": 6}, lambda: [
            Case("G = H = 6: plain multi-head attention, causal",
                 (randn(2, 6, 24, generator=g),) * 3, {"is_causal": True})]),
    ]
    earlier = 0
    for i, (init, cases) in enumerate(runs):
        reference = inference.GroupedQueryAttention(**init).eval()
        references = {torch.float32: reference, torch.float64: copy.deepcopy(reference).double()}
        student = Harnessed(harness.ModuleUnderTest, (cls, init, dict(reference.state_dict())))
        cases = cases()
        last = i == len(runs) - 1
        run_check(_gqa_layer_exercise(references), student, cases, quiet=not last,
                  earlier=earlier if last else 0,
                  reference_parameters=lambda r=references: dict(
                      r[torch.float64].named_parameters()))
        earlier += len(cases)


# ---------------------------------------------------------------- tiled attention

def tiled_variant(query, key, value, is_causal=False, scale=None, block_size=64, *,
                  rescale_output=True, rescale_normaliser=True, divide=True,
                  positions="absolute", drop_last=False, shift="running", scale_rule="sqrt",
                  honour_scale=True, lse="m_plus_log_l"):
    """Tiled attention with one of the known slips in its online softmax, its causal mask, its
    loop over the blocks, its scale or its logsumexp; the arithmetic is float32 for 16-bit
    inputs, as the reference's."""
    T, S = query.shape[-2], key.shape[-2]
    dtype = query.dtype
    query, key, value = (x.to(compute_dtype(dtype)) for x in (query, key, value))
    factor = scale_factor(scale, query.shape[-1], scale_rule, honour_scale)
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
        last = m_new + torch.log(p.sum(dim=-1, keepdim=True))  # the last block's own
    out = acc / l if divide else acc
    lse = {"m_plus_log_l": m + torch.log(l), "log_l": torch.log(l), "m": m,
           "log2": m + torch.log2(l), "last_block": last}[lse]
    return out.to(dtype), lse.squeeze(-1)


def lse_in_16_bits(got, expected) -> bool:
    """The logsumexp returned in the 16-bit dtype of the inputs, where float32 is expected,
    with the right output."""
    return (got[1].dtype in (torch.float16, torch.bfloat16)
            and expected[1].dtype == torch.float32 and matches(got[0], expected[0]))


def all_in_16_bits(got, expected) -> bool:
    """The output wrong and the logsumexp in 16 bits: the running statistics kept in the
    16-bit dtype of the inputs."""
    return (got[1].dtype in (torch.float16, torch.bfloat16)
            and expected[1].dtype == torch.float32 and not matches(got[0], expected[0]))


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
    Mistake("logsumexp without the running max (log l alone)",
            "l sums exp(score - m): it was divided by e^m, so log l is the logsumexp minus m. "
            "Add the running max back: L = m + log l.", {"lse": "log_l"}),
    Mistake("logsumexp is the running max alone (the log of the sum left out)",
            "m is only the largest score; the logsumexp log(sum_s e^score_s) = m + log l is "
            "larger by log l, which counts how many keys score near the top.", {"lse": "m"}),
    Mistake("logsumexp in base 2 (log2 of the sum)",
            "The logsumexp is a natural logarithm, L = m + ln l, as torch.logsumexp and "
            "merge_attention's e^(L_a - L) read it: torch.log, not torch.log2.",
            {"lse": "log2"}),
    Mistake("logsumexp of the last block only",
            "The logsumexp covers every key a query sees: take it after the loop, from the "
            "running max and running sum over all the blocks, not from one block's scores.",
            {"lse": "last_block"}),
    Mistake("logsumexp rounded to 16 bits",
            "A bfloat16 number near 30 is a multiple of 0.125, and e^(L_a - L) of rounded "
            "logsumexps is off by several percent when two parts are merged. For 16-bit "
            "inputs return the logsumexp in float32 (the dtype your running statistics are "
            "in); round only the output to the inputs' dtype.", sign=lse_in_16_bits),
    Mistake("16-bit arithmetic: the running statistics kept in the inputs' dtype",
            "Every block rescales the running sum and output once more, and in bfloat16 (8 "
            "significant bits) each step rounds them by up to 0.4%. For 16-bit inputs compute "
            "in float32 (FlashAttention does too), return the logsumexp in float32, and round "
            "the output to the inputs' dtype once, at the end.", sign=all_in_16_bits),
) + SCALE_MISTAKES + (IGNORES_SCALE, ZERO_SCALE_AS_NONE)

# out of torch, where the size watch of a tiled exercise cannot see: the whole (T, S) matrix
# computed in numpy or in Python numbers would pass it
OUT_OF_TORCH = (torch.Tensor.__array__, torch.Tensor.__dlpack__)
OUT_OF_TORCH_BUILTINS = ("numpy", "tolist", "untyped_storage", "dlpack")

TILED_ATTENTION = Exercise(
    name="tiled_attention",
    reference=tiled.tiled_attention,
    inputs=("query", "key", "value"),
    outputs=(("out", "(B, H, T, Dv)"),
             ("lse", "(B, H, T): each query's logsumexp, float32 for 16-bit inputs")),
    variant=tiled_variant,
    mistakes=TILED_MISTAKES,
    forbidden=forbid((tiled.tiled_attention, tiled.flash_attention,
                      attention.scaled_dot_product_attention) + NO_BUILT_IN_ATTENTION
                     + OUT_OF_TORCH, ATTENTION_BUILTINS + OUT_OF_TORCH_BUILTINS),
)


def check_tiled_attention(fn, seed: int = 0) -> None:
    """Check tiled_attention(query, key, value, is_causal=False, scale=None, block_size=64)
    -> (out, lse). Besides the outputs, no tensor as large as every query against every key may
    be created along the way. Lesson: 07_inference_and_scale"""
    g = seeded(seed)

    def inputs(*batch, T, S, D=4, Dv=5, dtype=torch.float32, spread=1.0):
        return (spread * randn(*batch, T, D, generator=g, dtype=dtype),
                spread * randn(*batch, S, D, generator=g, dtype=dtype),
                randn(*batch, S, Dv, generator=g, dtype=dtype))

    def far_below(*batch, T, S, D=4, Dv=5):  # query against key: every score -128 or less
        # multiples of 1/4 between 8 and 12: every score is exact in float32, so an answer
        # whose arithmetic is float64 meets the float32 reference within its tolerance
        def quarters(*shape):
            return 8 + torch.randint(0, 17, shape, generator=g).float() / 4
        return (-quarters(*batch, T, D), quarters(*batch, S, D), randn(*batch, S, Dv, generator=g))

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
        Case("every score far below -88 (-128 and lower): exp() underflows to 0 unless "
             "each query's running max starts at -inf, blocks of 3", far_below(2, 3, T=5, S=7),
             {"block_size": 3}),
        Case("an explicit scale=0.3, blocks of 3", inputs(2, 3, T=5, S=7),
             {"scale": 0.3, "block_size": 3}),
        Case("scale=0: every key weighs the same, blocks of 3", inputs(2, 3, T=5, S=7),
             {"scale": 0.0, "block_size": 3}),
        Case("block_size = 16, larger than S = 7: a single block", inputs(2, 3, T=5, S=7),
             {"block_size": 16}),
        Case("bfloat16 inputs, scores about 16 times larger, blocks of 3: the output in "
             "bfloat16, the logsumexp in float32", inputs(2, 3, T=5, S=9, spread=2.0,
                                                          dtype=torch.bfloat16),
             {"block_size": 3}),
        Case("one sequence without batch dims, (T, D) and (S, D), blocks of 3",
             inputs(T=5, S=7), {"is_causal": True, "block_size": 3}),
    ]
    run_check(TILED_ATTENTION, Harnessed(harness.WithinBlocks, (fn,)), cases)


# ---------------------------------------------------------------- merging partial attentions

def merge_variant(out_a, lse_a, out_b, lse_b, *, shares="exact", total="logaddexp",
                  shift=True, empty_rows=True, internals="wide"):
    """Merging with one of the known slips: the outputs averaged, swapped or left unnormalised,
    another total logsumexp, no shift by the maximum, NaN in empty rows, 16-bit arithmetic."""
    wide = compute_dtype(out_a.dtype) if internals == "wide" else out_a.dtype
    a, b = lse_a.to(wide), lse_b.to(wide)
    lse = {"logaddexp": torch.logaddexp(a, b), "max": torch.maximum(a, b), "sum": a + b}[total]
    if not shift:  # e^lse_a / (e^lse_a + e^lse_b) as written: overflows and underflows
        e_a, e_b = torch.exp(a), torch.exp(b)
        share_a, share_b = e_a / (e_a + e_b), e_b / (e_a + e_b)
    else:
        top = torch.maximum(a, b) if shares == "unnormalised" else torch.logaddexp(a, b)
        base = top.masked_fill(top == NEG_INF, 0.0) if empty_rows else top
        share_a, share_b = torch.exp(a - base), torch.exp(b - base)
    if shares == "average":
        share_a, share_b = torch.full_like(a, 0.5), torch.full_like(b, 0.5)
    if shares == "swapped":
        share_a, share_b = share_b, share_a
    out = share_a[..., None] * out_a.to(wide) + share_b[..., None] * out_b.to(wide)
    return out.to(out_a.dtype), lse.to(lse_a.dtype)


MERGE_MISTAKES = (
    Mistake("outputs averaged instead of weighted by each part's share",
            "Each part's output is normalised over its own keys only. A part whose scores are "
            "larger, or that holds more keys, carries more of the union's weight: its share is "
            "e^(lse_part - lse) with lse the union's logsumexp.", {"shares": "average"}),
    Mistake("shares swapped (part a's output weighted by part b's share)",
            "Part a's output is multiplied by e^(lse_a - lse), its own share of the union's "
            "exponentials, and part b's by e^(lse_b - lse).", {"shares": "swapped"}),
    Mistake("shares not normalised (shifted by the larger logsumexp, not by the union's)",
            "Subtracting max(lse_a, lse_b) keeps the exponentials finite, but then the two "
            "shares do not add up to 1: divide by their sum, or subtract the union's logsumexp "
            "log(e^lse_a + e^lse_b) instead.", {"shares": "unnormalised"}),
    Mistake("merged logsumexp is the larger one, not the log of the sum",
            "The union's logsumexp is log(e^lse_a + e^lse_b), which is larger than both: the "
            "maximum alone drops the smaller part's exponentials.", {"total": "max"}),
    Mistake("merged logsumexp is lse_a + lse_b (a product, not a sum, of the exponentials)",
            "Adding logarithms multiplies what they are the logarithms of: the union's sum of "
            "exponentials is e^lse_a + e^lse_b, so its logarithm is log(e^lse_a + e^lse_b).",
            {"total": "sum"}),
    Mistake("exponentials of the raw logsumexps: they overflow or underflow",
            "e^lse overflows to inf for lse above about 88 (float32) and underflows to 0 below "
            "about -100, and inf / inf or 0 / 0 is NaN. Exponentiate differences: lse_a - lse "
            "and lse_b - lse are at most 0.", {"shift": False}),
    Mistake("a row with no key in either part gives NaN",
            "When both logsumexps are -inf the merged one is -inf too, and -inf - (-inf) is NaN. "
            "Such a row attends to nothing: its output is 0, as in each part. Subtract 0 "
            "instead of -inf there.", {"empty_rows": False}),
    Mistake("16-bit arithmetic: the logsumexps rounded to the outputs' dtype",
            "A bfloat16 number near 30 is a multiple of 0.125: rounded logsumexps move each "
            "share by several percent. Keep the logsumexps in float32 (as they come) and the "
            "arithmetic in float32; round the output to its dtype once, at the end.",
            {"internals": "narrow"}),
)

MERGE_ATTENTION = Exercise(
    name="merge_attention",
    reference=tiled.merge_attention,
    inputs=("out_a", "lse_a", "out_b", "lse_b"),
    outputs=(("out", "(B, H, T, Dv)"), ("lse", "(B, H, T)")),
    variant=merge_variant,
    mistakes=MERGE_MISTAKES,
    forbidden=forbid((tiled.merge_attention,) + NO_BUILT_IN_ATTENTION, ATTENTION_BUILTINS),
)


def attend_with_lse(query, key, value, allowed):
    """The output and logsumexp of attention over the keys ``allowed`` (bool (T, S), True = may
    attend), computed in float64: 0 and -inf in a row with none."""
    q, k, v = query.double(), key.double(), value.double()
    scores = (q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5).masked_fill(~allowed, NEG_INF)
    lse = torch.logsumexp(scores, dim=-1)  # (..., T)
    weights = torch.exp(scores - lse.masked_fill(lse == NEG_INF, 0.0)[..., None])
    return weights @ v, lse


def split_attention(g, *batch, T=5, S=9, D=4, Dv=3, part_a=None, allowed=None, spread=1.0,
                    dtype=torch.float32, lse_dtype=None):
    """Each part's (out, lse) for a split of S keys into part a (``part_a``: a bool (S,), random
    when None) and the rest; ``allowed`` (T, S) hides keys from some queries."""
    query = spread * randn(*batch, T, D, generator=g, dtype=torch.float64)
    key = spread * randn(*batch, S, D, generator=g, dtype=torch.float64)
    value = randn(*batch, S, Dv, generator=g, dtype=torch.float64)
    part_a = torch.rand(S, generator=g) < 0.5 if part_a is None else part_a
    allowed = torch.ones(T, S, dtype=torch.bool) if allowed is None else allowed
    out_a, lse_a = attend_with_lse(query, key, value, allowed & part_a)
    out_b, lse_b = attend_with_lse(query, key, value, allowed & ~part_a)
    lse_dtype = dtype if lse_dtype is None else lse_dtype
    return out_a.to(dtype), lse_a.to(lse_dtype), out_b.to(dtype), lse_b.to(lse_dtype)


def check_merge_attention(fn, seed: int = 0) -> None:
    """Check merge_attention(out_a, lse_a, out_b, lse_b) -> (out, lse). Lesson:
    07_inference_and_scale"""
    g = seeded(seed)
    first = torch.arange(9) < 1  # part a: the first key alone
    some_rows_empty = torch.ones(5, 9, dtype=torch.bool).tril(1)  # row 0 sees keys 0 and 1 only
    some_rows_empty[3] = False  # and query 3 may attend to nothing at all
    cases = [
        Case("9 keys split at random into two parts (B, H, T, Dv = 2, 3, 5, 3)",
             split_attention(g, 2, 3)),
        Case("one key in part a, eight in part b", split_attention(g, 2, 3, part_a=first)),
        Case("a causal-like mask: some queries see no key of part b, query 3 sees none at all",
             split_attention(g, 2, 3, part_a=torch.arange(9) < 2, allowed=some_rows_empty)),
        Case("float64, with gradients", split_attention(g, 2, 3, dtype=torch.float64),
             grad=True),
        Case("bfloat16 outputs with float32 logsumexps in the tens (scores 16 times larger)",
             split_attention(g, 2, 3, spread=4.0, dtype=torch.bfloat16,
                             lse_dtype=torch.float32)),
        Case("extreme scores: logsumexps in the hundreds, far apart between the parts",
             split_attention(g, 2, 3, spread=12.0)),
        Case("one sequence without batch dims: (T, Dv) outputs, (T,) logsumexps",
             split_attention(g, T=4, S=7)),
    ]
    run_check(MERGE_ATTENTION, fn, cases)
