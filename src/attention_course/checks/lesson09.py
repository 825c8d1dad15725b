"""Checks for lesson 09_sliding_windows: the sliding-window mask with sinks, the rolling
key/value cache, rotary positions in that cache, and attention with a learned sink logit."""

import torch

from .. import attention, inference, streaming
from ..attention import compute_dtype
from ..rope import apply_rotary, rotary_angles
from .framework import Case, Exercise, Mistake, randn, run_check, seeded
from .lesson02 import ATTENTION_BUILTINS, IGNORES_SCALE, NO_BUILT_IN_ATTENTION, SCALE_MISTAKES
from .lesson03 import INVERTED
from .lesson07 import SCALES, scale_factor
from .student.shortcuts import forbid

NEG_INF = float("-inf")


# ---------------------------------------------------------------- the sliding-window mask

def window_variant(T, S, window, n_sinks=0, device=None, *, count="self_in", align="bottom_right",
                   sinks="kept", causal=True, inverted=False, honour_device=True):
    """The mask with one of the known slips: the window one too wide or too narrow, or none at
    all (a plain causal mask), aligned top-left, the sinks left out, one too many, or visible
    from the past, no causal side, polarity inverted, the device ignored."""
    device = device if honour_device else None
    query_at = torch.arange(T, device=device)[:, None] + (S - T if align == "bottom_right" else 0)
    key_at = torch.arange(S, device=device)[None, :]
    width = {"self_in": window, "self_out": window + 1, "short": window - 1,
             "none": S + T + 1}[count]
    before = key_at <= query_at
    recent = key_at > query_at - width if causal else (key_at - query_at).abs() < width
    recent = recent & before if causal else recent
    sink = key_at <= n_sinks if sinks == "one_more" else key_at < n_sinks
    allowed = recent | {"kept": sink & before, "one_more": sink & before, "future": sink,
                        "none": sink & False}[sinks]
    return ~allowed if inverted else allowed


WINDOW_SELF_OUT = Mistake(
    "window off by one: W keys besides the query itself (W + 1 in all)",
    "The window counts the query's own position: query p sees keys j with p - W < j <= p, "
    "which is W keys, itself included (window=1 is the token alone).", {"count": "self_out"})
WINDOW_SHORT = Mistake(
    "window off by one: W - 1 keys in all",
    "The window counts the query's own position: query p sees keys j with p - W < j <= p, "
    "W keys, itself included. p - W + 1 < j leaves one out.", {"count": "short"})
WINDOW_TOP_LEFT = Mistake(
    "window aligned top-left (the queries placed at positions 0 .. T-1)",
    "The T queries are the LAST T of the S positions, as after a cache: query t sits at "
    "position p = S - T + t, and its window ends there.", {"align": "top_left"})
SINKS_IGNORED = Mistake(
    "sinks left out (n_sinks ignored)",
    "The first n_sinks keys are visible to every query, however far back they are, besides "
    "its window.", {"sinks": "none"})
SINKS_IN_THE_FUTURE = Mistake(
    "sinks visible to queries before them (a sink in the future)",
    "A sink is a key like any other for a query that comes before it: query p sees sink j only "
    "when j <= p. The rule 'always visible' applies to the queries after the sinks.",
    {"sinks": "future"})
WINDOW_BOTH_SIDES = Mistake(
    "window on both sides (the future within W is visible)",
    "A causal window looks back only: p - W < j <= p. |p - j| < W also lets the query see the "
    "next W - 1 tokens.", {"causal": False})
WINDOW_IGNORED = Mistake(
    "window ignored (a plain causal mask)",
    "A query sees only the last W positions, itself included (p - W < j <= p), and the "
    "sinks: the causal side alone lets it see every earlier key.", {"count": "none"})
SINKS_ONE_TOO_MANY = Mistake(
    "sinks off by one: j <= n_sinks makes n_sinks + 1 sinks (key 0 one even with no sinks)",
    "The sinks are the first n_sinks keys, j = 0 .. n_sinks - 1: j < n_sinks. With "
    "n_sinks = 0 there is none.", {"sinks": "one_more"})
DEVICE_IGNORED = Mistake(
    "device argument ignored",
    "Build the mask on the device it is given (a GPU, say), where the scores it masks live: "
    "pass device=device to the functions that create tensors.", {"honour_device": False})

SLIDING_WINDOW_MASK = Exercise(
    name="sliding_window_mask",
    reference=streaming.sliding_window_mask,
    inputs=("T", "S", "window", "n_sinks"),
    outputs=(("mask", "(T, S) bool"),),
    variant=window_variant,
    mistakes=(WINDOW_SELF_OUT, WINDOW_SHORT, WINDOW_TOP_LEFT, SINKS_IGNORED, SINKS_IN_THE_FUTURE,
              SINKS_ONE_TOO_MANY, WINDOW_IGNORED, WINDOW_BOTH_SIDES, INVERTED, DEVICE_IGNORED),
    forbidden=forbid([streaming.sliding_window_mask]),
)


