"""Checks for lesson 06_rotary_positions: rotating the pairs of queries and keys by the angles
of their positions, rotary multi-head attention."""

import copy
import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from .. import masks, multihead, rope
from .framework import Case, Exercise, Harnessed, Mistake, randn, run_check, seeded
from .lesson04 import DROPOUT_IN_EVAL_MODE
from .student import harness
from .student.shortcuts import forbid

# PyTorch's own rotary embedding: the ONNX RotaryEmbedding operator, a Python function (refused
# by its qualified name, so the checks never import torch.onnx, which takes seconds) whose name
# the grader's reading of the source also flags.
ONNX_ROTARY = "torch.onnx.ops.rotary_embedding"


def _forbid(functions, builtins=()):
    """``forbid`` plus PyTorch's rotary embedding."""
    forbidden = forbid(functions, [*builtins, "rotary_embedding"])
    return dataclasses.replace(forbidden, function_names=frozenset({ONNX_ROTARY}))


# ---------------------------------------------------------------- rotate_pairs: the angles

def angles_variant(positions, d_head, *, base=10000.0, device=None, dtype=torch.float32,
                   exponent="2i", first_position=0, inverted=False, ignore_base=False,
                   given="used"):
    base = 10000.0 if ignore_base else base
    if isinstance(positions, int) or given == "counted":  # the given ones ignored: 0 .. T-1
        positions = torch.arange(positions if isinstance(positions, int) else len(positions))
    position = positions.to(torch.float64)[:, None] + first_position  # (T, 1)
    i = torch.arange(d_head // 2, dtype=torch.float64)  # (D/2,)
    power = {"2i": 2 * i, "i": i, "4i": 4 * i}[exponent] / d_head
    frequency = base ** power if inverted else base ** -power
    return (position * frequency).to(device=device, dtype=dtype)  # (T, D/2)


ANGLES_FROM_ONE = Mistake(
    "positions counted from 1",
    "The first position is t = 0, whose angles are all 0: the first token is not rotated.",
    {"first_position": 1})
GIVEN_POSITIONS_IGNORED = Mistake(
    "a tensor of positions ignored: the angles of 0 .. T-1 instead",
    "When `positions` is given, token t sits at position positions[t] (after a cache of P "
    "tokens, P + t), not at t: its pairs turn by the angles of that position, made from its "
    "value in the float dtype of the angles.", {"given": "counted"})

ANGLE_MISTAKES = (
    Mistake("exponent uses i instead of 2i (base^(i/D))",
            "Pair i turns with frequency base^(-2i/D): the exponent runs over the even "
            "numbers 0, 2, 4, ... up to D - 2, divided by D.", {"exponent": "i"}),
    Mistake("the 2 of 2i counted twice (exponent 4i / D)",
            "If you already step through 0, 2, 4, ..., do not multiply by 2 again.",
            {"exponent": "4i"}),
    Mistake("frequency inverted (t * base^(2i/D))",
            "Angles are t divided by base^(2i/D): the later pairs turn slower, not faster.",
            {"inverted": True}),
    ANGLES_FROM_ONE,
    GIVEN_POSITIONS_IGNORED,
    Mistake("ignores the base argument",
            "Use the `base` you are given; 10000 is only its default.",
            {"ignore_base": True}),
)


# ---------------------------------------------------------------- rotate_pairs: the rotation

def rotary_variant(x, angles, *, pairs="half", layout="half", swap=False, direction=1):
    """``pairs``: which dimensions turn together ("half": i and i + D/2, "interleaved": 2i and
    2i + 1); ``layout``: how the (T, D/2) angles are widened to (T, D) for the formula
    x * cos + turned(x) * sin ("half": repeated as two blocks, "interleaved": each twice)."""
    D = x.shape[-1]
    cos, sin = angles.cos(), angles.sin()  # (T, D/2)
    if swap:
        cos, sin = sin, cos
    if layout == "half":
        cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)  # (T, D)
    else:
        cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    if pairs == "half":
        turned = torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)  # (-x2, x1)
    else:
        turned = torch.stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2)  # (-x_odd, x_even)
    return x * cos + direction * turned * sin


INTERLEAVED = Mistake(
    "interleaved pairs (2i, 2i+1) instead of half-split pairs (i, i + D/2)",
    "This course, like GPT-NeoX and Hugging Face's LLaMA, pairs dimension i with i + D/2: "
    "the first half of x with the second half. Pairing neighbours (2i, 2i+1) is the other "
    "convention, and weights trained with one do not work with the other.",
    {"pairs": "interleaved", "layout": "interleaved"})

