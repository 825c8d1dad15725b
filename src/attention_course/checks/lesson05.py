"""Checks for lesson 05_copy_task: the MLP, the pre-norm decoder block (its causal
self-attention through lesson 04's layer), the model around the blocks, the copy-task loss (the
causal shift and the answer mask), the training step, the trained model's held-out accuracy,
and a modern block's RMSNorm (its gated MLP is the MLP's other setting).

The student's side (what builds and runs the student's objects: stand-in parts made of torch.nn,
the module and loss under test, the held-out run) is in ``harness``, where it runs in the
student's process under the grader; this file judges, and may use the references.
"""

import copy

import torch
import torch.nn.functional as F
from torch import nn

from .. import model as reference_model
from .. import training
from ..data import CopyTask, seeded_generator
from ..model import DecoderOnlyTransformer
from .framework import Case, Exercise, Harnessed, Mistake, randn, run_check, seeded
from .student import harness
from .student.harness import (
    CONFIG,
    POSITION_CODES,
    LossUnderTest,
    ModelUnderTest,
    StandInBlock,
    StandInLanguageModel,
    StandInNorm,
    TrainStepUnderTest,
    WholeBlockUnderTest,
    seeded_parameters,
)
from .student.shortcuts import forbid

# ================================================================ judging

def _dropped_out(index: int):
    """A sign: output ``index`` is the expected one with some entries zeroed and the others
    scaled up by the same factor, 1 / (1 - p): dropout ran although the module was in eval
    mode."""
    def sign(got, expected) -> bool:
        out, wanted = got[index], expected[index]
        dropped = (out == 0) & (wanted != 0)
        kept = ~dropped & (wanted != 0)
        scale = (out[kept] / wanted[kept]).mean()
        return bool(dropped.any() and scale > 1.0
                    and torch.allclose(out[kept], scale * wanted[kept], rtol=1e-4, atol=1e-5))
    return sign


def dropout_in_eval_mode(index: int) -> Mistake:
    return Mistake(
        "dropout applied in eval mode",
        "F.dropout(x, p) drops whatever the module's mode, because its `training` argument "
        "defaults to True: pass training=self.training (nn.Dropout does this by itself).",
        sign=_dropped_out(index))


# ---------------------------------------------------------------- the MLP, classic and gated

MLP_NAMES = ("fc.weight", "fc.bias", "proj.weight", "proj.bias")
SWIGLU_NAMES = ("gate.weight", "up.weight", "down.weight")
MLP_SIZES = {"d_model": 12, "d_ff": 20}


def mlp_variant(x, seed: int, gated: bool = False, *, width="d_ff", activation="gelu",
                where="between", gate="silu", swapped=False, gating="gate"):
    """A seeded reference MLP built or run the wrong way: another hidden ``width`` ("4C",
    "C"; both settings); classic: another ``activation`` ("none", "relu", "tanh" for GELU's
    tanh approximation) or the activation ``where`` = "after" the second layer; gated: another
    ``gate`` function ("gelu", "sigmoid", "none"), gate and up ``swapped``, the SiLU applied to
    the "product", or no gating at all ("ungated": down(silu(gate(x))))."""
    C, d_ff = MLP_SIZES["d_model"], MLP_SIZES["d_ff"]
    hidden = {"d_ff": d_ff, "4C": 4 * C, "C": C}[width]
    layer = seeded_parameters(reference_model.MLP(C, hidden, gated=gated), seed).to(x.dtype)
    if gated:
        act = {"silu": F.silu, "gelu": F.gelu, "sigmoid": torch.sigmoid,
               "none": lambda h: h}[gate]
        a, b = (layer.up(x), layer.gate(x)) if swapped else (layer.gate(x), layer.up(x))
        if gating == "product":
            return layer.down(act(a * b))
        if gating == "ungated":
            return layer.down(act(a))
        return layer.down(act(a) * b)
    act = {"gelu": F.gelu, "none": lambda h: h, "relu": F.relu,
           "tanh": lambda h: F.gelu(h, approximate="tanh")}[activation]
    if where == "after":
        return act(layer.proj(layer.fc(x)))
    return layer.proj(act(layer.fc(x)))


MLP_MISTAKES = (
    Mistake("MLP without its nonlinearity",
            "Two linear layers in a row are one linear layer: put a GELU between them, or the "
            "MLP adds nothing that a single (C, C) matrix could not.", {"activation": "none"}),
    Mistake("ReLU instead of GELU",
            "The contract asks for GELU (as in GPT): F.gelu or nn.GELU().", {"activation": "relu"}),
    Mistake("GELU's tanh approximation instead of the exact GELU",
            "Use the exact GELU, PyTorch's default: no approximate='tanh'.",
            {"activation": "tanh"}),
    Mistake("nonlinearity after the second layer",
            "The GELU goes between the two layers, on the d_ff hidden units: "
            "C -> d_ff, GELU, d_ff -> C.", {"where": "after"}),
    Mistake("hidden width 4 * d_model instead of d_ff",
            "The hidden width is the d_ff argument (the model passes 4C by default, but the "
            "layer must not assume it).", {"width": "4C"}),
    Mistake("hidden width d_model instead of d_ff",
            "The first layer maps C to d_ff hidden units, the second d_ff back to C.",
            {"width": "C"}),
    dropout_in_eval_mode(0),
)