def check_sliding_window_mask(fn, seed: int = 0) -> None:
    """Check sliding_window_mask(T, S, window, n_sinks=0, device=None) -> (T, S) bool.
    Lesson: 09_sliding_windows"""
    g = seeded(seed)
    extra = int(torch.randint(0, 3, (1,), generator=g))  # other sizes on other seeds
    cases = [
        Case(f"T = 3 new queries after {6 + extra} cached keys (S = {9 + extra}), window 4, "
             "2 sinks", (3, 9 + extra, 4, 2)),
        Case(f"T = S = {7 + extra}, window 3, no sinks", (7 + extra, 7 + extra, 3)),
        Case(f"one decoding step: T = 1, S = {12 + extra}, window 5, 1 sink",
             (1, 12 + extra, 5, 1)),
        Case("window 1: each query sees itself (and the sinks); T = S = 6, 2 sinks",
             (6, 6, 1, 2)),
        Case("3 sinks and T = S = 5, window 2: the first queries come before some sinks",
             (5, 5, 2, 3)),
        Case("a window wider than the sequence: T = 4, S = 6, window 10 (plain causal)",
             (4, 6, 10)),
        Case("device='cpu' while torch's default device is 'meta' (a device without data): "
             "the mask must be built on the device given", (3, 8, 3, 1), {"device": "cpu"},
             default_device="meta"),
    ]
    run_check(SLIDING_WINDOW_MASK, fn, cases)


# ---------------------------------------------------------------- the rolling cache

def keep_of(cache, window, n_sinks, evict="sinks_and_recent", axis=-2, slices="own_length"):
    """What a cache keeps after appending, with one of the known slips. On the wrong axis the
    length is read from the sequence axis and the slices are taken along ``axis``, either
    counted from that axis's own end (``x[..., -keep:, :, :]``) or with the sequence's
    indices (``x[:, :n_sinks]`` and ``x[:, S - keep:]`` on a (B, H, S, D) cache)."""
    S, size = cache.shape[-2], cache.shape[axis]
    keep = {"sinks_and_recent": window - 1, "one_more": window, "last_only": window - 1,
            "negative_slice": window - 1, "test_without_sinks": window - 1,
            "test_off_by_one": window - 1, "none": S}[evict]
    if evict == "test_without_sinks":  # `if S > W - 1`: the recent part may overlap the sinks
        if S <= keep:
            return cache
        return torch.cat([cache[..., :n_sinks, :], cache[..., S - keep:, :]], dim=-2)
    if evict == "none" or S <= n_sinks + keep + (evict == "test_off_by_one"):
        return cache
    if slices == "sequence" and axis != -2:
        first, recent = [slice(None)] * cache.dim(), [slice(None)] * cache.dim()
        first[axis], recent[axis] = slice(None, n_sinks), slice(S - keep, None)
        return torch.cat([cache[tuple(first)], cache[tuple(recent)]], dim=axis)
    if evict == "last_only":  # the sinks evicted: the last n_sinks + W - 1 tokens
        return cache.narrow(axis, size - n_sinks - keep, n_sinks + keep)
    if evict == "negative_slice":  # cache[..., -keep:, :], which keeps it all when keep = 0
        recent = cache[..., -keep:, :] if axis == -2 else cache.narrow(axis, size - keep, keep)
        return torch.cat([cache.narrow(axis, 0, min(n_sinks, size)), recent], dim=axis)
    return torch.cat([cache.narrow(axis, 0, min(n_sinks, size)),
                      cache.narrow(axis, size - keep, keep)], dim=axis)


def rolling_variant(query, key, value, past_key=None, past_value=None, *, window, n_sinks=0,
                    count="self_in", align="bottom_right", sinks="kept", order="old_first",
                    evict="sinks_and_recent", evict_axis=-2, evict_slices="own_length",
                    evict_first=False, scale_rule="sqrt"):
    """The rolling cache with one of the known slips: the mask's slips (window off by one,
    top-left, sinks left out), the cache appended in the wrong order, evicted before attending,
    evicting the sinks, keeping one token too many, not evicting, evicting on another axis,
    testing for eviction without counting the sinks."""
    if past_key is not None:
        first, then = ((past_key, past_value), (key, value)) if order == "old_first" else \
            ((key, value), (past_key, past_value))
        key, value = torch.cat([first[0], then[0]], dim=-2), torch.cat([first[1], then[1]], -2)
    if evict_first:
        key, value = keep_of(key, window, n_sinks), keep_of(value, window, n_sinks)
    T, S = query.shape[-2], key.shape[-2]
    allowed = window_variant(T, S, window, n_sinks, query.device, count=count, align=align,
                             sinks=sinks)
    out, _ = attention.scaled_dot_product_attention(query, key, value, attn_mask=allowed,
                                                    scale=SCALES[scale_rule](query.shape[-1]))
    if not evict_first:
        key = keep_of(key, window, n_sinks, evict, evict_axis, evict_slices)
        value = keep_of(value, window, n_sinks, evict, evict_axis, evict_slices)
    return out, key, value


