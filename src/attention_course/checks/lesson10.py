"""Checks for lesson 10_latent_attention: attention from a latent cache, naive and absorbed,
the latent attention layer with its decoupled rotary key decoding with its cache, and the cache
bytes per token of MHA, GQA, MQA and MLA."""

import copy

import torch

from .. import latent
from ..rope import rotate_pairs
from .framework import Case, Exercise, Harnessed, Mistake, matches, randn, run_check, seeded
from .lesson02 import ATTENTION_BUILTINS, IGNORES_SCALE, NO_BUILT_IN_ATTENTION
from .student import harness
from .student.shortcuts import forbid

NEG_INF = float("-inf")


# ---------------------------------------------------------------- naive and absorbed

def latent_variant(query, latent_cache, w_uk, w_uv, scale=None, *, scale_rule="head",
                   mask="bottom_right", swap=False, up_project_values=True, honour_scale=True):
    """Attention from a latent cache with one of the known slips: the scale from the latent's
    width or missing, the causal mask top-left, missing or hiding the diagonal, the
    up-projections swapped, the values left in the latent space, the scale argument ignored."""
    D, d_c = query.shape[-1], latent_cache.shape[-1]
    rules = {"head": D ** -0.5, "latent": d_c ** -0.5, "none": 1.0}
    factor = scale if scale is not None and honour_scale else rules[scale_rule]
    w_keys, w_values = (w_uv, w_uk) if swap else (w_uk, w_uv)
    shared = latent_cache.unsqueeze(-3)  # (B, 1, S, d_c)
    scores = query @ w_keys.transpose(-2, -1) @ shared.transpose(-2, -1) * factor  # (B,H,T,S)
    T, S = scores.shape[-2:]
    diagonal = {"bottom_right": S - T, "top_left": 0, "none": S, "diagonal_hidden": S - T - 1}[mask]
    hidden = ~torch.ones(T, S, dtype=torch.bool, device=query.device).tril(diagonal=diagonal)
    weights = torch.softmax(scores.masked_fill(hidden, NEG_INF), dim=-1)
    out = weights @ shared  # (B, H, T, d_c)
    return out @ w_values if up_project_values else out


SCALE_FROM_LATENT = Mistake(
    "the scale taken from the latent width instead of the head width",
    "The scores are the dot products of each head's query and key, both of width D: scale by "
    "1/sqrt(D) (the query's last axis), not by 1/sqrt(d_c). In the absorbed form the query "
    "and the latent it meets are d_c wide, but the dot product is still the head's.",
    {"scale_rule": "latent"})
SCALE_MISSING = Mistake(
    "missing 1/sqrt(D)",
    "Scale the dot products by 1/sqrt(D), D the width of a head's query and key, so that their "
    "variance stays near 1 and the softmax does not saturate.", {"scale_rule": "none"})
UP_PROJECTIONS_SWAPPED = Mistake(
    "key and value up-projections swapped",
    "Keys come from the latent through w_uk, values through w_uv: the two are different "
    "matrices even when they have the same shape.", {"swap": True})
MASK_TOP_LEFT = Mistake(
    "causal mask aligned top-left (the new tokens placed at positions 0 .. T-1)",
    "The T queries are the last T of the S tokens in the latent: query t sits at position "
    "S - T + t and sees the latents 0 .. S - T + t (the mask aligned at the bottom-right, as "
    "with lesson 07's cache).", {"mask": "top_left"})
NO_MASK = Mistake(
    "no causal mask (a new token sees the ones after it)",
    "With one new token every latent is in its past, but a chunk of several (the prompt, for "
    "one) still needs the causal mask among them: query t sees positions up to S - T + t.",
    {"mask": "none"})
DIAGONAL_HIDDEN = Mistake(
    "causal mask hides the diagonal (a new token cannot see itself)",
    "Query t sits at position S - T + t and sees the latents 0 .. S - T + t, its own "
    "included: the hidden keys are the ones after it, strictly (triu's diagonal one more).",
    {"mask": "diagonal_hidden"})
VALUES_NOT_UP_PROJECTED = Mistake(
    "value up-projection left out (the output still in the latent space)",
    "The weighted sum of the latents is d_c wide: each head turns it into its values' width "
    "with its own w_uv, after the sum (softmax(...) c) W_UV = softmax(...) (c W_UV).",
    {"up_project_values": False})