SWIGLU_MISTAKES = (
    Mistake("SiLU on the up branch instead of the gate",
            "The gate is the branch that goes through SiLU: silu(gate(x)) * up(x).",
            {"swapped": True}),
    Mistake("GELU instead of SiLU",
            "SwiGLU gates with SiLU (x * sigmoid(x), F.silu); GELU makes GeGLU.",
            {"gate": "gelu"}),
    Mistake("sigmoid instead of SiLU (that is GLU)",
            "SiLU is x * sigmoid(x), not sigmoid(x) alone: use F.silu.", {"gate": "sigmoid"}),
    Mistake("no nonlinearity on the gate",
            "Put SiLU on gate(x) before multiplying: a product of two linear maps is only "
            "quadratic, not the gated unit.", {"gate": "none"}),
    Mistake("SiLU applied to the product",
            "SiLU acts on the gate alone, then multiplies the up branch: "
            "silu(gate(x)) * up(x).", {"gating": "product"}),
    Mistake("up branch never used (no gating)",
            "Multiply the gated values by the up branch, unit by unit, before down.",
            {"gating": "ungated"}),
)


def check_mlp(cls, seed: int = 0) -> None:
    """Check an MLP class (the student's constructor and forward), classic and gated.

    The student's layer is built as MLP(d_model=12, d_ff=20, dropout=0.5, gated=False) and
    with gated=True, must name its parameters as the contract does for each, gets seeded
    weights (the reference gets the same) and runs in eval mode, in float32 and float64.
    Lesson: 05_copy_task
    """
    weights_seed = 100 + seed
    init = MLP_SIZES | {"dropout": 0.5}
    names = ((False, MLP_NAMES), (True, SWIGLU_NAMES))  # the contract's, for each setting
    reference = harness.SettingsUnderTest(reference_model.MLP, init, "gated", names,
                                          weights_seed)
    exercise = Exercise(
        name="MLP",
        reference=reference,
        inputs=("x",),
        outputs=(("out", "(..., C)"),),
        variant=lambda x, gated, **knobs: mlp_variant(x, weights_seed, gated, **knobs),
        mistakes=MLP_MISTAKES + SWIGLU_MISTAKES,
        forbidden=forbid([reference_model.MLP.forward]),
    )
    student = Harnessed(harness.SettingsUnderTest, (cls, init, "gated", names, weights_seed))
    g = seeded(seed)
    cases = [
        Case("B, T, C = 2, 5, 12 with d_ff = 20", (randn(2, 5, 12, generator=g),),
             {"gated": False}),
        Case("7 tokens without a batch axis, (T, C) = (7, 12)", (randn(7, 12, generator=g),),
             {"gated": False}),
        Case("float64, with gradients for x and every parameter",
             (randn(2, 4, 12, generator=g, dtype=torch.float64),), {"gated": False}, grad=True),
        Case("gated=True: B, T, C = 2, 5, 12 with d_ff = 20", (randn(2, 5, 12, generator=g),),
             {"gated": True}),
        Case("gated=True: 7 positions without a batch axis", (randn(7, 12, generator=g),),
             {"gated": True}),
        Case("gated=True, float64, with gradients for x and every parameter",
             (randn(2, 4, 12, generator=g, dtype=torch.float64),), {"gated": True}, grad=True),
    ]
    run_check(exercise, student, cases, reference_parameters=reference.probe_parameters)


# ---------------------------------------------------------------- the decoder block

def block_variant(block, x, *, mask="causal", dropout="train", norm="pre", attn_residual=True,
                  mlp_residual=True, residual="x", shared_norm=None, parallel=False):
    """The block built or run wrong: the attention's causal ``mask`` "none", "transposed"
    (query t sees keys t..T-1) or "strict" (keys 0..t-1, not itself); ``dropout`` "always"
    (in eval mode too, under the seed the harness sets); ``norm`` = "post" (normalise after
    adding); a residual left out; the ``residual`` stream taken from the normalised x
    ("normed"); one norm for both sublayers, used twice in the "forward" or built once in the
    "constructor" (loading the weights then leaves it with the MLP norm's); or the MLP reading
    the block's input (``parallel``)."""
    T = x.shape[-2]
    ones = torch.ones(T, T, dtype=torch.bool, device=x.device)
    masks = {"none": None, "transposed": ones.triu(), "strict": ones.tril(-1)}
    attn_norm = block.mlp_norm if shared_norm == "constructor" else block.attn_norm
    mlp_norm = block.attn_norm if shared_norm == "forward" else block.mlp_norm

    def attention(h):
        if mask == "causal":
            out, weights = block.attn(h, h, h, is_causal=True)
        else:
            out, weights = block.attn(h, h, h, attn_mask=masks[mask])
        return F.dropout(out, block.dropout, dropout == "always" or block.training), weights

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # the seed the harness runs the student's block under
        if norm == "post":
            attended, weights = attention(x)
            x = attn_norm(x + attended)
            return mlp_norm(x + block.mlp(x)), weights
        h = attn_norm(x)
        attended, weights = attention(h)
    base = h if residual == "normed" else x
    y = base + attended if attn_residual else attended
    h = mlp_norm(x if parallel else y)
    base = h if residual == "normed" else y
    return (base + block.mlp(h) if mlp_residual else block.mlp(h)), weights


