"""16-bit floats (float16, bfloat16): the reference is as accurate as PyTorch's own functions.

Each case runs a reference function and PyTorch's own (or, where PyTorch has none, the recipe
that Hugging Face's models and PyTorch's tutorial use) on the same 16-bit inputs, for several
seeds, and measures both against float64 computed from those same inputs. Our RMS error may be
at most BUDGET times PyTorch's, measured here side by side, never a number written down.
PyTorch computes 16-bit attention in float32 and rounds once at the end, and computes positions
and angles in float32; the reference does the same and returns the input's dtype.
`pytest -s` prints the ratios.
"""

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from attention_course import attention, embeddings, inference, multihead, rope, tiled
from helpers.inputs import bottom_right

BUDGET = 1.2  # our RMS error / PyTorch's, both against float64
HALF = (torch.bfloat16, torch.float16)
SEEDS = range(4)
B, H, G, T, S, D = 2, 4, 2, 48, 80, 48  # D = 48: a scale 1/sqrt(D) that is not a power of 2
C = 96  # model width of the multi-head cases: H = 4 heads of 24


def inputs(dtype, seed, *shapes):
    """Seeded N(0, 1) tensors rounded to ``dtype``, and the same values in float64."""
    g = torch.Generator().manual_seed(seed)
    low = [torch.randn(shape, generator=g, dtype=torch.float64).to(dtype) for shape in shapes]
    return low, [x.double() for x in low]


def seeded_run(seed, fn, *args, **kwargs):
    """``fn`` after torch.manual_seed(seed): dropout then draws the same mask every time."""
    torch.manual_seed(seed)
    return fn(*args, **kwargs)


# ---------------------------------------------------------------- attention

def our_attention(*args, **kwargs):
    return attention.scaled_dot_product_attention(*args, **kwargs)[0]


def attention_case(mask=None, **options):
    """Ours and F.scaled_dot_product_attention with ``options``; ``mask``: None, "bool" (one
    query of each sequence may attend to nothing) or "float"."""
    def case(dtype, seed):
        (q, k, v), exact_qkv = inputs(dtype, seed, (B, H, T, D), (B, H, S, D), (B, H, S, D))
        g = torch.Generator().manual_seed(seed)
        if mask == "bool":
            attn_mask = torch.rand(B, 1, T, S, generator=g) > 0.5
            attn_mask[..., 3, :] = False
            masks = attn_mask, attn_mask
        elif mask == "float":
            attn_mask = torch.randn(T, S, generator=g, dtype=torch.float64).to(dtype)
            masks = attn_mask, attn_mask.double()
        else:
            masks = None, None
        return (seeded_run(seed, our_attention, q, k, v, masks[0], **options),
                seeded_run(seed, F.scaled_dot_product_attention, q, k, v, masks[0], **options),
                seeded_run(seed, F.scaled_dot_product_attention, *exact_qkv, masks[1], **options))
    return case


def softmax_case(dtype, seed):
    (x,), _ = inputs(torch.float64, seed, (B, H, T, S))
    logits = (3 * x).to(dtype)  # spread out: some rows close to one-hot
    return attention.softmax(logits), torch.softmax(logits, -1), torch.softmax(logits.double(), -1)


def scores_case(dtype, seed):
    """PyTorch's scaled scores rounded once: baddbmm with alpha (nn.MultiheadAttention's)."""
    (q, k), (exact_q, exact_k) = inputs(dtype, seed, (B * H, T, D), (B * H, S, D))
    theirs = torch.baddbmm(q.new_zeros(B * H, T, S), q, k.mT, beta=0, alpha=D ** -0.5)
    return attention.attention_scores(q, k), theirs, exact_q @ exact_k.mT * D ** -0.5