ROLLING_MISTAKES = (
    Mistake("sinks evicted (the cache keeps the last n_sinks + W - 1 tokens)",
            "The cache keeps two parts: the first n_sinks tokens of the stream, which are never "
            "evicted, and the last W - 1 tokens. Evicting the oldest tokens whatever they are "
            "throws the sinks away at the first eviction.", {"evict": "last_only"}),
    Mistake("cache keeps W recent tokens, one more than the next token needs",
            "The next token sees W positions, itself included: W - 1 of them are in the cache "
            "when it arrives. Keep the last W - 1 (and the sinks); a cache of W + n_sinks "
            "holds a key no query will ever see.", {"evict": "one_more"}),
    Mistake("nothing evicted (the cache grows like lesson 07's)",
            "After appending, drop the tokens no later query can see: keep the first n_sinks "
            "and the last W - 1, so the cache never holds more than n_sinks + W - 1.",
            {"evict": "none"}),
    Mistake("eviction on the wrong axis (the heads' axis)",
            "Keys and values are (B, H, S, D): tokens lie along the sequence axis, dim=-2. "
            "Keep the first n_sinks and the last W - 1 along that axis.",
            {"evict_axis": -3}),
    Mistake("eviction on the wrong axis (the head width D)",
            "Keys and values are (B, H, S, D): tokens lie along the sequence axis, dim=-2, "
            "not the last one.", {"evict_axis": -1}),
    Mistake("evicted before attending: the new tokens of a chunk lose keys they need",
            "Attend first, over the cache and all the new tokens, and evict afterwards. With "
            "one new token nothing it needs is evicted, but the first tokens of a chunk of "
            "several need older keys than the last one.", {"evict_first": True}),
    Mistake("window 1: a slice from -(W - 1) = -0 keeps every token",
            "With window 1 a query sees itself alone and the cache keeps only the sinks, but "
            "x[..., -0:, :] is the whole of x (-0 is 0). Slice the recent tokens from "
            "S - (W - 1) instead, which is S when W = 1.", {"evict": "negative_slice"}),
    Mistake("cache appended in the wrong order (the new keys before the cached ones)",
            "The cache holds the sinks, then the recent tokens in position order: concatenate "
            "the cache first, then the new keys and values.", {"order": "new_first"}),
    Mistake("eviction on the wrong axis (the heads' axis)",
            "Keys and values are (B, H, S, D): x[:, :n] slices the heads. Tokens lie along the "
            "sequence axis, dim=-2: x[..., :n, :].",
            {"evict_axis": -3, "evict_slices": "sequence"}),
    Mistake("eviction on the wrong axis (the head width D)",
            "Keys and values are (B, H, S, D): x[..., :n] slices the head width. Tokens lie "
            "along the sequence axis, dim=-2: x[..., :n, :].",
            {"evict_axis": -1, "evict_slices": "sequence"}),
    Mistake("eviction test forgets the sinks: between W and n_sinks + W - 1 tokens the cache "
            "keeps some twice",
            "Evict only when the cache holds more than n_sinks + W - 1 tokens. Testing against "
            "W - 1 alone evicts too early: the last W - 1 tokens then overlap the sinks, and "
            "those tokens are kept twice.", {"evict": "test_without_sinks"}),
    Mistake("eviction test off by one: a cache of exactly n_sinks + W tokens is not evicted",
            "The cache may hold n_sinks + W - 1 tokens after a step: evict as soon as it holds "
            "more than that, n_sinks + W included.", {"evict": "test_off_by_one"}),
    WINDOW_SELF_OUT, WINDOW_SHORT, WINDOW_TOP_LEFT, SINKS_IGNORED, WINDOW_IGNORED,
) + SCALE_MISTAKES
EVICTION_TEST_WITHOUT_SINKS, EVICTION_TEST_OFF_BY_ONE = ROLLING_MISTAKES[10:12]