ATTENTION_LAYER_MISTAKES = (
    Mistake("no causal mask",
            "Self-attention in a decoder is causal: position t may read positions 0..t only. "
            "Ask the attention layer for it (is_causal) or pass a lower-triangular bool mask.",
            {"mask": "none"}),
    Mistake("causal mask transposed (the future is visible)",
            "Query t (row t) may attend to keys s <= t (columns 0..t): a lower-triangular mask, "
            "not an upper one.", {"mask": "transposed"}),
    Mistake("causal mask excludes the diagonal (a token cannot see itself)",
            "Position t may attend to itself: keep the diagonal.", {"mask": "strict"}),
    Mistake("dropout applied in eval mode",
            "F.dropout(x, p) drops whatever the module's mode, because its `training` argument "
            "defaults to True: pass training=self.training (nn.Dropout does this by itself).",
            {"dropout": "always"}),
)

BLOCK_MISTAKES = (
    Mistake("post-norm instead of pre-norm",
            "Normalise the input of each sublayer, not the sum: x + attention(norm(x)), then "
            "x + mlp(norm(x)). The residual stream itself is never normalised inside the block.",
            {"norm": "post"}),
    Mistake("attention residual missing",
            "Add the attention's output to x instead of replacing x with it: without the "
            "residual the block forgets its input (here, the embeddings).",
            {"attn_residual": False}),
    Mistake("MLP residual missing",
            "Add the MLP's output to x instead of replacing x with it.", {"mlp_residual": False}),
    Mistake("residual added to the normalised x",
            "Keep x itself as the residual stream: normalise a copy for the sublayer, and add "
            "the sublayer's output to the x that came in, not to norm(x).",
            {"residual": "normed"}),
    Mistake("one norm used for both sublayers",
            "Each sublayer has its own norm: self.attn_norm before attention, "
            "self.mlp_norm before the MLP.", {"shared_norm": "forward"}),
    Mistake("one norm object shared by both sublayers",
            "Build the norm class twice in the constructor: self.attn_norm and self.mlp_norm "
            "are two objects with weights of their own, not two names for one.",
            {"shared_norm": "constructor"}),
    Mistake("MLP reads the block's input instead of the attention's result",
            "The two sublayers run one after the other: the MLP's input is x after the "
            "attention residual was added.", {"parallel": True}),
)
BLOCK_SIZES = {"d_model": 12, "n_heads": 3, "d_ff": 20, "dropout": 0.5}


def check_decoder_block(cls, seed: int = 0) -> None:
    """Check a DecoderBlock class (the student's constructor and forward).

    The block is built as DecoderBlock(12, 3, 20, 0.5, norm=a stand-in norm class, mlp=a
    stand-in MLP class), so that an unfinished MLP does not stop this check and the norm class
    given is seen to be used; it is loaded with seeded weights by name (lesson 04's attention
    layer as `attn`) and runs in eval mode, where its dropout must do nothing, in float32 and
    float64.
    Lesson: 05_copy_task
    """
    reference_block = reference_model.DecoderBlock(
        **BLOCK_SIZES, norm=StandInNorm, mlp=harness.StandInBlockMLP)
    state = seeded_parameters(reference_block, 200 + seed).state_dict()
    reference = WholeBlockUnderTest(reference_model.DecoderBlock, BLOCK_SIZES, "stand-in", state)
    exercise = Exercise(
        name="DecoderBlock",
        reference=reference,
        inputs=("x",),
        outputs=(("x", "(B, T, C)"), ("weights", "(B, H, T, T) from the attention layer")),
        variant=lambda x, **knobs: block_variant(reference.module(x.dtype), x, **knobs),
        mistakes=ATTENTION_LAYER_MISTAKES + BLOCK_MISTAKES,
        forbidden=forbid([reference_model.DecoderBlock.forward,
                          reference_model.CausalSelfAttention.forward]),
    )
    student = Harnessed(harness.WholeBlockUnderTest, (cls, BLOCK_SIZES, "stand-in", state))
    g = seeded(seed)
    cases = [
        Case("B, T, C = 2, 5, 12 with H = 3 heads", (randn(2, 5, 12, generator=g),)),
        Case("a longer sequence, B, T = 3, 7", (randn(3, 7, 12, generator=g),)),
        Case("a single position (T = 1)", (randn(3, 1, 12, generator=g),)),
        Case("float64, with gradients for x and every parameter",
             (randn(2, 6, 12, generator=g, dtype=torch.float64),), grad=True),
    ]
    run_check(exercise, student, cases, reference_parameters=reference.probe_parameters)


# ---------------------------------------------------------------- the model around the blocks