LATENT_SHORTCUTS = (latent.naive_latent_attention, latent.absorbed_latent_attention,
                    latent.LatentAttention.forward) + NO_BUILT_IN_ATTENTION

NAIVE_LATENT_ATTENTION = Exercise(
    name="naive_latent_attention",
    reference=latent.naive_latent_attention,
    inputs=("query", "latent", "w_uk", "w_uv"),
    outputs=(("out", "(B, H, T, Dv)"),),
    variant=latent_variant,
    mistakes=(SCALE_FROM_LATENT, SCALE_MISSING, UP_PROJECTIONS_SWAPPED, MASK_TOP_LEFT, NO_MASK,
              DIAGONAL_HIDDEN, IGNORES_SCALE),
    forbidden=forbid(LATENT_SHORTCUTS, ATTENTION_BUILTINS),
)

ABSORBED_LATENT_ATTENTION = Exercise(
    name="absorbed_latent_attention",
    reference=latent.absorbed_latent_attention,
    inputs=("query", "latent", "w_uk", "w_uv"),
    outputs=(("out", "(B, H, T, Dv)"),),
    variant=latent_variant,
    mistakes=(SCALE_FROM_LATENT, SCALE_MISSING, UP_PROJECTIONS_SWAPPED, MASK_TOP_LEFT, NO_MASK,
              DIAGONAL_HIDDEN, VALUES_NOT_UP_PROJECTED, IGNORES_SCALE),
    forbidden=forbid(LATENT_SHORTCUTS, ATTENTION_BUILTINS),
)


def latent_inputs(g, *batch, T, S, H=3, D=4, Dv=None, d_c=6, dtype=torch.float32):
    """Queries of the T newest tokens, a latent cache of S tokens, the up-projections."""
    Dv = D if Dv is None else Dv
    return (randn(*batch, H, T, D, generator=g, dtype=dtype),
            randn(*batch, S, d_c, generator=g, dtype=dtype),
            randn(H, d_c, D, generator=g, dtype=dtype) * d_c ** -0.5,
            randn(H, d_c, Dv, generator=g, dtype=dtype) * d_c ** -0.5)


def latent_cases(g) -> list[Case]:
    """The cases of both forms: B, H, D, d_c = 2, 3, 4, 6, and S never equal to another size
    (the absorbed check watches for tensors with an axis of S and one of D)."""
    return [
        Case("a chunk of T = 3 new tokens, S = 8 tokens in the latent (B, H, D, d_c = "
             "2, 3, 4, 6)", latent_inputs(g, 2, T=3, S=8)),
        Case("one decoding step: T = 1 new token, S = 9", latent_inputs(g, 2, T=1, S=9)),
        Case("the prompt: T = S = 5, causal among themselves", latent_inputs(g, 2, T=5, S=5)),
        Case("float64, with gradients: T = 2, S = 7",
             latent_inputs(g, 2, T=2, S=7, dtype=torch.float64), grad=True),
        Case("an explicit scale=0.3, T = 3, S = 8", latent_inputs(g, 2, T=3, S=8),
             {"scale": 0.3}),
        Case("values of another width, Dv = 5: T = 2, S = 9",
             latent_inputs(g, 2, T=2, S=9, Dv=5)),
        Case("one sequence without a batch axis: (H, T, D) queries, an (S, d_c) latent, T = 2, "
             "S = 7", latent_inputs(g, T=2, S=7)),
    ]


def check_naive_latent_attention(fn, seed: int = 0) -> None:
    """Check naive_latent_attention(query, latent, w_uk, w_uv, scale=None) -> out.
    Lesson: 10_latent_attention"""
    run_check(NAIVE_LATENT_ATTENTION, fn, latent_cases(seeded(seed)))


def check_absorbed_latent_attention(fn, seed: int = 0) -> None:
    """Check absorbed_latent_attention(query, latent, w_uk, w_uv, scale=None) -> out: the
    same outputs as the naive form, and no tensor holding a head's keys or values (an axis of
    the S tokens and one of a head's width) may be created along the way.
    Lesson: 10_latent_attention"""
    run_check(ABSORBED_LATENT_ATTENTION, Harnessed(harness.LatentOnly, (fn,)),
              latent_cases(seeded(seed)))


# ---------------------------------------------------------------- the layer, with its cache

CONFIG = {"d_model": 16, "n_heads": 2, "d_latent": 6, "d_rope": 4}  # D = 8
LAYER = {"H": 2, "D": 8, "d_c": 6, "R": 4}