ROLLING_CACHE_ATTENTION = Exercise(
    name="rolling_cache_attention",
    reference=streaming.rolling_cache_attention,
    inputs=("query", "key", "value", "past_key", "past_value"),
    outputs=(("out", "(B, H, T, Dv)"),
             ("keys", "(B, H, P', D): the cache after appending and evicting"),
             ("values", "(B, H, P', Dv): the cache after appending and evicting")),
    variant=rolling_variant,
    mistakes=ROLLING_MISTAKES,
    forbidden=forbid((streaming.rolling_cache_attention, streaming.evict)
                     + NO_BUILT_IN_ATTENTION, ATTENTION_BUILTINS),
)


def stream_inputs(g, *batch, P, T, D=4, Dv=6, dtype=torch.float32):
    """Query, key, value of T new tokens and a cache of P tokens (None when P = 0)."""
    new = (randn(*batch, T, D, generator=g, dtype=dtype),
           randn(*batch, T, D, generator=g, dtype=dtype),
           randn(*batch, T, Dv, generator=g, dtype=dtype))
    if P == 0:
        return (*new, None, None)
    return (*new, randn(*batch, P, D, generator=g, dtype=dtype),
            randn(*batch, P, Dv, generator=g, dtype=dtype))


def check_rolling_cache_attention(fn, seed: int = 0) -> None:
    """Check rolling_cache_attention(query, key, value, past_key=None, past_value=None, *,
    window, n_sinks=0) -> (out, keys, values). Lesson: 09_sliding_windows"""
    g = seeded(seed)
    cases = [
        Case("one decoding step after a full cache: window 4, 2 sinks, P = 2 + 3 = 5, T = 1 "
             "(B, H, D, Dv = 2, 3, 4, 6)", stream_inputs(g, 2, 3, P=5, T=1),
             {"window": 4, "n_sinks": 2}),
        Case("a chunk of T = 3 new tokens after a full cache: window 4, 1 sink, P = 4",
             stream_inputs(g, 2, 3, P=4, T=3), {"window": 4, "n_sinks": 1}),
        Case("a cache not full yet: window 5, 1 sink, P = 2, T = 1 (nothing to evict)",
             stream_inputs(g, 2, 3, P=2, T=1), {"window": 5, "n_sinks": 1}),
        Case("an empty cache (None) and a prompt of T = 7 tokens: window 3, 2 sinks",
             stream_inputs(g, 2, 3, P=0, T=7), {"window": 3, "n_sinks": 2}),
        Case("no sinks: window 3, P = 2, T = 2", stream_inputs(g, 2, 3, P=2, T=2),
             {"window": 3}),
        Case("window 1 (each token sees itself alone) and 1 sink: P = 1, T = 2",
             stream_inputs(g, 2, 3, P=1, T=2), {"window": 1, "n_sinks": 1}),
        Case("float64, with gradients: window 3, 1 sink, P = 3, T = 2",
             stream_inputs(g, 2, 3, P=3, T=2, dtype=torch.float64),
             {"window": 3, "n_sinks": 1}, grad=True),
        Case("one sequence, one head: (T, D) queries with a (P, D) cache, window 4, 1 sink, "
             "P = 4, T = 2", stream_inputs(g, P=4, T=2), {"window": 4, "n_sinks": 1}),
        Case("more than W - 1 tokens but no more than n_sinks + W - 1 (nothing to evict yet): "
             "window 3, 2 sinks, P = 2, T = 1", stream_inputs(g, 2, 3, P=2, T=1),
             {"window": 3, "n_sinks": 2}),
    ]
    run_check(ROLLING_CACHE_ATTENTION, fn, cases)


# ---------------------------------------------------------------- rotary positions in the cache

def rolling_rotary_variant(query, key, value, past_key=None, past_value=None, *, start, window,
                           n_sinks=0, base=10000.0, positions="stream", rotate_cache=False,
                           rotate_values=False, rotate_queries=True, angle_dtype="wide",
                           honour_base=True, **rolling_knobs):
    """Rotary positions in the rolling cache with one of the known slips: the new tokens at the
    cache's length (positions renumbered after eviction) or at 0 .. T-1, the cached keys
    rotated again at their places in the cache, the values rotated, the queries not rotated,
    float32 angles for float64 inputs, the base ignored; and the rolling cache's own slips."""
    base = base if honour_base else 10000.0
    T, D, P = query.shape[-2], query.shape[-1], 0 if past_key is None else past_key.shape[-2]
    first = {"stream": start, "cache": P, "zero": 0}[positions]
    wide = compute_dtype(query.dtype) if angle_dtype == "wide" else torch.float32

    def angles(at, n):
        return rotary_angles(torch.arange(at, at + n, device=query.device), D, base=base,
                             dtype=wide)

    key = apply_rotary(key, angles(first, T))
    query = apply_rotary(query, angles(first, T)) if rotate_queries else query
    value = apply_rotary(value, angles(first, T)) if rotate_values else value
    if rotate_cache and past_key is not None:  # StreamingLLM's positions, on rotated keys
        past_key = apply_rotary(past_key, angles(0, P))
    return rolling_variant(query, key, value, past_key, past_value, window=window,
                           n_sinks=n_sinks, **rolling_knobs)