MODEL_SIZES = {"vocab_size": 7, "max_len": 9, "d_model": 12, "n_heads": 2}
MODEL_CONFIGS = {
    "two blocks": MODEL_SIZES | {"n_layers": 2},
    "sinusoidal": MODEL_SIZES | {"n_layers": 1, "positions": "sinusoidal", "scale_tokens": False,
                                 "d_ff": 20},
    "three blocks": MODEL_SIZES | {"n_layers": 3, "positions": "none", "norm": "stand-in"},
}


def model_states(seed: int) -> dict:
    """Seeded weights of the reference model, with stand-in blocks, for each configuration."""
    states = {}
    for name, init in MODEL_CONFIGS.items():
        init = dict(init)
        if init.get("norm") == "stand-in":
            init["norm"] = StandInNorm
        reference = reference_model.DecoderOnlyTransformer(**init, block=StandInBlock)
        states[name] = seeded_parameters(reference, 400 + seed).state_dict()
    return states


def model_variant(model, tokens, config, return_attention=False, double=False, *,
                  final_norm=True, order="first", shared=False, scale="honoured",
                  positions="embedding", attention="asked"):
    """The reference model's forward done wrong: no ``final_norm``, the weights in reversed
    ``order`` or only the "last" block's, one block (the last loaded) ``shared`` by every layer,
    the token ``scale`` "never" or "always" applied, ``positions`` added "after" the blocks, or
    the ``attention`` weights "never" returned."""
    embed = model.embed
    tokens_only = embed.token(tokens)  # (B, T, C)
    root_c = embed.token.embedding_dim ** 0.5
    factor = {"honoured": root_c if embed.scale_tokens else 1.0, "never": 1.0,
              "always": root_c}[scale]
    position = embed.position[: tokens.shape[-1]]
    x = tokens_only * factor + (position if positions == "embedding" else 0)
    blocks = [model.blocks[-1]] * len(model.blocks) if shared else list(model.blocks)
    weights = []
    for block in blocks:
        x, w = block(x)
        weights.append(w)
    if positions == "after":
        x = x + position
    logits = model.head(model.norm(x) if final_norm else x)
    if not return_attention:
        return logits, torch.zeros(0)
    if attention == "never":
        return logits
    weights = weights[::-1] if order == "reversed" else weights[-1:] if order == "last" else \
        weights
    return logits, torch.stack(weights)


MODEL_MISTAKES = (
    Mistake("no final norm before the head",
            "A pre-norm block never normalises the stream it returns: the model normalises it "
            "once more (self.norm) before the head.", {"final_norm": False}),
    Mistake("one block used for every layer",
            "Build n_layers separate blocks, each with its own weights: repeating one block "
            "object in the list shares its weights between the layers.", {"shared": True}),
    Mistake("attention weights returned last block first",
            "Collect each block's weights as the stream goes through them, first block first.",
            {"order": "reversed"}),
    Mistake("only the last block's attention weights returned",
            "Return one (B, H, T, T) tensor per block, in a list: keep every block's weights, "
            "not only the last one's.", {"order": "last"}),
    Mistake("return_attention ignored (no weights returned)",
            "With return_attention=True the model returns (logits, list of weights).",
            {"attention": "never"}),
    Mistake("embedding not scaled by sqrt(C)",
            "Lesson 01's embedding multiplies the token rows by sqrt(C) before adding the "
            "positions (self.embed does it when scale_tokens is true).", {"scale": "never"}),
    Mistake("scale_tokens not passed on to the embedding",
            "Pass scale_tokens (and positions) on to the embedding: with scale_tokens=False the "
            "token rows are added as they are.", {"scale": "always"}),
    Mistake("positions added after the blocks",
            "The positions go into the stream before the first block, with the tokens: the "
            "blocks' attention is what needs them.", {"positions": "after"}),
)


def check_decoder_only_transformer(cls, seed: int = 0) -> None:
    """Check a DecoderOnlyTransformer class (the student's constructor and forward).

    The model is built with stand-in blocks (so that it is tested alone), for three
    configurations (two blocks with learned positions; one block, sinusoidal positions, no
    sqrt(C), d_ff given; three blocks, no positions, another norm class), loaded with seeded
    weights and run in eval mode, in float32 and float64.
    Lesson: 05_copy_task
    """
    states = model_states(seed)
    reference = ModelUnderTest(reference_model.DecoderOnlyTransformer, MODEL_CONFIGS, states)
    exercise = Exercise(
        name="DecoderOnlyTransformer",
        reference=reference,
        inputs=("tokens",),
        outputs=(("logits", "(B, T, V)"),
                 ("attention", "(n_layers, B, H, T, T): the list of weights, stacked (empty "
                               "without return_attention)")),
        variant=lambda tokens, config, return_attention=False, double=False, **knobs:
            model_variant(reference.module(config, double), tokens, config, return_attention,
                          double, **knobs),
        mistakes=MODEL_MISTAKES,
        forbidden=forbid([reference_model.DecoderOnlyTransformer.forward]),
    )
    student = Harnessed(harness.ModelUnderTest, (cls, MODEL_CONFIGS, states))
    g = seeded_generator(seed)
    tokens = lambda B, T: torch.randint(7, (B, T), generator=g)  # noqa: E731
    cases = [
        Case("two blocks, learned positions: tokens (3, 6)", (tokens(3, 6), "two blocks")),
        Case("two blocks, with return_attention=True", (tokens(3, 6), "two blocks"),
             {"return_attention": True}),
        Case("one block, sinusoidal positions, scale_tokens=False, d_ff=20",
             (tokens(2, 5), "sinusoidal"), {"return_attention": True}),
        Case("three blocks, no positions, another norm class, T = max_len = 9",
             (tokens(2, 9), "three blocks"), {"return_attention": True}),
        Case("float64, with gradients for every parameter", (tokens(2, 7), "two blocks"),
             {"double": True}, grad=True),
    ]
    run_check(exercise, student, cases, reference_parameters=reference.probe_parameters)