def layer_variant(module, x, cache=None, *, scale="both", rotate_latent=False, rope="shared",
                  positions="cache", mask="bottom_right", swap=False, project_output=True,
                  cached="latent"):
    """A call of the latent attention layer with one of the known slips: the scale from the
    latent's width, or from the head's width without the rotary part; the latent rotated at
    its positions before it is cached; the rotary part left out; the new tokens rotated at
    0 .. T-1; the causal mask top-left; the up-projections swapped; no output projection; a
    cache of per-head rotary keys, or of the keys and values after up-projection (right
    outputs, larger cache); rotary positions counted from 1 or the rotary keys cached before
    their rotation (right outputs, a cache that breaks the contract)."""
    H, D, R, d_c = module.n_heads, module.d_head, module.d_rope, module.d_latent
    T = x.shape[-2]
    P = 0 if cache is None else cache[-1].shape[-2]
    first = {"cache": P, "from_zero": 0, "from_one": P + 1}[positions]
    at = torch.arange(first, first + T, device=x.device)
    w_keys, w_values = (module.w_uv, module.w_uk) if swap else (module.w_uk, module.w_uv)
    c = x @ module.w_dkv  # (B, T, d_c)
    if rotate_latent:
        c = rotate_pairs(c, at, base=module.base)
    k_rope = x @ module.w_kr if cached == "unrotated" else \
        rotate_pairs(x @ module.w_kr, at, base=module.base)  # (B, T, R)
    heads = x.unsqueeze(-3)
    q = heads @ module.w_q  # (B, H, T, D)
    q_rope = rotate_pairs(heads @ module.w_qr, at, base=module.base)  # (B, H, T, R)
    if cached == "up_projected":  # per-head keys (content and rotary parts) and values
        keys = torch.cat([c.unsqueeze(-3) @ w_keys, k_rope.unsqueeze(-3).expand(
            *k_rope.shape[:-2], H, T, R)], dim=-1)  # (B, H, T, D + R)
        values = c.unsqueeze(-3) @ w_values  # (B, H, T, D)
        if cache is not None:
            keys, values = (torch.cat([a, b], dim=-2) for a, b in zip(cache, (keys, values),
                                                                         strict=True))
        new_cache = (keys, values)
        content = q @ keys[..., :D].transpose(-2, -1)
        rotary = q_rope @ keys[..., D:].transpose(-2, -1)
        value_heads = values
    else:
        if cached == "rope_per_head":
            k_rope = k_rope.unsqueeze(-3).expand(*k_rope.shape[:-2], H, T, R)
        if cache is not None:
            c, k_rope = (torch.cat([a, b], dim=-2) for a, b in zip(cache, (c, k_rope),
                                                                    strict=True))
        new_cache = (c, k_rope)
        if cached == "unrotated":  # every cached key rotated at its position, at every call
            k_rope = rotate_pairs(k_rope, torch.arange(k_rope.shape[-2], device=x.device),
                                  base=module.base)
        shared = c.unsqueeze(-3)  # (B, 1, S, d_c)
        content = q @ w_keys.transpose(-2, -1) @ shared.transpose(-2, -1)  # (B, H, T, S)
        rope_keys = k_rope if cached == "rope_per_head" else k_rope.unsqueeze(-3)
        rotary = q_rope @ rope_keys.transpose(-2, -1)
        value_heads = shared @ w_values  # (B, H, S, D)
    scores = (content + (rotary if rope == "shared" else 0.0)) * {
        "both": (D + R) ** -0.5, "head": D ** -0.5, "latent": d_c ** -0.5}[scale]
    S = scores.shape[-1]
    hidden = ~torch.ones(T, S, dtype=torch.bool, device=x.device).tril(
        diagonal=S - T if mask == "bottom_right" else 0)
    out = torch.softmax(scores.masked_fill(hidden, NEG_INF), dim=-1) @ value_heads
    out = (out @ module.w_o).sum(dim=-3) if project_output else \
        out.transpose(-3, -2).flatten(-2)  # (B, T, C) either way: C = H * D
    return out, new_cache


def _bytes_ratio(got, expected) -> torch.Tensor | None:
    """The student's cache bytes over the expected ones, after each call, when every output
    is right."""
    if not matches(got[0], expected[0]) or got[1].shape != expected[1].shape:
        return None
    return got[1] / expected[1]