ROTATION_MISTAKES = (
    INTERLEAVED,
    Mistake("angles laid out for interleaved pairs while the pairs are half-split",
            "With half-split pairs, dimension i and dimension i + D/2 share angle i: "
            "widen the (T, D/2) table by putting it twice side by side, not by repeating "
            "each angle twice in a row.", {"layout": "interleaved"}),
    Mistake("angles laid out half-split while the pairs are interleaved",
            "The pairs and the angle table must follow the same convention: pair i is "
            "(x_i, x_{i+D/2}) and turns by angle i.", {"pairs": "interleaved"}),
    Mistake("sin and cos swapped",
            "A rotation by a keeps x_i cos a and adds -x_{i+D/2} sin a; at angle 0 the "
            "vector must come back unchanged.", {"swap": True}),
    Mistake("rotation in the wrong direction (the sign of sin flipped)",
            "Rotate by +a: the first half becomes x1 cos a - x2 sin a, the second half "
            "x1 sin a + x2 cos a.", {"direction": -1}),
)
_ANGLE_KNOBS = ("exponent", "first_position", "inverted", "ignore_base", "given")


def rotate_pairs_variant(x, positions=None, *, base=10000.0, angle_dtype=None, **knobs):
    """The reference's rotation with the knobs of ``angles_variant`` (how the angles are made)
    and of ``rotary_variant`` (how they turn the pairs); ``angle_dtype`` the angles' dtype."""
    angle_knobs = {k: knobs.pop(k) for k in _ANGLE_KNOBS if k in knobs}
    T, D = x.shape[-2:]
    dtype = angle_dtype or torch.promote_types(x.dtype, torch.float32)
    angles = angles_variant(T if positions is None else positions, D, base=base,
                            device=x.device, dtype=dtype, **angle_knobs)
    return rotary_variant(x, angles, **knobs).to(x.dtype)


ROTATE_PAIRS = Exercise(
    name="rotate_pairs",
    reference=rope.rotate_pairs,
    inputs=("x",),
    outputs=(("rotated", "(..., T, D), the shape of x"),),
    variant=rotate_pairs_variant,
    mistakes=(*ANGLE_MISTAKES, *ROTATION_MISTAKES),
    forbidden=_forbid([rope.rotate_pairs, rope.rotary_angles, rope.apply_rotary]),
)


def check_rotate_pairs(fn, seed: int = 0) -> None:
    """Check rotate_pairs(x, positions=None, base=...): every half-split pair of x turned by
    the angle of its position, the positions 0 .. T-1 or the given ones.

    Lesson: 06_rotary_positions
    """
    g = seeded(seed)
    T = 5 + int(torch.randint(3, (), generator=g))  # 5, 6 or 7 positions
    cases = [
        Case(f"B, H, T, D = 2, 3, {T}, 8, positions 0 .. T-1", (randn(2, 3, T, 8, generator=g),)),
        Case(f"no batch dims: T, D = {T + 2}, 12, base = 100",
             (randn(T + 2, 12, generator=g),), {"base": 100.0}),
        Case("T, D = 4, 2 (a single pair), base = 10", (randn(4, 2, generator=g),),
             {"base": 10.0}),
        Case(f"extra batch dims (2, 2, 3, T, D), T, D = {T}, 6",
             (randn(2, 2, 3, T, 6, generator=g),)),
        Case(f"positions a tensor: {T} tokens after a cache of 9, torch.arange(9, {9 + T}), "
             f"(B, H, T, D) = (2, 2, {T}, 8)", (randn(2, 2, T, 8, generator=g),),
             {"positions": torch.arange(9, 9 + T)}),
        Case("positions in no order, with repeats: [7, 0, 3, 3, 12], D = 8, base = 100, "
             "float64 with gradients", (randn(2, 5, 8, generator=g, dtype=torch.float64),),
             {"positions": torch.tensor([7, 0, 3, 3, 12]), "base": 100.0}, grad=True),
        Case("float64, positions 0 .. T-1 as far as 300, D = 16, with gradients",
             (randn(1, 300, 16, generator=g, dtype=torch.float64),), grad=True),
    ]
    run_check(ROTATE_PAIRS, fn, cases)


# ---------------------------------------------------------------- RotaryMultiHeadAttention

def _attend(scores, v, attn_mask, is_causal, rotate_weights=None):
    """Masked softmax of ``scores`` and the weighted values, as the course's attention does;
    ``rotate_weights`` (a function) acts on the weights before they weight the values."""
    T, S = scores.shape[-2:]
    if is_causal:
        attn_mask = masks.combine_masks(masks.causal_mask(T, S), attn_mask)
    scores = masks.apply_mask(scores, attn_mask)
    empty = scores.isneginf().all(-1, keepdim=True)  # (B, H, T, 1)
    weights = torch.softmax(scores.masked_fill(empty, 0.0), -1).masked_fill(empty, 0.0)
    if rotate_weights is not None:
        weights = rotate_weights(weights)
    return weights @ v, weights