# ---------------------------------------------------------------- the copy-task loss

def loss_variant(language_model, sequences, n, *, targets="next", positions="answer", start=0,
                 reduction="mean", softmax_first=False):
    """The loss with the shift or the answer mask done wrong: the ``targets`` = "inputs"
    themselves, every position counted, the answer window shifted by ``start``, summed, or
    softmax before the cross-entropy."""
    inputs = sequences[:, :-1]
    wanted = sequences[:, 1:] if targets == "next" else inputs
    logits = language_model(inputs)  # (B, 2n, V)
    if softmax_first:
        logits = logits.softmax(dim=-1)
    first = (n if positions == "answer" else 0) + start
    per_token = F.cross_entropy(logits[:, first:].transpose(1, 2), wanted[:, first:],
                                reduction="none")
    return per_token.sum() if reduction == "sum" else per_token.mean()


PROMPT_HALF_TOO = Mistake(
    "loss over the prompt half too",
    "The source digits are random: nothing can predict them. Count only the predictions of the "
    "answer tokens.", {"positions": "all"})
TARGETS_NOT_SHIFTED = Mistake(
    "targets not shifted",
    "Position t must predict the token that comes AFTER it: the targets are the sequence "
    "shifted left by one, not the tokens the model reads.", {"targets": "inputs"})

LOSS_MISTAKES = (
    TARGETS_NOT_SHIFTED,
    PROMPT_HALF_TOO,
    Mistake("first answer token left out",
            "The separator's position, n, predicts the first answer token: the answer's "
            "predictions are those of input positions n to 2n - 1.", {"start": 1}),
    Mistake("separator counted as an answer token",
            "Input position n - 1 holds the last source token and predicts the separator, "
            "which is always the same and not part of the answer: start at position n.",
            {"start": -1}),
    Mistake("summed instead of averaged",
            "Average over the counted tokens, so the loss does not grow with the batch.",
            {"reduction": "sum"}),
    Mistake("softmax applied before cross_entropy",
            "F.cross_entropy takes raw logits and applies log-softmax itself.",
            {"softmax_first": True}),
)


def check_copy_task_loss(fn, seed: int = 0) -> None:
    """Check copy_task_loss(model, sequences, n) -> scalar with a stand-in causal language model.

    Lesson: 05_copy_task
    """
    vocab_size, max_len = 6, 8  # 5 digits and the separator; sequences of up to 2n + 1 = 9
    torch.manual_seed(300 + seed)
    state = StandInLanguageModel(vocab_size, max_len).state_dict()
    reference = LossUnderTest(training.copy_task_loss, vocab_size, max_len, state)
    exercise = Exercise(
        name="copy_task_loss",
        reference=reference,
        inputs=("sequences", "n"),
        outputs=(("loss", "() a scalar tensor"),),
        variant=lambda sequences, n, dtype=torch.float32, **knobs: loss_variant(
            reference.models[dtype], sequences, n, **knobs),
        mistakes=LOSS_MISTAKES,
        forbidden=forbid([training.copy_task_loss]),
    )
    student = Harnessed(harness.LossUnderTest, (fn, vocab_size, max_len, state))
    g = seeded_generator(seed)
    cases = [
        Case("B = 3 copies of n = 4 digits: sequences (3, 9)",
             (CopyTask(4, 5).batch(3, g).sequences, 4)),
        Case("n = 3, reversed answers: sequences (4, 7)",
             (CopyTask(3, 5, reverse=True).batch(4, g).sequences, 3)),
        Case("float64 model, with gradients for every parameter",
             (CopyTask(4, 5).batch(2, g).sequences, 4), {"dtype": torch.float64}, grad=True),
    ]
    run_check(exercise, student, cases, reference_parameters=reference.probe_parameters)


# ---------------------------------------------------------------- the training step

TRAIN_STEP_SIZES = (6, 8)  # the stand-in language model: 5 digits and the separator, 8 positions


def step_variant(model, optimizer, loss_fn, sequences, n, max_norm=None, *, zero="first",
                 mode="train", returned="number", clip="norm"):
    """The reference step done wrong: gradients ``zero``ed "never" or "late" (after the
    backward, so that the update sees none), the model left in "eval" ``mode``, the loss
    ``returned`` as a "tensor", or the gradients clipped "never", "per parameter" or by
    "value"."""
    if mode == "train":
        model.train()
    if zero == "first":
        optimizer.zero_grad()
    loss = loss_fn(model, sequences, n)
    loss.backward()
    if zero == "late":
        optimizer.zero_grad()
    if max_norm is not None and clip == "norm":
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    elif max_norm is not None and clip == "per parameter":
        for p in model.parameters():
            nn.utils.clip_grad_norm_(p, max_norm)
    elif max_norm is not None and clip == "value":
        nn.utils.clip_grad_value_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item() if returned == "number" else loss