def rope_per_head(got, expected) -> bool:
    """Right outputs, and a cache of d_c + H * R numbers per token instead of d_c + R."""
    ratio = _bytes_ratio(got, expected)
    L = LAYER
    return ratio is not None and torch.allclose(
        ratio, torch.full_like(ratio, (L["d_c"] + L["H"] * L["R"]) / (L["d_c"] + L["R"])))


def cached_up_projected(got, expected) -> bool:
    """Right outputs, and a cache at least as large as every head's key and value."""
    ratio = _bytes_ratio(got, expected)
    L = LAYER
    return ratio is not None and bool(
        (ratio >= 2 * L["H"] * L["D"] / (L["d_c"] + L["R"]) - 1e-9).all())


def rope_shifted(got, expected) -> bool:
    """Right outputs and latents, and rotary keys that are the expected ones each turned by
    the same angle per pair, whatever the token: rotated at positions shifted by a constant
    (a shift of the queries' positions too cancels in the scores)."""
    if not (matches(got[0], expected[0]) and matches(got[2], expected[2])):
        return False
    g, e = got[3].double(), expected[3].double()
    if g.shape != e.shape or matches(got[3], expected[3]):
        return False
    half = e.shape[-1] // 2  # rotate_pairs pairs entry i with entry i + d_R / 2
    zg = torch.complex(g[..., :half], g[..., half:]).reshape(-1, half)
    ze = torch.complex(e[..., :half], e[..., half:]).reshape(-1, half)
    turn = (zg * ze.conj()).sum(0) / (ze.abs() ** 2).sum(0)  # one turn per pair, fitted
    turned = ze * turn
    return bool(((turn.abs() - 1).abs() < 1e-3).all()) and matches(
        torch.cat([turned.real, turned.imag], dim=-1).reshape(g.shape).to(got[3].dtype),
        got[3])


LAYER_MISTAKES = (
    Mistake("the latent cached after up-projection (right, but the cache is not small)",
            "Your outputs are right, but your cache holds every head's keys and values (or "
            "more): as many numbers per token as multi-head attention's. Cache the latent "
            "x @ w_dkv (d_c numbers) and the shared rotary key (d_R numbers) only, and "
            "recover the rest from them at every call.",
            {"cached": "up_projected"}, sign=cached_up_projected),
    Mistake("the rotary key not shared across heads (cached once per head)",
            "Your outputs are right, but your cache holds the rotary key once per head: "
            "x @ w_kr is one key of width d_R for every head. Cache it once, (B, S, d_R), and "
            "let every head's rotary query meet the same key.",
            {"cached": "rope_per_head"}, sign=rope_per_head),
    Mistake("the softmax scale missing the rotary part of the width",
            "Each head's score is the dot product of two vectors of width D + d_R, the content "
            "part and the rotary part side by side: scale by 1/sqrt(D + d_R), not 1/sqrt(D).",
            {"scale": "head"}),
    Mistake("the scale taken from the latent width instead of the head width",
            "The absorbed query meets the latent, but the score is still the dot product of a "
            "head's key and query: scale by 1/sqrt(D + d_R), D the head width, not by the "
            "latent's width d_c.", {"scale": "latent"}),
    Mistake("rotation applied to the compressed keys (the latent rotated at its position)",
            "Rotary positions go into the small decoupled part only: the latent stays free of "
            "positions (the values are recovered from it too, and w_uk is folded into the "
            "query). Rotate the rotary query and the shared rotary key, never the latent.",
            {"rotate_latent": True}),
    Mistake("the decoupled rotary part left out of the scores",
            "Each head's score adds the rotary query's dot product with the shared rotary key "
            "to the content part: without it the scores know nothing of positions.",
            {"rope": "none"}),
    Mistake("new tokens rotated at positions 0 .. T-1 (positions counted from 0 at every call)",
            "After a cache of P tokens the new tokens sit at positions P .. P+T-1: rotate their "
            "rotary queries and keys by those positions (P is the length of the cache you are "
            "given).", {"positions": "from_zero"}),
    Mistake("causal mask aligned top-left (the new tokens placed at positions 0 .. T-1)",
            "The T new tokens are the last T of the S = P + T in the cache: new token t sees "
            "positions 0 .. P + t, the mask aligned at the bottom-right.",
            {"mask": "top_left"}),
    Mistake("key and value up-projections swapped",
            "Keys come from the latent through w_uk, values through w_uv.", {"swap": True}),
    Mistake("missing output projection",
            "Each head's output goes through its own slice of the output projection, w_o[h] "
            "(D, C), and the heads' results are added up.", {"project_output": False}),
    Mistake("rotary positions shifted (the tokens rotated at P+1 .. P+T, or another constant "
            "away from their positions)",
            "Your outputs are right (a shift shared by the queries and the keys cancels in the "
            "scores), but the rotary keys in your cache are not rotated at their positions: "
            "token s's key must be rotated at s, counted from 0 (the new tokens sit at "
            "P .. P+T-1). A cache is read by whatever code comes next, and it expects that.",
            {"positions": "from_one"}, sign=rope_shifted),
    Mistake("rotary key cached before its rotation (rotated again at every call)",
            "Your outputs are right, but your cache holds the rotary keys as x @ w_kr, not "
            "rotated: the docstring's cache holds each rotary key rotated at its own position. "
            "Rotate the new tokens' keys once, at P .. P+T-1, and cache them rotated; the cached "
            "ones are then used as they are.", {"cached": "unrotated"}),
)