BASE_IGNORED = Mistake(
    "base argument ignored (the angles always made with base 10000)",
    "The angles of position p are p * base ** (-2i / D): pass the base you are given on to "
    "the function that makes them.", {"honour_base": False})

ROTARY_MISTAKES = (
    Mistake("positions renumbered after eviction (the new tokens placed at the cache's length)",
            "Once the cache has evicted tokens its length is no longer the number of tokens "
            "before the new ones: the first new token sits at position `start` of the stream. "
            "Rotate its query and key at start, start + 1, ...", {"positions": "cache"}),
    Mistake("new tokens rotated at positions 0 .. T-1 (counted from 0 at every step)",
            "The new tokens sit at positions start .. start + T - 1 of the stream: rotate "
            "their queries and keys by the angles of those positions.", {"positions": "zero"}),
    Mistake("cached keys rotated again at their places in the cache (double rotation)",
            "The cache holds keys already rotated at their positions in the stream. Rotating "
            "them again at 0 .. P-1 (positions within the cache, as StreamingLLM assigns them "
            "to keys it caches un-rotated) turns them twice. Rotate only the new keys, once.",
            {"rotate_cache": True}),
    Mistake("values rotated too",
            "Rotary positions turn the queries and keys, whose dot products then depend on the "
            "offset; the values are never rotated.", {"rotate_values": True}),
    Mistake("queries not rotated (only the keys)",
            "A query and a key turn by the angles of their own positions, so that their dot "
            "product depends on the offset between them: rotate the new queries too, at the "
            "same positions as the new keys.", {"rotate_queries": False}),
    Mistake("rotary angles in float32 for float64 inputs",
            "An angle near 30 radians in float32 is off by about 1e-6: float64 queries and keys "
            "rotated by it are off by as much. Make the angles in the inputs' dtype (float32 "
            "for 16-bit inputs, as lesson 06 does).", {"angle_dtype": "float32"}),
    BASE_IGNORED,
    ROLLING_MISTAKES[0], ROLLING_MISTAKES[2], EVICTION_TEST_WITHOUT_SINKS,
    EVICTION_TEST_OFF_BY_ONE, WINDOW_TOP_LEFT, WINDOW_SELF_OUT, WINDOW_SHORT, SINKS_IGNORED,
    WINDOW_IGNORED,
)

ROLLING_ROTARY_ATTENTION = Exercise(
    name="rolling_rotary_attention",
    reference=streaming.rolling_rotary_attention,
    inputs=("query", "key", "value", "past_key", "past_value"),
    outputs=(("out", "(B, H, T, Dv)"),
             ("keys", "(B, H, P', D): the cache after appending and evicting, rotated keys"),
             ("values", "(B, H, P', Dv): the cache after appending and evicting")),
    variant=rolling_rotary_variant,
    mistakes=ROTARY_MISTAKES,
    forbidden=forbid((streaming.rolling_rotary_attention, inference.CachedRotaryAttention.forward)
                     + NO_BUILT_IN_ATTENTION, ATTENTION_BUILTINS),
)


def rotary_inputs(g, *batch, P, T, D=4, dtype=torch.float32):
    """As ``stream_inputs``, with values as wide as the keys (D), as in a rotary layer."""
    return stream_inputs(g, *batch, P=P, T=T, D=D, Dv=D, dtype=dtype)