def _returned_a_tensor(got, expected) -> bool:
    """A sign: the step returned something that is not a Python float (a tensor, say)."""
    return bool(expected[1].all() and not got[1].any() and torch.allclose(got[0], expected[0]))


def _left_in_eval_mode(got, expected) -> bool:
    return bool(expected[2].all() and not got[2].any())


def _returned_nothing(got, expected) -> bool:
    return bool(got[0].isnan().all() and not expected[0].isnan().any())


TRAIN_STEP_MISTAKES = (
    Mistake("nothing returned",
            "Return the loss of this step as a number: the training loop records it.",
            sign=_returned_nothing),
    Mistake("loss returned as a tensor, not a number",
            "Return a Python float (the tensor's item). The tensor holds on to the whole graph "
            "of the step, and a loop that keeps it for its history keeps every step's graph.",
            sign=_returned_a_tensor),
    Mistake("model left in eval mode",
            "Put the model in training mode first (its train method): dropout is on only in "
            "training mode, and an evaluation may have left the model in eval mode.",
            sign=_left_in_eval_mode),
    Mistake("gradients never zeroed (they add up from step to step)",
            "backward() adds to .grad: have the optimizer forget the old gradients (zero_grad) "
            "before each backward, or each update also carries every earlier step's "
            "gradients.", {"zero": "never"}),
    Mistake("the update never sees this step's gradients",
            "Order matters: zero the old gradients, then backward, then step. Zeroing between "
            "backward and step, or stepping before backward, updates nothing with this "
            "step's gradients.", {"zero": "late"}),
    Mistake("max_norm ignored (gradients not clipped)",
            "When max_norm is given, scale the gradients down (nn.utils.clip_grad_norm_) "
            "after backward and before step.", {"clip": "never"}),
    Mistake("each parameter clipped on its own",
            "The norm is that of all the gradients together: pass all the model's parameters "
            "to one clip_grad_norm_ call.", {"clip": "per parameter"}),
    Mistake("gradients clipped by value instead of by norm",
            "clip_grad_value_ cuts each entry; the contract scales all gradients together so "
            "that their norm is at most max_norm (clip_grad_norm_).", {"clip": "value"}),
)


def check_train_step(fn, seed: int = 0) -> None:
    """Check train_step(model, optimizer, loss_fn, sequences, n, max_norm=None) -> float.

    Two steps on a stand-in language model that starts in eval mode with stale gradients, with a
    plain gradient-descent optimizer: the returned losses, their type, the model's mode at each
    forward and every parameter afterwards are compared with the course's step.
    Lesson: 05_copy_task
    """
    vocab_size, max_len = TRAIN_STEP_SIZES
    torch.manual_seed(500 + seed)
    state = StandInLanguageModel(vocab_size, max_len).state_dict()
    reference = TrainStepUnderTest(training.train_step, vocab_size, max_len, state)
    exercise = Exercise(
        name="train_step",
        reference=reference,
        inputs=("first", "second", "n"),
        outputs=(("losses", "(2,) the two losses returned, as numbers"),
                 ("returned_float", "(2,) whether each was a Python float"),
                 ("training_mode", "(2,) the model's mode at each forward"),
                 ("parameters", "(P,) every parameter after the two steps")),
        variant=lambda first, second, n, max_norm=None, **knobs: TrainStepUnderTest(
            lambda *args, **kwargs: step_variant(*args, **kwargs, **knobs),
            vocab_size, max_len, state)(first, second, n, max_norm),
        mistakes=TRAIN_STEP_MISTAKES,
        forbidden=forbid([training.train_step]),
    )
    student = Harnessed(harness.TrainStepUnderTest, (fn, vocab_size, max_len, state))
    g = seeded_generator(seed)
    batch = lambda B: CopyTask(3, 5).batch(B, g).sequences  # noqa: E731  (B, 7)
    cases = [
        Case("two steps on batches of 4 and 3 sequences of n = 3 digits",
             (batch(4), batch(3), 3)),
        Case("two steps with max_norm=0.05 (the gradients are clipped)",
             (batch(4), batch(4), 3), {"max_norm": 0.05}),
    ]
    run_check(exercise, student, cases)


# ---------------------------------------------------------------- the trained model, held out

COPY_TASK = CopyTask(seq_len=10, vocab_size=10)
HELD_OUT_SEED, HELD_OUT_SEQUENCES, TARGET_ACCURACY = 2024, 1000, 0.99
# The largest model the grader rebuilds and runs on the held-out sequences, in its own process:
# four times the lesson's in every size (d_model 32, one layer, d_ff 128), so that judging one
# takes a second and some megabytes, whatever a record claims.
MODEL_LIMITS = {"vocab_size": 64, "max_len": 256, "d_model": 128, "n_heads": 16,
                "n_layers": 4, "d_ff": 512, "positions": 2, "scale_tokens": 1}