def _layer_exercise(state: dict) -> Exercise:
    reference = harness.DecodeUnderTest(latent.LatentAttention, CONFIG, state)
    variants = {}

    def variant(x, chunks, **knobs):
        key = tuple(sorted(knobs.items()))
        if key not in variants:
            class Variant(latent.LatentAttention):
                def forward(self, x, cache=None):
                    return layer_variant(self, x, cache, **knobs)
            variants[key] = harness.DecodeUnderTest(Variant, CONFIG, state)
        return variants[key](x, chunks)

    return Exercise(
        name="LatentAttention",
        reference=reference,
        inputs=("x", "chunks"),
        outputs=(("out", "(B, S, C): every token's output, decoded chunk by chunk"),
                 ("cache_bytes", "(calls,): the bytes of the returned cache per token and "
                                 "sequence, after each call"),
                 ("latent", "(B, S, d_c): the latents in the last cache returned"),
                 ("rope_key", "(B, S, d_R): the rotary keys in the last cache returned, each "
                              "rotated at its position")),
        variant=variant,
        mistakes=LAYER_MISTAKES,
        forbidden=forbid((latent.LatentAttention.forward, layer_variant)  # the variant's forward
                         + NO_BUILT_IN_ATTENTION,
                         ATTENTION_BUILTINS),
    )


def check_latent_attention(cls, seed: int = 0) -> None:
    """Check a LatentAttention class (its forward): built with the reference's weights, it
    decodes sequences chunk by chunk with the cache it returns, and its outputs must equal one
    uncached pass of the reference over the whole sequence, token for token; its cache must
    hold the latent and the shared rotary key only (d_c + d_R numbers per token), and after the
    last call they must equal the reference's (the rotary keys rotated at their positions).
    Lesson: 10_latent_attention"""
    torch.manual_seed(seed)
    reference = latent.LatentAttention(**CONFIG)
    state = dict(reference.state_dict())
    exercise = _layer_exercise(state)
    g = seeded(seed)

    def tokens(S, dtype=torch.float32):
        return randn(3, S, CONFIG["d_model"], generator=g, dtype=dtype)

    cases = [
        Case("the prompt in one call, no cache: T = 7 (B, C = 3, 16; H = 2, D = 8, d_c = 6, "
             "d_R = 4)", (tokens(7), (7,))),
        Case("a prompt of 3 tokens, then one token per call up to 9",
             (tokens(9), (3, 1, 1, 1, 1, 1, 1))),
        Case("a prompt of 2, then a chunk of 3 new tokens after the cache, then 2 tokens one "
             "at a time", (tokens(7), (2, 3, 1, 1))),
        Case("far along: a prompt of 40 tokens, then 2 tokens one at a time",
             (tokens(42), (40, 1, 1))),
        Case("float64, with gradients: a prompt of 3, then 2 tokens one at a time",
             (tokens(5, torch.float64), (3, 1, 1)), grad=True),
    ]
    student = Harnessed(harness.DecodeUnderTest, (cls, CONFIG, state))
    run_check(exercise, student, cases, reference_parameters=exercise.reference.probe_parameters)


# ---------------------------------------------------------------- cache bytes per token