def rotary_mha_variant(module, query, key, value, attn_mask=None, is_causal=False,
                       query_positions=None, key_positions=None, *,
                       rotate="qk", width="head", angle_dtype=None, ignore_base=False,
                       project_output=True, causal=True, use_mask=True, positions="given"):
    """The reference module's computation with one knob turned: ``rotate`` says what is
    rotated ("qk", "qkv", "q", "scores", "weights", "output"); ``width`` where the angles
    come from ("head"; "model": the (B, T, C) projections rotated before the split with
    angles of width C; "model_frequencies": head-width angles with C in the exponent);
    ``positions`` which positions turn them ("given"; "ignored": 0 .. T-1 and 0 .. S-1)."""
    H, C, D = module.n_heads, module.d_model, module.d_head
    base = 10000.0 if ignore_base else module.base
    dtype = angle_dtype or query.dtype

    def angles(n, width_):
        return rope.rotary_angles(n, width_, base=base, dtype=dtype)

    def head_angles(n):
        if width == "model_frequencies":
            return angles(n, C)[:, :D // 2]
        return angles(n, D)

    q, k, v = module.q_proj(query), module.k_proj(key), module.v_proj(value)  # (B, T|S, C)
    T, S = q.shape[-2], k.shape[-2]
    q_at = T if query_positions is None or positions == "ignored" else query_positions
    k_at = S if key_positions is None or positions == "ignored" else key_positions
    if width == "model":
        q = rope.apply_rotary(q, angles(q_at, C))
        k = rope.apply_rotary(k, angles(k_at, C))
    q, k, v = (multihead.split_heads(x, H) for x in (q, k, v))  # (B, H, T|S, D)
    if width != "model" and rotate in ("qk", "qkv", "q"):
        q = rope.apply_rotary(q, head_angles(q_at))
        if rotate != "q":
            k = rope.apply_rotary(k, head_angles(k_at))
        if rotate == "qkv":
            v = rope.apply_rotary(v, head_angles(k_at))
    scores = q @ k.transpose(-2, -1) * D ** -0.5  # (B, H, T, S)
    if rotate == "scores":
        scores = rope.apply_rotary(scores, angles(T, S))
    rotate_weights = (lambda w: rope.apply_rotary(w, angles(T, S))) if rotate == "weights" \
        else None
    out, weights = _attend(scores, v, attn_mask if use_mask else None, is_causal and causal,
                           rotate_weights)
    if rotate == "output":
        out = rope.apply_rotary(out, head_angles(q_at))
    out = multihead.merge_heads(out)  # (B, H, T, D) -> (B, T, C)
    return (module.out_proj(out) if project_output else out), weights


ROTARY_MHA_MISTAKES = (
    Mistake("rotation applied to the values too",
            "Only queries and keys carry positions: the scores are what should depend on the "
            "offset t - s. Rotated values would give the output a rotation of each key's "
            "position. Leave v as it comes out of split_heads.", {"rotate": "qkv"}),
    Mistake("keys not rotated",
            "Rotate both the queries and the keys, each by its own positions: a score sees "
            "the offset t - s only when both sides turn.", {"rotate": "q"}),
    Mistake("rotation applied to the scores instead of the queries and keys",
            "Rotate q and k, after split_heads and before their dot products; the (T, S) "
            "scores are not vectors of pairs.", {"rotate": "scores"}),
    Mistake("rotation applied to the weights after the softmax",
            "Positions enter before the scores are computed: rotate q and k, then attend.",
            {"rotate": "weights"}),
    Mistake("rotation applied to the attention output instead of the queries and keys",
            "Rotating after attention does not change which keys a query looks at. Rotate q "
            "and k before the scores.", {"rotate": "output"}),
    Mistake("rotation over the model width before the heads are split",
            "Scores are dot products within a head: split the heads first, then rotate each "
            "head's D dimensions with angles for width D.", {"width": "model"}),
    Mistake("angles from the model width instead of the head width",
            "The exponent of the frequencies is 2i / D with D = self.d_head, the width of a "
            "head, not self.d_model.", {"width": "model_frequencies"}),
    Mistake("angles computed in float32 for float64 inputs",
            "Make the angles in the dtype (and on the device) of the queries.",
            {"angle_dtype": torch.float32}),
    Mistake("ignores self.base",
            "Pass the layer's base on to the angles; 10000 is only its default.",
            {"ignore_base": True}),
    Mistake("missing output projection",
            "After merging the heads, apply self.out_proj: it mixes what the heads found.",
            {"project_output": False}),
    Mistake("is_causal not passed on",
            "Pass is_causal on to the attention function: with is_causal=True query t must not "
            "see the keys after t.", {"causal": False}),
    Mistake("attn_mask not passed on", "Pass attn_mask on to the attention function.",
            {"use_mask": False}),
    DROPOUT_IN_EVAL_MODE,
    Mistake("query_positions and key_positions ignored (positions counted from 0)",
            "When the positions are given, query t sits at query_positions[t] and key s at "
            "key_positions[s]: after a cache of P tokens the new ones are at P .. P+T-1, not "
            "at 0 .. T-1. Make the angles of those positions; only a missing (None) one means "
            "0 .. T-1 or 0 .. S-1.", {"positions": "ignored"}),
)


def _forbidden_rotary_mha():
    return _forbid([rope.RotaryMultiHeadAttention.forward, nn.MultiheadAttention.forward,
                    F.multi_head_attention_forward], ["_native_multi_head_attention"])


def check_rotary_multi_head_attention(cls, seed: int = 0) -> None:
    """Check a RotaryMultiHeadAttention class (given constructor, student's forward).

    The student's module gets the reference's weights, then both run on the same inputs.
    Lesson: 06_rotary_positions
    """
    torch.manual_seed(seed)
    reference = rope.RotaryMultiHeadAttention(12, 3, base=100.0).eval()
    with torch.no_grad():  # biases away from 0: a bug in them must show
        for proj in reference.input_projections():
            proj.bias.normal_()
    references = {torch.float32: reference, torch.float64: copy.deepcopy(reference).double()}
    exercise = Exercise(
        name="RotaryMultiHeadAttention.forward",
        reference=lambda q, k, v, **kw: references[q.dtype](q, k, v, **kw),
        inputs=("query", "key", "value"),
        outputs=(("out", "(B, T, C)"), ("weights", "(B, H, T, S)")),
        variant=lambda q, k, v, **kw: rotary_mha_variant(references[q.dtype], q, k, v, **kw),
        mistakes=ROTARY_MHA_MISTAKES,
        forbidden=_forbidden_rotary_mha(),
    )
    # in eval mode with dropout 0.5: in eval mode dropout must do nothing
    init = {"d_model": reference.d_model, "n_heads": reference.n_heads, "dropout": 0.5,
            "base": reference.base}
    student = Harnessed(harness.ModuleUnderTest, (cls, init, dict(reference.state_dict())))
    run_check(exercise, student, _rotary_mha_cases(seed),
              reference_parameters=lambda: dict(references[torch.float64].named_parameters()))


def _rotary_mha_cases(seed: int) -> list[Case]:
    g = seeded(seed)
    x = randn(2, 6, 12, generator=g)
    memory = randn(2, 8, 12, generator=g)
    padding = masks.padding_mask(torch.tensor([6, 4]), 6)
    additive = randn(6, 8, generator=g).masked_fill(randn(6, 8, generator=g) > 1, float("-inf"))
    additive[:, 0] = 0.0  # every query keeps key 0
    with_empty_row = randn(6, 6, generator=g) < 1
    with_empty_row[:, 0] = True
    with_empty_row[2] = False
    return [
        Case("self-attention, B, T, C = 2, 6, 12 with H = 3 heads of D = 4, base = 100",
             (x, x, x)),
        Case("causal self-attention", (x, x, x), {"is_causal": True}),
        Case("T = 6 queries at positions 0..5, S = 8 keys and values at positions 0..7",
             (x, memory, memory)),
        Case("a (B, 1, 1, S) padding mask, lengths 6 and 4", (x, x, x), {"attn_mask": padding}),
        Case("a (T, S) float mask added to the scores, some entries -inf, S = 8",
             (x, memory, memory), {"attn_mask": additive}),
        Case("float64, causal, with gradients for the inputs and every parameter",
             (x.double(), x.double(), x.double()), {"is_causal": True}, grad=True),
        Case("a (T, T) bool mask whose query 2 may attend to nothing, float64, with gradients",
             (x.double(), x.double(), x.double()), {"attn_mask": with_empty_row}, grad=True),
        Case("self-attention with query_positions = 4..9 and key_positions = 0..5, causal",
             (x, x, x), {"query_positions": torch.arange(4, 10),
                         "key_positions": torch.arange(6), "is_causal": True}),
        Case("query_positions = 8..13 (T = 6 after 8 earlier tokens), key_positions None: the "
             "S = 8 keys at 0..7", (x, memory, memory), {"query_positions": torch.arange(8, 14)}),
    ]