STILL_LEARNING = (
    "Look at the loss first (the last loss on the progress bar, or history.loss[-1]). Near 0 "
    "while the model copies nothing: copy_task_loss does not score the answer digits (its "
    "check says what). Still near its start (about 2.5 untrained): the model did not learn; "
    "check copy_task_loss and train_step, then your DecoderBlock. Falling but not low yet: "
    "train further in a new cell, history = train(model, task, copy_task_loss, "
    "TrainConfig(seed=1), step=train_step), and run this check again.")


def rebuild_model(config: torch.Tensor, weights: tuple) -> DecoderOnlyTransformer:
    """The lesson's model, with the course's block, from recorded sizes within sane limits and
    the recorded weights (in the order of their sorted names). It is laid out on the meta
    device first: memory is taken only once the recorded weights (whose size the grader
    bounds) have the shapes the sizes claim."""
    sizes = dict(zip(CONFIG, (int(n) for n in config.tolist()), strict=True))
    for key, limit in MODEL_LIMITS.items():
        if not 0 <= sizes[key] <= limit:
            raise ValueError(f"its {key} is {sizes[key]}: lesson 05 grades models of {key} "
                             f"{limit} at most")
    positions = {code: name for name, code in POSITION_CODES.items()}[sizes.pop("positions")]
    scale_tokens = bool(sizes.pop("scale_tokens"))
    with torch.device("meta"):
        model = DecoderOnlyTransformer(**sizes, block=reference_model.DecoderBlock,
                                       positions=positions, scale_tokens=scale_tokens)
    laid_out = model.state_dict()
    state = dict(zip(sorted(laid_out), weights, strict=True))  # recorded in this order
    for name, weight in state.items():
        if not isinstance(weight, torch.Tensor) or weight.shape != laid_out[name].shape:
            raise ValueError(f"{name} is not a tensor of shape {tuple(laid_out[name].shape)}")
    # assign: the weights replace the meta tensors (to_empty would import sympy, 0.5 s)
    model.load_state_dict({name: weight.to("cpu", laid_out[name].dtype)
                           for name, weight in state.items()}, strict=True, assign=True)
    return model.eval()


def assess_copy_accuracy(case: Case, outputs: tuple) -> str | None:
    """Held-out sequence accuracy of the student's model, then of its weights in the course's
    block; both must reach 99%. Each takes one forward pass: greedy decoding gets a sequence
    right exactly when every answer token is the most likely one given the true tokens before
    it (lesson 05, section 4)."""
    (data_seed,) = case.args
    test = COPY_TASK.batch(HELD_OUT_SEQUENCES, seeded_generator(data_seed))
    answer, n = COPY_TASK.answer(test.source), COPY_TASK.seq_len  # (B, n)
    predicted, config, *weights = outputs  # (B, 2n): the most likely next tokens
    if not isinstance(predicted, torch.Tensor) or predicted.shape != test.inputs.shape:
        got = tuple(predicted.shape) if isinstance(predicted, torch.Tensor) else \
            type(predicted).__name__
        return (f"model(inputs) gave most likely tokens of shape {got} for inputs of shape "
                f"{tuple(test.inputs.shape)}: it must return (B, L, V) logits")
    accuracy = training.sequence_accuracy(predicted[:, n:].cpu(), answer)
    if accuracy < TARGET_ACCURACY:
        return (f"the model copies {accuracy:.1%} of {HELD_OUT_SEQUENCES} held-out sequences "
                f"exactly; it needs {TARGET_ACCURACY:.0%}. {STILL_LEARNING}")
    try:
        model = rebuild_model(config, weights)
    except Exception as err:  # recorded sizes or weights that do not make the lesson's model
        return f"the model could not be rebuilt from its weights ({type(err).__name__}: " \
               f"{str(err)[:300]})"
    in_course_block = training.teacher_forced_accuracy(model, test)
    if in_course_block < TARGET_ACCURACY:
        return (f"with these weights in the course's pre-norm block the model copies "
                f"{in_course_block:.1%} of the held-out sequences (in yours: {accuracy:.1%}): "
                f"your DecoderBlock computes something else, or lets a position read the ones "
                f"after it (its check says what)")
    return None


COPY_ACCURACY = Exercise(
    name="copy_accuracy",
    reference=None,
    inputs=("data_seed",),
    outputs=(("predicted", f"({HELD_OUT_SEQUENCES}, {2 * COPY_TASK.seq_len}) most likely next "
                           f"tokens"),),
    assess=assess_copy_accuracy,
)


def check_copy_accuracy(model, seed: int = 0) -> None:
    """Check that the trained ``model`` copies at least 99% of 1000 fresh sequences exactly,
    measured as in training: every answer token predicted from the true tokens before it.
    Lesson: 05_copy_task"""
    data_seed = HELD_OUT_SEED + seed
    cases = [Case(f"{HELD_OUT_SEQUENCES} fresh sequences of {COPY_TASK.seq_len} digits "
                  f"(seed {data_seed}, never used in training)", (data_seed,))]
    student = Harnessed(harness.HeldOutRun, (model, COPY_TASK.seq_len, COPY_TASK.vocab_size,
                                             HELD_OUT_SEQUENCES))
    run_check(COPY_ACCURACY, student, cases)