def check_rolling_rotary_attention(fn, seed: int = 0) -> None:
    """Check rolling_rotary_attention(query, key, value, past_key=None, past_value=None, *,
    start, window, n_sinks=0, base=10000.0) -> (out, keys, values). Lesson: 09_sliding_windows"""
    g = seeded(seed)
    far = 30 + int(torch.randint(0, 20, (1,), generator=g))  # another place on other seeds
    cases = [
        Case(f"one decoding step far into the stream: start = {far}, window 4, 2 sinks, a full "
             "cache of P = 5 (B, H, D = 2, 3, 4)", rotary_inputs(g, 2, 3, P=5, T=1),
             {"start": far, "window": 4, "n_sinks": 2}),
        Case("a chunk of T = 3 new tokens at start = 17 after a full cache: window 4, 1 sink, "
             "P = 4", rotary_inputs(g, 2, 3, P=4, T=3),
             {"start": 17, "window": 4, "n_sinks": 1}),
        Case("the prompt: an empty cache (None), T = 6 tokens at start = 0, window 3, 1 sink",
             rotary_inputs(g, 2, 3, P=0, T=6), {"start": 0, "window": 3, "n_sinks": 1}),
        Case("nothing evicted yet: start = P = 3, window 5, 1 sink, T = 1",
             rotary_inputs(g, 2, 3, P=3, T=1), {"start": 3, "window": 5, "n_sinks": 1}),
        Case("float64, with gradients: start = 25, window 3, 1 sink, P = 3, T = 2",
             rotary_inputs(g, 2, 3, P=3, T=2, dtype=torch.float64),
             {"start": 25, "window": 3, "n_sinks": 1}, grad=True),
        Case("another base (100) and no sinks: start = 12, window 3, P = 2, T = 1",
             rotary_inputs(g, 2, 3, P=2, T=1), {"start": 12, "window": 3, "base": 100.0}),
        Case("more than W - 1 tokens but no more than n_sinks + W - 1 (nothing to evict yet): "
             "start = P = 2, window 3, 2 sinks, T = 1", rotary_inputs(g, 2, 3, P=2, T=1),
             {"start": 2, "window": 3, "n_sinks": 2}),
    ]
    run_check(ROLLING_ROTARY_ATTENTION, fn, cases)


# ---------------------------------------------------------------- positions within the cache

def streaming_llm_variant(query, key, value, past_key=None, past_value=None, *, window,
                          n_sinks=0, base=10000.0, stored="raw", query_at="end",
                          rotate_values="none", angle_dtype="wide", honour_base=True,
                          evict_first=False, **rolling_knobs):
    """StreamingLLM's positions with one of the known slips: the keys cached rotated (so they
    are rotated again at the next step), or rotated once as they arrive (the previous
    exercise with start = P), the queries rotated at 0 .. T-1, the values rotated (every value
    at its place, or the new ones cached rotated), float32 angles for float64 inputs, the base
    ignored, evicted before attending; and the rolling cache's own slips."""
    base = base if honour_base else 10000.0
    if stored == "rotated_once":
        P = 0 if past_key is None else past_key.shape[-2]
        return rolling_rotary_variant(query, key, value, past_key, past_value, start=P,
                                      window=window, n_sinks=n_sinks, base=base,
                                      angle_dtype=angle_dtype, **rolling_knobs)
    raw_key = key if past_key is None else torch.cat([past_key, key], dim=-2)
    raw_value = value if past_value is None else torch.cat([past_value, value], dim=-2)
    T, S, D = query.shape[-2], raw_key.shape[-2], query.shape[-1]
    wide = compute_dtype(query.dtype) if angle_dtype == "wide" else torch.float32
    angles = rotary_angles(S, D, base=base, device=query.device, dtype=wide)
    if rotate_values == "new":  # the new values rotated at their places, and cached so
        raw_value = torch.cat([raw_value[..., :S - T, :], apply_rotary(value, angles[S - T:])],
                              dim=-2)
    knobs = {"evict": rolling_knobs.get("evict", "sinks_and_recent")}
    if evict_first:  # the places counted in the cache after eviction
        raw_key = keep_of(raw_key, window, n_sinks, **knobs)
        raw_value = keep_of(raw_value, window, n_sinks, **knobs)
        S = raw_key.shape[-2]
        angles = angles[:S]
    first = S - T if query_at == "end" else 0
    query = apply_rotary(query, angles[first:first + T])
    rotated = apply_rotary(raw_key, angles)  # every key at its place in the cache
    values = apply_rotary(raw_value, angles) if rotate_values == "all" else raw_value
    out, _, _ = rolling_variant(query, rotated, values, window=window, n_sinks=n_sinks,
                                **rolling_knobs)
    keys = keep_of(rotated if stored == "rotated" else raw_key, window, n_sinks, **knobs)
    return out, keys, keep_of(raw_value, window, n_sinks, **knobs)


