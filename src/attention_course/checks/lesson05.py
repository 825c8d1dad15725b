"""Checks for lesson 05_copy_task: the causal self-attention layer, the MLP, the pre-norm decoder
block, the copy-task loss (the causal shift and the answer mask), and the trained model's
held-out accuracy.

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
    BlockUnderTest,
    LossUnderTest,
    StandInLanguageModel,
    seeded_parameters,
    stand_in_block_parts,
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


# ---------------------------------------------------------------- causal self-attention

def attention_layer_variant(layer, x, *, mask="causal"):
    """The reference layer's output with the causal mask done wrong: "none", "transposed"
    (query t sees keys t..T-1) or "strict" (keys 0..t-1, not itself)."""
    T = x.shape[-2]
    ones = torch.ones(T, T, dtype=torch.bool, device=x.device)
    masks = {"none": None, "transposed": ones.triu(), "strict": ones.tril(-1)}
    if mask == "causal":
        return layer.attn(x, x, x, is_causal=True)
    return layer.attn(x, x, x, attn_mask=masks[mask])


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
    dropout_in_eval_mode(0),
)


def check_causal_self_attention(cls, seed: int = 0) -> None:
    """Check a CausalSelfAttention class (given constructor, the student's forward).

    The student's layer gets the reference's weights, in eval mode with dropout 0.5 (which must
    then do nothing), and runs on the same inputs as the reference, in float32 and float64.
    Lesson: 05_copy_task
    """
    torch.manual_seed(seed)
    reference = reference_model.CausalSelfAttention(12, 3).eval()
    references = {torch.float32: reference, torch.float64: copy.deepcopy(reference).double()}
    exercise = Exercise(
        name="CausalSelfAttention.forward",
        reference=lambda x: references[x.dtype](x),
        inputs=("x",),
        outputs=(("out", "(B, T, C)"), ("weights", "(B, H, T, T)")),
        variant=lambda x, **knobs: attention_layer_variant(references[x.dtype], x, **knobs),
        mistakes=ATTENTION_LAYER_MISTAKES,
        forbidden=forbid([reference_model.CausalSelfAttention.forward]),
    )
    init = {"d_model": 12, "n_heads": 3, "dropout": 0.5}
    student = Harnessed(harness.ModuleUnderTest, (cls, init, dict(reference.state_dict())))
    g = seeded(seed)
    cases = [
        Case("B, T, C = 2, 5, 12 with H = 3 heads", (randn(2, 5, 12, generator=g),)),
        Case("a longer sequence, B, T = 3, 7", (randn(3, 7, 12, generator=g),)),
        Case("a single position (T = 1)", (randn(2, 1, 12, generator=g),)),
        Case("float64, with gradients for x and every parameter",
             (randn(2, 6, 12, generator=g, dtype=torch.float64),), grad=True),
    ]
    run_check(exercise, student, cases,
              reference_parameters=lambda: dict(references[torch.float64].named_parameters()))


# ---------------------------------------------------------------- the MLP

MLP_NAMES = ("fc.weight", "fc.bias", "proj.weight", "proj.bias")
MLP_SIZES = {"d_model": 12, "d_ff": 20}


def mlp_variant(x, seed: int, *, activation="gelu", width="d_ff", where="between"):
    """A reference MLP with seeded weights, built or run the wrong way: another hidden
    ``width`` ("4C", "C"), another ``activation`` ("none", "relu", "tanh" for GELU's tanh
    approximation), or the activation ``where`` = "after" the second layer."""
    C, d_ff = MLP_SIZES["d_model"], MLP_SIZES["d_ff"]
    hidden = {"d_ff": d_ff, "4C": 4 * C, "C": C}[width]
    layer = seeded_parameters(reference_model.MLP(C, hidden), seed).to(x.dtype)
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


def check_mlp(cls, seed: int = 0) -> None:
    """Check an MLP class (the student's constructor and forward).

    The student's layer is built as MLP(d_model=12, d_ff=20, dropout=0.5), must name its
    parameters as the contract does, gets seeded weights (the reference gets the same) and runs
    in eval mode, in float32 and float64.
    Lesson: 05_copy_task
    """
    weights_seed = 100 + seed
    reference = seeded_parameters(reference_model.MLP(**MLP_SIZES), weights_seed).eval()
    references = {torch.float32: reference, torch.float64: copy.deepcopy(reference).double()}
    exercise = Exercise(
        name="MLP",
        reference=lambda x: references[x.dtype](x),
        inputs=("x",),
        outputs=(("out", "(..., C)"),),
        variant=lambda x, **knobs: mlp_variant(x, weights_seed, **knobs),
        mistakes=MLP_MISTAKES,
        forbidden=forbid([reference_model.MLP.forward]),
    )
    init = MLP_SIZES | {"dropout": 0.5}
    student = Harnessed(harness.SeededModuleUnderTest, (cls, init, MLP_NAMES, weights_seed))
    g = seeded(seed)
    cases = [
        Case("B, T, C = 2, 5, 12 with d_ff = 20", (randn(2, 5, 12, generator=g),)),
        Case("7 tokens without a batch axis, (T, C) = (7, 12)", (randn(7, 12, generator=g),)),
        Case("float64, with gradients for x and every parameter",
             (randn(2, 4, 12, generator=g, dtype=torch.float64),), grad=True),
    ]
    run_check(exercise, student, cases,
              reference_parameters=lambda: dict(references[torch.float64].named_parameters()))


# ---------------------------------------------------------------- the decoder block

def block_variant(block, x, *, norm="pre", attn_residual=True, mlp_residual=True,
                  residual="x", shared_norm=False, parallel=False):
    """The block's forward done wrong: ``norm`` = "post" (normalise after adding), a residual
    left out, the ``residual`` stream taken from the normalised x ("normed"), one LayerNorm
    for both sublayers, or the MLP reading the block's input (``parallel``)."""
    attn_norm = block.attn_norm
    mlp_norm = block.attn_norm if shared_norm else block.mlp_norm
    if norm == "post":
        attended, weights = block.attn(x)
        x = attn_norm(x + attended)
        return mlp_norm(x + block.mlp(x)), weights
    h = attn_norm(x)
    attended, weights = block.attn(h)
    base = h if residual == "normed" else x
    y = base + attended if attn_residual else attended
    h = mlp_norm(x if parallel else y)
    base = h if residual == "normed" else y
    return (base + block.mlp(h) if mlp_residual else block.mlp(h)), weights


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
    Mistake("one LayerNorm for both sublayers",
            "Each sublayer has its own LayerNorm: self.attn_norm before attention, "
            "self.mlp_norm before the MLP.", {"shared_norm": True}),
    Mistake("MLP reads the block's input instead of the attention's result",
            "The two sublayers run one after the other: the MLP's input is x after the "
            "attention residual was added.", {"parallel": True}),
)


def check_decoder_block(cls, seed: int = 0) -> None:
    """Check a DecoderBlock class (given constructor, the student's forward).

    The block's attention layer and MLP are replaced by small stand-ins (and its LayerNorms get
    seeded weights), so this tests the forward alone: the wiring of the norms and residuals.
    Lesson: 05_copy_task
    """
    d_model, n_heads = 12, 2
    parts = nn.ModuleDict(stand_in_block_parts(d_model, n_heads))
    state = seeded_parameters(parts, 200 + seed).state_dict()
    reference = BlockUnderTest(reference_model.DecoderBlock, d_model, n_heads, state)
    exercise = Exercise(
        name="DecoderBlock.forward",
        reference=reference,
        inputs=("x",),
        outputs=(("x", "(B, T, C)"), ("weights", "(B, H, T, T) from the attention layer")),
        variant=lambda x, **knobs: block_variant(reference.module(x.dtype), x, **knobs),
        mistakes=BLOCK_MISTAKES,
        forbidden=forbid([reference_model.DecoderBlock.forward]),
    )
    student = Harnessed(harness.BlockUnderTest, (cls, d_model, n_heads, state))
    g = seeded(seed)
    cases = [
        Case("B, T, C = 2, 5, 12", (randn(2, 5, 12, generator=g),)),
        Case("a single position (T = 1)", (randn(3, 1, 12, generator=g),)),
        Case("float64, with gradients for x and every parameter",
             (randn(2, 6, 12, generator=g, dtype=torch.float64),), grad=True),
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
    "check copy_task_loss, then your DecoderBlock. Falling but not low yet: train further in a "
    "new cell, history = train(model, task, copy_task_loss, TrainConfig(seed=1)), and run this "
    "check again.")


def rebuild_model(config: torch.Tensor, weights: tuple) -> DecoderOnlyTransformer:
    """The lesson's model, with the course's block, from recorded sizes within sane limits and
    the recorded weights. It is laid out on the meta device first: memory is taken only once
    the recorded weights (whose size the grader bounds) have the shapes the sizes claim."""
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
    state = dict(zip(laid_out, weights, strict=True))
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