def bytes_variant(kind, config, *, kv_factor=2, shared_heads="kv", mla="latent_and_rope",
                  count="bytes"):
    """Cache bytes per token with one of the known slips."""
    H, D = config["n_heads"], config["d_head"]
    heads = {"MHA": H, "GQA": config.get("n_kv_heads"), "MQA": 1}
    if shared_heads == "query":
        heads["GQA"] = heads["MQA"] = H
    d_c, R = config.get("d_latent"), config.get("d_rope")
    if kind == "MLA":
        numbers = {"latent_and_rope": d_c + R, "twice": 2 * d_c + R,
                   "rope_per_head": d_c + H * R, "no_rope": d_c,
                   "up_projected": H * (2 * D + R)}[mla]
    else:
        numbers = kv_factor * heads[kind] * D
    return torch.tensor(float(numbers * (config["bytes_per_number"] if count == "bytes"
                                         else 1)), dtype=torch.float64)


BYTES_MISTAKES = (
    Mistake("keys and values counted once (one of the two left out)",
            "Every key/value head caches a key AND a value of width d_head per token: "
            "2 * heads * d_head numbers.", {"kv_factor": 1}),
    Mistake("key/value heads counted as query heads (GQA and MQA share theirs)",
            "GQA caches n_kv_heads key/value heads, each shared by a group of query heads, and "
            "MQA one: the number of query heads does not enter their caches.",
            {"shared_heads": "query"}),
    Mistake("the latent counted twice (once for the keys, once for the values)",
            "MLA caches one latent per token, from which both the keys and the values are "
            "recovered: d_latent numbers, plus the rotary key.", {"mla": "twice"}),
    Mistake("the rotary key not shared across heads",
            "The decoupled rotary key is one key of width d_rope shared by every head: "
            "d_rope numbers per token, not n_heads * d_rope.", {"mla": "rope_per_head"}),
    Mistake("the rotary key left out of MLA's cache",
            "Besides the latent, MLA caches the rotary key of every token (rotated at its "
            "position): d_latent + d_rope numbers per token.", {"mla": "no_rope"}),
    Mistake("the latent cached after up-projection",
            "Up-projected, the cache holds every head's key (d_head + d_rope wide) and value "
            "(d_head), as many numbers as multi-head attention's and more: MLA caches the latent "
            "and the shared rotary key instead.", {"mla": "up_projected"}),
    Mistake("numbers counted, not bytes",
            "Multiply the numbers per token by bytes_per_number (2 for bfloat16, 4 for "
            "float32).", {"count": "numbers"}),
)

CACHE_BYTES = Exercise(
    name="cache_bytes_per_token",
    reference=lambda kind, config: torch.tensor(
        float(latent.cache_bytes_per_token(kind, config)), dtype=torch.float64),
    inputs=("kind", "config"),
    outputs=(("bytes", "a number"),),
    variant=bytes_variant,
    mistakes=BYTES_MISTAKES,
    forbidden=forbid((latent.cache_bytes_per_token, latent.cache_bytes)),
)

SMALL = {"n_heads": 6, "d_head": 8, "n_kv_heads": 2, "d_latent": 12, "d_rope": 4,
         "bytes_per_number": 4}
# DeepSeek-V2-Lite's attention (16 heads of 128, a latent of 512, a rotary key of 64), bfloat16;
# its GQA and MQA counterparts are hypothetical: 4 and 1 key/value heads
LITE = {"n_heads": 16, "d_head": 128, "n_kv_heads": 4, "d_latent": 512, "d_rope": 64,
        "bytes_per_number": 2}


def check_cache_bytes_per_token(fn, seed: int = 0) -> None:
    """Check cache_bytes_per_token(kind, config) -> bytes, for the four kinds in two
    configurations (the seed changes the small one's sizes). Lesson: 10_latent_attention"""
    g = seeded(seed)
    small = copy.deepcopy(SMALL)
    if seed:
        small["d_latent"] = int(torch.randint(5, 20, (1,), generator=g)) * 2
        small["n_kv_heads"] = int(torch.randint(2, 4, (1,), generator=g))
    cases = [Case(f"{kind}, {words}: {config}", (kind, config))
             for words, config in (("a small configuration in float32", small),
                                   ("DeepSeek-V2-Lite's sizes in bfloat16", LITE))
             for kind in latent.KINDS]
    run_check(CACHE_BYTES, Harnessed(harness.NumberUnderTest, (fn,)), cases)