STREAMING_LLM_MISTAKES = (
    Mistake("rotated keys cached (the next step rotates them again: double rotation)",
            "With positions within the cache, a key's place changes when older tokens are "
            "evicted, so the cache keeps the keys as they came, NOT rotated, and every step "
            "rotates them at their places of that step. Return the un-rotated keys.",
            {"stored": "rotated"}),
    Mistake("queries rotated at places 0 .. T-1 (the start of the cache)",
            "The new tokens are the last T places of the cache after appending: rotate the "
            "queries at S - T .. S - 1, the same places as their own keys.",
            {"query_at": "start"}),
    Mistake("values rotated too",
            "Rotary positions turn the queries and keys only; the values are never rotated.",
            {"rotate_values": "all"}),
    Mistake("values rotated too",
            "Rotary positions turn the queries and keys only; the values are never rotated.",
            {"rotate_values": "new"}),
    Mistake("new keys rotated once as they arrive, at the cache's length, and cached rotated "
            "(the previous exercise with start = P)",
            "Here a key's place is its index in the cache of this step, and it moves when older "
            "tokens are evicted. So the cache keeps the keys NOT rotated, and every step "
            "rotates all of them, cached and new, at their places of that step.",
            {"stored": "rotated_once"}),
    ROLLING_MISTAKES[5], ROTARY_MISTAKES[5], BASE_IGNORED,
    ROLLING_MISTAKES[0], ROLLING_MISTAKES[2], EVICTION_TEST_WITHOUT_SINKS,
    EVICTION_TEST_OFF_BY_ONE, WINDOW_TOP_LEFT, WINDOW_SELF_OUT, WINDOW_SHORT, SINKS_IGNORED,
    WINDOW_IGNORED,
)

STREAMING_LLM_ATTENTION = Exercise(
    name="streaming_llm_attention",
    reference=streaming.streaming_llm_attention,
    inputs=("query", "key", "value", "past_key", "past_value"),
    outputs=(("out", "(B, H, T, Dv)"),
             ("keys", "(B, H, P', D): the cache after appending and evicting, NOT rotated"),
             ("values", "(B, H, P', Dv): the cache after appending and evicting")),
    variant=streaming_llm_variant,
    mistakes=STREAMING_LLM_MISTAKES,
    forbidden=forbid((streaming.streaming_llm_attention,) + NO_BUILT_IN_ATTENTION,
                     ATTENTION_BUILTINS),
)


def check_streaming_llm_attention(fn, seed: int = 0) -> None:
    """Check streaming_llm_attention(query, key, value, past_key=None, past_value=None, *,
    window, n_sinks=0, base=10000.0) -> (out, keys, values). Lesson: 09_sliding_windows"""
    g = seeded(seed)
    cases = [
        Case("one decoding step after a full cache: window 4, 2 sinks, P = 5 (B, H, D = 2, 3, "
             "4)", rotary_inputs(g, 2, 3, P=5, T=1), {"window": 4, "n_sinks": 2}),
        Case("a chunk of T = 3 new tokens after a full cache: window 4, 1 sink, P = 4",
             rotary_inputs(g, 2, 3, P=4, T=3), {"window": 4, "n_sinks": 1}),
        Case("the prompt: an empty cache (None), T = 6 tokens, window 3, 1 sink",
             rotary_inputs(g, 2, 3, P=0, T=6), {"window": 3, "n_sinks": 1}),
        Case("float64, with gradients: window 3, 1 sink, P = 3, T = 2",
             rotary_inputs(g, 2, 3, P=3, T=2, dtype=torch.float64),
             {"window": 3, "n_sinks": 1}, grad=True),
        Case("another base (100) and no sinks: window 3, P = 2, T = 1",
             rotary_inputs(g, 2, 3, P=2, T=1), {"window": 3, "base": 100.0}),
        Case("more than W - 1 tokens but no more than n_sinks + W - 1 (nothing to evict yet): "
             "window 3, 2 sinks, P = 2, T = 1", rotary_inputs(g, 2, 3, P=2, T=1),
             {"window": 3, "n_sinks": 2}),
    ]
    run_check(STREAMING_LLM_ATTENTION, fn, cases)


# ---------------------------------------------------------------- a learned sink logit

def sink_variant(query, key, value, sink, attn_mask=None, scale=None, *, where="denominator",
                 shift="with_sink", per="head", returned="keys", inverted=False,
                 scale_rule="sqrt", honour_scale=True):
    """Attention with a sink logit and one of the known slips: the sink added to the scores,
    the maximum taken without the sink, no maximum at all, the sink indexed by query, its column
    returned with the weights, the mask inverted, the scale's slips."""
    factor = scale_factor(scale, query.shape[-1], scale_rule, honour_scale)
    scores = query @ key.transpose(-2, -1) * factor
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask if inverted else ~attn_mask, NEG_INF)
    logit = sink.to(scores.dtype)
    logit = logit[:, None, None] if per == "head" else logit[:, None]
    logit = logit.expand(*scores.shape[:-1], 1)
    if where == "scores":  # added to every score: a constant shift the softmax ignores
        weights = torch.softmax(scores + logit, dim=-1)
        return weights @ value, weights
    top = {"with_sink": torch.maximum(scores.amax(-1, keepdim=True), logit),
           "without_sink": scores.amax(-1, keepdim=True), "sink_unshifted":
           scores.amax(-1, keepdim=True), "none": torch.zeros_like(logit)}[shift]
    numerators = torch.exp(scores - top)
    sink_term = torch.exp(logit) if shift == "sink_unshifted" else torch.exp(logit - top)
    weights = numerators / (numerators.sum(-1, keepdim=True) + sink_term)
    out = weights @ value
    if returned == "with_column":
        weights = torch.cat([weights, 1 - weights.sum(-1, keepdim=True)], dim=-1)
    return out, weights