# ---------------------------------------------------------------- a modern block: RMSNorm

RMS_SIZES = {"d_model": 12, "eps": 0.01}
# F.rms_norm, torch.rms_norm and nn.RMSNorm's forward; and the other norms, which compute an
# RMS norm when handed [x, -x] (mean 0, variance the mean square)
_RMS_BUILT_INS = ("rms_norm", "layer_norm", "group_norm", "batch_norm", "instance_norm")


def rms_norm_variant(module, x, *, center=False, root=True, eps="inside", gain=True,
                     axis="last", precision="wide"):
    """RMSNorm done wrong: the mean subtracted (``center``), no square ``root``, ``eps``
    "outside" the root, "none" or "fixed" at 1e-6, no ``gain``, the mean over "all" axes, or
    the arithmetic in the input's 16-bit ``precision``."""
    wide = x if precision == "narrow" else x.to(torch.promote_types(x.dtype, torch.float32))
    dims = tuple(range(wide.ndim)) if axis == "all" else (-1,)
    if center:
        wide = wide - wide.mean(dim=dims, keepdim=True)
    mean_square = wide.pow(2).mean(dim=dims, keepdim=True)
    e = {"inside": module.eps, "outside": module.eps, "none": 0.0, "fixed": 1e-6}[eps]
    if eps == "outside":
        scale = mean_square.sqrt() + e if root else mean_square + e
    else:
        scale = (mean_square + e).sqrt() if root else mean_square + e
    normed = wide / scale
    weight = module.weight.to(normed.dtype)
    return (normed * weight if gain else normed).to(x.dtype)


RMS_NORM_MISTAKES = (
    Mistake("mean subtracted (that is LayerNorm)",
            "RMSNorm divides by the root of the mean of the squares and subtracts nothing: "
            "no centring, and no bias.", {"center": True}),
    Mistake("mean square not square-rooted",
            "Divide by sqrt(mean(x^2) + eps), the root mean square, not by the mean square.",
            {"root": False}),
    Mistake("eps added after the square root",
            "eps goes inside the root: sqrt(mean(x^2) + eps).", {"eps": "outside"}),
    Mistake("eps left out",
            "Add eps to the mean square: a row of zeros (or of tiny values) must not divide by "
            "0.", {"eps": "none"}),
    Mistake("the eps argument ignored (a fixed eps)",
            "Use the eps the constructor was given (kept on self), not a number of your own.",
            {"eps": "fixed"}),
    Mistake("gain (weight) not applied",
            "Multiply the normalised x by self.weight, one learned gain per channel.",
            {"gain": False}),
    Mistake("mean over every axis instead of the last",
            "Each position is normalised on its own: the mean of the squares runs over the "
            "last axis (C) only, with keepdim=True.", {"axis": "all"}),
    Mistake("computed in 16-bit (the squares overflow)",
            "Compute in float32 and return the input's dtype: the square of a float16 entry "
            "above 256 is inf.", {"precision": "narrow"}),
)


def check_rms_norm(cls, seed: int = 0) -> None:
    """Check an RMSNorm class (the student's constructor and forward): built as
    RMSNorm(d_model=12, eps=0.01), with a seeded weight, on inputs of ordinary size, tiny
    inputs (where eps matters), float64, and float16 inputs with entries in the hundreds.
    Lesson: 05_copy_task
    """
    weights_seed = 600 + seed
    reference = seeded_parameters(reference_model.RMSNorm(**RMS_SIZES), weights_seed)
    references = {torch.float64: copy.deepcopy(reference).double()}
    pick = lambda x: references.get(x.dtype, reference)  # noqa: E731
    exercise = Exercise(
        name="RMSNorm",
        reference=lambda x: pick(x)(x),
        inputs=("x",),
        outputs=(("out", "(..., C)"),),
        variant=lambda x, **knobs: rms_norm_variant(pick(x), x, **knobs),
        mistakes=RMS_NORM_MISTAKES,
        forbidden=forbid([reference_model.RMSNorm.forward], builtins=_RMS_BUILT_INS),
    )
    student = Harnessed(harness.SeededModuleUnderTest, (cls, RMS_SIZES, ("weight",),
                                                        weights_seed))
    g = seeded(seed)
    cases = [
        Case("B, T, C = 2, 5, 12", (randn(2, 5, 12, generator=g),)),
        Case("7 positions without a batch axis, entries near 0.05 (eps matters)",
             (0.05 * randn(7, 12, generator=g),)),
        Case("float64, with gradients for x and the weight",
             (randn(2, 4, 12, generator=g, dtype=torch.float64),), grad=True),
        Case("float16 entries in the hundreds (out is float16)",
             ((300 * randn(3, 12, generator=g)).half(),)),
    ]
    run_check(exercise, student, cases,
              reference_parameters=lambda: dict(references[torch.float64].named_parameters()))