def signed_permutations(module, seed):
    """Projections that round nothing in 16 bits: each output is one input, maybe negated.
    Then the error of the layer is its attention's, not that of the projections around it."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for proj in (*module.input_projections(), module.out_proj):
            signs = torch.randint(2, (C,), generator=g) * 2.0 - 1
            proj.weight.copy_(torch.eye(C)[torch.randperm(C, generator=g)] * signs[:, None])
            proj.bias.zero_()


def multi_head_case(exact_projections=False):
    """Ours and nn.MultiheadAttention with the same 16-bit weights."""
    def case(dtype, seed):
        torch.manual_seed(seed)
        ours = multihead.MultiHeadAttention(C, H).to(dtype).eval()
        if exact_projections:
            signed_permutations(ours, seed)
        return run_multi_head(ours, dtype, seed)
    return case


def run_multi_head(ours, dtype, seed):
    theirs = ours.to_torch().eval()
    exact = copy.deepcopy(theirs).double()
    (x, memory), (exact_x, exact_memory) = inputs(dtype, seed, (B, T, C), (B, S, C))
    with torch.no_grad():
        return (ours(x, memory, memory)[0],
                theirs(x, memory, memory, need_weights=False)[0],
                exact(exact_x, exact_memory, exact_memory, need_weights=False)[0])


def grouped_query_case(dtype, seed):
    (q, k, v), exact_qkv = inputs(dtype, seed, (B, H, T, D), (B, G, S, D), (B, G, S, D))
    return (inference.grouped_query_attention(q, k, v)[0],
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
            F.scaled_dot_product_attention(*exact_qkv, enable_gqa=True))


def cached_case(dtype, seed):
    """T new tokens after a cache of S - T: PyTorch attends with the bottom-right mask."""
    (q, k, v), exact_qkv = inputs(dtype, seed, (B, H, T, D), (B, H, S, D), (B, H, S, D))
    P, mask = S - T, bottom_right(T, S)
    ours, _, _ = inference.cached_attention(q, k[..., P:, :], v[..., P:, :], k[..., :P, :],
                                            v[..., :P, :])
    return (ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
            F.scaled_dot_product_attention(*exact_qkv, attn_mask=mask))


def tiled_case(tiling, is_causal=False):
    def case(dtype, seed):
        (q, k, v), exact_qkv = inputs(dtype, seed, (B, H, T, D), (B, H, S, D), (B, H, S, D))
        mask = bottom_right(T, S) if is_causal else None
        return (tiling(q, k, v, is_causal, block_size=16)[0],
                F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                F.scaled_dot_product_attention(*exact_qkv, attn_mask=mask))
    return case


# ---------------------------------------------------------------- positions

def rotate_half(x, cos, sin):
    """Hugging Face's apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, (T, D) tables."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


def hugging_face_tables(T, d_head, base, dtype):
    """Llama's rotary embedding in Hugging Face transformers: inverse frequencies and angles in
    float32, cos and sin of the (T, D) table cast to the dtype of x (float64 stays float64)."""
    work = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = 1.0 / base ** (torch.arange(0, d_head, 2, dtype=torch.int64).to(work) / d_head)
    angles = torch.arange(T).to(work)[:, None] * inv_freq[None, :]  # (T, D/2)
    table = torch.cat([angles, angles], dim=-1)  # (T, D)
    return table.cos().to(dtype), table.sin().to(dtype)


LONG, D_ROTARY = 4096, 64  # positions 0 .. 4095, a head width of Llama's


def rotary_case(base):
    def case(dtype, seed):
        (x,), (exact_x,) = inputs(dtype, seed, (1, 2, LONG, D_ROTARY))
        return (rope.apply_rotary(x, rope.rotary_angles(LONG, D_ROTARY, base=base)),
                rotate_half(x, *hugging_face_tables(LONG, D_ROTARY, base, dtype)),
                rotate_half(exact_x, *hugging_face_tables(LONG, D_ROTARY, base, torch.float64)))
    return case


def rotary_pipeline(layer, x, dtype):
    """The rotary layer's computation with Hugging Face's rotation and PyTorch's attention."""
    q, k, v = (multihead.split_heads(proj(x), layer.n_heads) for proj in layer.input_projections())
    tables = hugging_face_tables(x.shape[-2], layer.d_head, layer.base, dtype)
    q, k = rotate_half(q, *tables), rotate_half(k, *tables)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return layer.out_proj(multihead.merge_heads(out))


def rotary_layer_case(base):
    def case(dtype, seed):
        torch.manual_seed(seed)
        low = rope.RotaryMultiHeadAttention(128, 2, base=base).to(dtype).eval()
        exact = copy.deepcopy(low).double()  # the same 16-bit weights
        (x,), (exact_x,) = inputs(dtype, seed, (1, 1024, 128))
        with torch.no_grad():
            return (low(x, x, x, is_causal=True)[0], rotary_pipeline(low, x, dtype),
                    rotary_pipeline(exact, exact_x, torch.float64))
    return case