SINK_MISTAKES = (
    Mistake("sink logit added to the scores instead of the denominator",
            "Adding the same number to every score of a row changes nothing after the softmax: "
            "the weights still sum to 1. The sink is one more term of the denominator, "
            "exp(sink - m), that belongs to no key.", {"where": "scores"}),
    Mistake("maximum taken without the sink: a row whose keys are all masked gives NaN",
            "m must be the largest of the row's scores AND the sink. Without it, a row whose "
            "every key is masked has m = -inf, and exp(-inf - (-inf)) is NaN; with it, m is "
            "the sink's logit and the row's weights are 0.", {"shift": "without_sink"}),
    Mistake("exponentials taken without subtracting a maximum: they overflow",
            "exp() of a logit above about 88 is inf in float32, and inf / inf is NaN. Subtract "
            "m, the largest of the row's scores and the sink, from all of them first.",
            {"shift": "none"}),
    Mistake("sink indexed by query instead of by head",
            "sink holds one logit per head, (H,): it must line up with the head axis of the "
            "(..., H, T, S) scores, one number per (head, query) row, i.e. shaped (H, 1, 1).",
            {"per": "query"}),
    Mistake("sink's column returned with the weights (S + 1 columns)",
            "The sink belongs to no key and has no value: return the weights of the S keys "
            "only, which sum to less than 1.", {"returned": "with_column"}),
    Mistake("exp(sink) not shifted by the maximum m (the keys' terms are exp(score - m))",
            "Subtracting m from every logit of a row, the sink's included, leaves the weights "
            "as they are: every term of the numerators and the denominator is shifted by the "
            "same m. Shifting the keys' terms and not the sink's changes the sink's share.",
            {"shift": "sink_unshifted"}),
    INVERTED,
) + SCALE_MISTAKES + (IGNORES_SCALE,)

SINK_ATTENTION = Exercise(
    name="sink_attention",
    reference=streaming.sink_attention,
    inputs=("query", "key", "value", "sink"),
    outputs=(("out", "(B, H, T, Dv)"), ("weights", "(B, H, T, S)")),
    variant=sink_variant,
    mistakes=SINK_MISTAKES,
    forbidden=forbid((streaming.sink_attention,) + NO_BUILT_IN_ATTENTION, ATTENTION_BUILTINS),
)


def sink_inputs(g, *batch, H, T, S, D=4, Dv=5, spread=1.0, sink_spread=1.0,
                dtype=torch.float32):
    return (spread * randn(*batch, H, T, D, generator=g, dtype=dtype),
            spread * randn(*batch, H, S, D, generator=g, dtype=dtype),
            randn(*batch, H, S, Dv, generator=g, dtype=dtype),
            sink_spread * randn(H, generator=g, dtype=dtype))


def check_sink_attention(fn, seed: int = 0) -> None:
    """Check sink_attention(query, key, value, sink, attn_mask=None, scale=None)
    -> (out, weights). Lesson: 09_sliding_windows"""
    g = seeded(seed)
    empty_row = streaming.sliding_window_mask(4, 7, 3)
    empty_row[2] = False  # query 2 may attend to no key at all
    cases = [
        Case("B, H, T, S = 2, 3, 3, 6: one sink logit per head (as many heads as queries)",
             sink_inputs(g, 2, H=3, T=3, S=6)),
        Case("B, H, T, S = 2, 2, 5, 7, a sliding-window mask (window 3)",
             sink_inputs(g, 2, H=2, T=5, S=7),
             {"attn_mask": streaming.sliding_window_mask(5, 7, 3)}),
        Case("a row whose every key is masked (query 2): the sink takes all its weight",
             sink_inputs(g, 2, H=3, T=4, S=7), {"attn_mask": empty_row}),
        Case("large scores and sinks (about 100)",
             sink_inputs(g, 2, H=2, T=4, S=5, spread=6.0, sink_spread=100.0)),
        Case("float64, with gradients (for the sink too)",
             sink_inputs(g, 2, H=2, T=4, S=5, dtype=torch.float64), grad=True),
        Case("an explicit scale=0.3", sink_inputs(g, 2, H=2, T=4, S=6), {"scale": 0.3}),
        Case("one sequence without a batch axis: (H, T, D) queries, H = 2",
             sink_inputs(g, H=2, T=3, S=5)),
    ]
    run_check(SINK_ATTENTION, fn, cases)