def pytorch_tutorial_encoding(T, d_model):
    """PositionalEncoding of PyTorch's transformer tutorial: built in float32."""
    position = torch.arange(T).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(T, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def exact_encoding(T, d_model):
    angles = torch.arange(T, dtype=torch.float64)[:, None] / 10000.0 ** (
        torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (T, C/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # sin, cos, sin, ...


def sinusoidal_case(dtype, seed):
    return (embeddings.sinusoidal_positional_encoding(LONG, 128, dtype=dtype),
            pytorch_tutorial_encoding(LONG, 128).to(dtype), exact_encoding(LONG, 128))


CASES = {
    "softmax": softmax_case,
    "attention scores": scores_case,
    "attention": attention_case(),
    "bool mask, a row with no key": attention_case("bool"),
    "float mask": attention_case("float"),
    "causal": attention_case(is_causal=True),
    "dropout": attention_case(dropout_p=0.3),
    "multi-head": multi_head_case(),
    "multi-head, exact projections": multi_head_case(exact_projections=True),
    "grouped queries": grouped_query_case,
    "cached attention": cached_case,
    "tiled attention": tiled_case(tiled.tiled_attention),
    "tiled attention, causal": tiled_case(tiled.tiled_attention, is_causal=True),
    "flash attention": tiled_case(tiled.flash_attention),
    "flash attention, causal": tiled_case(tiled.flash_attention, is_causal=True),
    "rotary, base 1e4": rotary_case(10000.0),
    "rotary, base 5e5 (Llama 3)": rotary_case(500000.0),
    "rotary layer, base 1e4": rotary_layer_case(10000.0),
    "rotary layer, base 5e5": rotary_layer_case(500000.0),
    "sinusoidal encoding": sinusoidal_case,
}
RATIOS = {}


@pytest.fixture(scope="module", autouse=True)
def print_ratios():
    yield
    print(f"\nRMS error against float64, ours / PyTorch's (budget {BUDGET}):")
    for (name, dtype), (ratio, ours, theirs) in RATIOS.items():
        print(f"  {name:30} {str(dtype)[6:]:9} {ratio:6.3f}   ({ours:.3g} / {theirs:.3g})")


def rms(errors) -> float:
    return torch.cat([e.flatten() for e in errors]).square().mean().sqrt().item()


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_16_bit_error_is_within_budget_of_pytorchs(case, dtype):
    ours, theirs = [], []
    for seed in SEEDS:
        out, expected, exact = case(dtype, seed)
        assert out.dtype == dtype and out.shape == exact.shape
        assert out.isfinite().all()
        ours.append(out.double() - exact)
        theirs.append(expected.double() - exact)
    name = next(n for n, c in CASES.items() if c is case)
    ratio = rms(ours) / rms(theirs)
    RATIOS[name, dtype] = ratio, rms(ours), rms(theirs)
    assert ratio <= BUDGET, f"{name}: our RMS error is {ratio:.2f} times PyTorch's"


# ---------------------------------------------------------------- angles in a 16-bit dtype

@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_16_bit_rotary_angles_are_the_exact_angles_rounded_once(dtype, base):
    """Positions above 256 (bfloat16) or 2048 (float16), and the base 500000 (above float16's
    largest number), are not numbers of the dtype: computed in it, angles are far off."""
    exact = torch.arange(LONG, dtype=torch.float64)[:, None] / base ** (
        torch.arange(0, D_ROTARY, 2, dtype=torch.float64) / D_ROTARY)  # (T, D/2)
    angles = rope.rotary_angles(LONG, D_ROTARY, base=base, dtype=dtype)
    assert angles.dtype == dtype
    rounding = torch.finfo(dtype).eps / 2  # the relative error of rounding once
    allowed = 1.01 * rounding * exact.abs() + torch.finfo(dtype).smallest_normal
    assert ((angles.double() - exact).abs() <= allowed).all()


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_16_bit_input_with_float32_angles_stays_16_bit(dtype):
    x = torch.randn(2, 5, 8).to(dtype)
    assert rope.apply_rotary(x, rope.rotary_angles(5, 8)).dtype == dtype
