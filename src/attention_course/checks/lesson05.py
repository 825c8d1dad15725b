"""Checks for lesson 05_copy_task: the masked loss, a training step, greedy decoding and
sequence accuracy."""

import torch
import torch.nn.functional as F
from torch import nn

from .. import training
from ..data import CopyTask, seeded_generator
from ..model import DecoderOnlyTransformer
from .framework import Case, Exercise, Mistake, randn, run_check, seeded
from .shortcuts import forbid

PROMPT_HALF_TOO = Mistake(
    "loss over the prompt half too",
    "The prompt is random: nothing can predict it. Average the loss over the answer positions "
    "only (where loss_mask is True).", {"positions": "all"})
TARGETS_NOT_SHIFTED = Mistake(
    "targets not shifted",
    "The model predicts the NEXT token: compare its logits with batch.targets (the inputs "
    "shifted by one), not with batch.inputs.", {"targets": "inputs"})

# ---------------------------------------------------------------- the masked loss

def loss_variant(logits, targets, loss_mask, *, positions="answer", reduction="mean",
                 softmax_first=False, log_softmax=True):
    scores = logits.softmax(dim=-1) if softmax_first else logits
    loss_fn = F.cross_entropy if log_softmax else F.nll_loss
    per_token = loss_fn(scores.transpose(1, 2), targets, reduction="none")  # (B, L)
    mask = {"answer": loss_mask, "all": torch.ones_like(loss_mask), "prompt": ~loss_mask}
    mask = mask[positions]
    if reduction == "sum":
        return per_token[mask].sum()
    if reduction == "per_sequence":
        return ((per_token * mask).sum(-1) / mask.sum(-1)).mean()
    if reduction == "all_positions":
        return (per_token * mask).mean()
    return per_token[mask].mean()


COPY_TASK_LOSS = Exercise(
    name="copy_task_loss",
    reference=training.copy_task_loss,
    inputs=("logits", "targets", "loss_mask"),
    outputs=(("loss", "() a scalar"),),
    variant=loss_variant,
    mistakes=(
        PROMPT_HALF_TOO,
        Mistake("loss mask inverted (only the prompt counts)",
                "loss_mask is True on the answer positions: those are the ones to average.",
                {"positions": "prompt"}),
        Mistake("summed instead of averaged",
                "Average over the counted tokens so the loss does not grow with the batch.",
                {"reduction": "sum"}),
        Mistake("averaged per sequence, then over sequences",
                "Average over all counted tokens at once: sequences with more answer tokens "
                "should weigh more.", {"reduction": "per_sequence"}),
        Mistake("masked positions counted in the mean",
                "(per_token * loss_mask).mean() divides by every position, counted or not: "
                "divide the sum by loss_mask.sum() instead.", {"reduction": "all_positions"}),
        Mistake("nll_loss on raw logits (no log_softmax)",
                "F.nll_loss expects log-probabilities: use F.cross_entropy on the logits, or "
                "log_softmax first.", {"log_softmax": False}),
        Mistake("softmax applied before cross_entropy",
                "F.cross_entropy takes raw logits and applies log-softmax itself.",
                {"softmax_first": True}),
    ),
    forbidden=forbid([training.copy_task_loss]),
)


def check_copy_task_loss(fn, seed: int = 0) -> None:
    """Check copy_task_loss(logits, targets, loss_mask) -> scalar. Lesson: 05_copy_task"""
    g = seeded(seed)
    targets = torch.randint(5, (3, 8), generator=g)
    half = (torch.arange(8) >= 4).expand(3, 8)
    ragged = torch.arange(8) >= torch.tensor([[3], [5], [6]])  # answers of different lengths
    cases = [
        Case("B, L, V = 3, 8, 5; the answer is the second half", (randn(3, 8, 5, generator=g),
                                                                  targets, half)),
        Case("float64, with gradients", (randn(3, 8, 5, generator=g, dtype=torch.float64),
                                         targets, half), grad=True),
        Case("answers of different lengths in one batch", (randn(3, 8, 5, generator=g),
                                                           targets, ragged)),
    ]
    run_check(COPY_TASK_LOSS, fn, cases)


# ---------------------------------------------------------------- one training step

def train_step_variant(model, optimizer, batch, *, zero_grad=True, step=True,
                       targets="targets", positions="answer"):
    model.train()
    if zero_grad:
        optimizer.zero_grad()
    target = batch.targets if targets == "targets" else batch.inputs
    mask = batch.loss_mask if positions == "answer" else torch.ones_like(batch.loss_mask)
    loss = training.copy_task_loss(model(batch.inputs), target, mask)
    loss.backward()
    if step:
        optimizer.step()
    return loss.detach()


OPTIMIZERS = {"SGD": lambda p: torch.optim.SGD(p, lr=0.5),
              "AdamW": lambda p: torch.optim.AdamW(p, lr=0.01)}


def training_run(train_step, seed: int, optimizer: str, steps: int = 3):
    """Call ``train_step`` ``steps`` times on a small seeded model; return what changed."""
    task = CopyTask(seq_len=4, vocab_size=5)
    torch.manual_seed(seed)
    model = DecoderOnlyTransformer(task.n_tokens, task.context_len, d_model=8).double()
    opt = OPTIMIZERS[optimizer](model.parameters())
    generator = seeded_generator(seed)
    losses = [train_step(model, opt, task.batch(4, generator)) for _ in range(steps)]
    parameters = torch.cat([p.detach().flatten() for p in model.parameters()])
    return _as_number(losses, "train_step", "the loss"), parameters


def _as_number(value, name: str, what: str) -> torch.Tensor:
    """The student's returned number(s) as float64, with a clear error if nothing came back."""
    if value is None or (isinstance(value, list) and None in value):
        raise TypeError(f"{name} returned None: return {what}")
    values = [float(v) for v in value] if isinstance(value, list) else value
    return torch.as_tensor(values, dtype=torch.float64)


TRAIN_STEP_MISTAKES = (
    Mistake("gradients never reset (no optimizer.zero_grad())",
            "backward() adds to .grad: call optimizer.zero_grad() before each backward pass.",
            {"zero_grad": False}),
    Mistake("parameters never updated",
            "The order is zero_grad(), forward, loss.backward(), optimizer.step(): backward() "
            "only computes gradients and step() applies them. A step() before backward(), or a "
            "zero_grad() between them, finds no gradients and does nothing.",
            {"step": False}),
    TARGETS_NOT_SHIFTED,
    PROMPT_HALF_TOO,
)


def check_train_step(fn, seed: int = 0) -> None:
    """Check train_step(model, optimizer, batch) -> loss, by the parameters it leaves behind.

    Lesson: 05_copy_task
    """
    exercise = Exercise(
        name="train_step",
        reference=lambda s, o: training_run(training.train_step, s, o),
        inputs=("seed", "optimizer"),
        outputs=(("losses", "(3,): the loss each of 3 calls returned"),
                 ("parameters", "every parameter after 3 calls, flattened")),
        variant=lambda s, o, **knobs: training_run(
            lambda m, opt, b: train_step_variant(m, opt, b, **knobs), s, o),
        mistakes=TRAIN_STEP_MISTAKES,
        forbidden=forbid([training.train_step]),
    )
    cases = [Case("3 calls on a small model with SGD", (seed, "SGD")),
             Case("3 calls on a small model with AdamW", (seed, "AdamW"))]
    run_check(exercise, lambda s, o: training_run(fn, s, o), cases)


# ---------------------------------------------------------------- greedy decoding

def decode_variant(model, prompt, n_new, *, position=-1, feed="prediction",
                   keep_prompt=False):
    tokens, predicted = prompt, []
    with torch.no_grad():
        for _ in range(n_new):
            next_token = model(tokens)[:, position].argmax(dim=-1, keepdim=True)  # (B, 1)
            predicted.append(next_token)
            if feed == "only_new":
                tokens = next_token
            else:
                fed_back = next_token if feed == "prediction" else tokens[:, -1:]
                tokens = torch.cat([tokens, fed_back], dim=1)
    out = torch.cat(predicted, dim=1)
    return torch.cat([prompt, out], dim=1) if keep_prompt else out


class PrefixSumModel(nn.Module):
    """A stand-in language model: at every position it predicts (sum of the tokens so far)
    mod V, so greedy decoding is right only if each step sees the whole, growing sequence."""

    def __init__(self, vocab_size: int = 7):
        super().__init__()
        self.vocab_size = vocab_size

    def forward(self, tokens):
        next_token = tokens.cumsum(dim=-1) % self.vocab_size  # (B, T)
        return 5.0 * F.one_hot(next_token, self.vocab_size).float()  # (B, T) -> (B, T, V)


GREEDY_DECODE_MISTAKES = (
    Mistake("decoding from the first position's logits",
            "The next token is predicted at the LAST position: logits[:, -1].",
            {"position": 0}),
    Mistake("decoding feeds back the wrong token",
            "Append the token you just predicted, so the next step sees it.",
            {"feed": "repeat"}),
    Mistake("decoding forgets the context (feeds only the new token)",
            "Each step reads the prompt and everything generated so far: append the new token "
            "to the sequence (torch.cat along dim=1) instead of replacing it.",
            {"feed": "only_new"}),
    Mistake("prompt returned with the new tokens",
            "Return only the n_new generated tokens: tokens[:, prompt.shape[1]:].",
            {"keep_prompt": True}),
)


def check_greedy_decode(fn, seed: int = 0) -> None:
    """Check greedy_decode(model, prompt, n_new) -> (B, n_new) with a stand-in model whose
    next token depends on the whole sequence so far.

    Lesson: 05_copy_task
    """
    model, g = PrefixSumModel(), seeded(seed)
    exercise = Exercise(
        name="greedy_decode",
        reference=lambda prompt, n: training.greedy_decode(model, prompt, n),
        inputs=("prompt", "n_new"),
        outputs=(("tokens", "(B, n_new): only the new tokens"),),
        variant=lambda prompt, n, **knobs: decode_variant(model, prompt, n, **knobs),
        mistakes=GREEDY_DECODE_MISTAKES,
        forbidden=forbid([training.greedy_decode]),
    )
    cases = [
        Case("B = 4 prompts of 5 tokens, 6 new tokens", (torch.randint(7, (4, 5), generator=g), 6)),
        Case("a one-token prompt", (torch.randint(7, (3, 1), generator=g), 5)),
        Case("a single new token", (torch.randint(7, (2, 4), generator=g), 1)),
    ]
    run_check(exercise, lambda prompt, n: fn(model, prompt, n), cases)


# ---------------------------------------------------------------- sequence accuracy

def accuracy_variant(predicted, expected, *, unit="sequence", axis=-1):
    right = predicted == expected
    per_unit = right.float() if unit == "token" else right.all(dim=axis).float()
    return per_unit.mean().double()


SEQUENCE_ACCURACY = Exercise(
    name="sequence_accuracy",
    reference=lambda p, e: torch.tensor(training.sequence_accuracy(p, e), dtype=torch.float64),
    inputs=("predicted", "expected"),
    outputs=(("accuracy", "() a number between 0 and 1"),),
    variant=accuracy_variant,
    mistakes=(
        Mistake("token accuracy instead of sequence accuracy",
                "A sequence counts only if EVERY token is right: .all() along the sequence "
                "axis, then the mean over the batch.", {"unit": "token"}),
        Mistake("all() over the batch axis",
                "Reduce along the sequence axis (dim=-1), one verdict per sequence.",
                {"axis": 0}),
    ),
    forbidden=forbid([training.sequence_accuracy]),
)


def check_sequence_accuracy(fn, seed: int = 0) -> None:
    """Check sequence_accuracy(predicted, expected) -> float in [0, 1]. Lesson: 05_copy_task"""
    g = seeded(seed)
    expected = torch.randint(10, (5, 4), generator=g)
    partly = expected.clone()
    partly[1, 2] = (partly[1, 2] + 1) % 10  # one wrong token
    partly[3] = (partly[3] + 1) % 10  # all wrong
    cases = [
        Case("5 sequences of 4 tokens: 3 right, one with one wrong token, one all wrong",
             (partly, expected)),
        Case("every sequence right", (expected, expected.clone())),
        Case("every token right but the last of each sequence",
             (torch.cat([expected[:, :-1], (expected[:, -1:] + 1) % 10], dim=1), expected)),
    ]
    run_check(SEQUENCE_ACCURACY,
              lambda p, e: _as_number(fn(p, e), "sequence_accuracy", "the accuracy"), cases)


# ---------------------------------------------------------------- the trained model, held out

COPY_TASK = CopyTask(seq_len=10, vocab_size=10)
HELD_OUT_SEED, HELD_OUT_SEQUENCES, TARGET_ACCURACY = 2024, 1000, 0.99
CONFIG = ("vocab_size", "max_len", "d_model", "n_heads", "n_layers", "d_ff", "learned_positions")
MODEL_LIMITS = {"vocab_size": 1024, "max_len": 4096, "d_model": 1024, "n_heads": 64,
                "n_layers": 16, "d_ff": 8192, "learned_positions": 1}
STILL_LEARNING = (
    "Did training reach 99.8% held-out accuracy? If it stopped at 1500 steps below that, train "
    "further in a new cell, history = fit(model, task, seed=1), and run this check again. If "
    "the loss never fell, check train_step (zero_grad, forward, loss, backward, step); if it "
    "fell but the accuracy stayed low, check greedy_decode.")


def held_out_run(model, greedy_decode, data_seed: int) -> tuple:
    """Decode fresh prompts with the student's model and ``greedy_decode``; return the tokens,
    the model's sizes and its weights, so the accuracy can be measured without either."""
    if not isinstance(model, DecoderOnlyTransformer):
        raise TypeError(f"`model` is a {type(model).__name__}, expected the lesson's "
                        f"DecoderOnlyTransformer")
    test = COPY_TASK.batch(HELD_OUT_SEQUENCES, seeded_generator(data_seed))
    device, was_training = next(model.parameters()).device, model.training
    model.eval()
    try:
        tokens = greedy_decode(model, COPY_TASK.prompt(test.source).to(device), COPY_TASK.seq_len)
    finally:
        model.train(was_training)
    return (tokens, torch.tensor([model_config(model)[key] for key in CONFIG]),
            *model.state_dict().values())


def model_config(model: DecoderOnlyTransformer) -> dict[str, int]:
    block = model.blocks[0]
    return {"vocab_size": model.head.out_features, "max_len": model.embed.max_len,
            "d_model": model.head.in_features, "n_heads": block.attn.n_heads,
            "n_layers": len(model.blocks), "d_ff": block.mlp[0].out_features,
            "learned_positions": int(isinstance(model.embed.position, nn.Parameter))}


def rebuild_model(config: torch.Tensor, weights: tuple) -> DecoderOnlyTransformer:
    """The lesson's model class with the recorded weights, from sizes within sane limits. It is
    laid out on the meta device first: memory is taken only once the recorded weights (whose
    size the grader bounds) have the shapes the sizes claim."""
    sizes = dict(zip(CONFIG, (int(n) for n in config.tolist()), strict=True))
    if any(not 0 <= sizes[key] <= limit for key, limit in MODEL_LIMITS.items()):
        raise ValueError(f"model sizes out of range: {sizes}")
    learned = bool(sizes.pop("learned_positions"))
    with torch.device("meta"):
        model = DecoderOnlyTransformer(**sizes, learned_positions=learned)
    state = dict(zip(model.state_dict(), weights, strict=True))
    for name, shape in ((n, t.shape) for n, t in model.state_dict().items()):
        if not isinstance(state[name], torch.Tensor) or state[name].shape != shape:
            raise ValueError(f"{name} is not a tensor of shape {tuple(shape)}")
    model = model.to_empty(device="cpu")
    model.load_state_dict(state, strict=True)
    return model.eval()


def assess_copy_accuracy(case: Case, outputs: tuple) -> str | None:
    """Held-out sequence accuracy with the student's decoding, then teacher-forced from the
    weights alone; both must reach 99%."""
    (data_seed,) = case.args
    test = COPY_TASK.batch(HELD_OUT_SEQUENCES, seeded_generator(data_seed))
    answer = COPY_TASK.answer(test.source)
    tokens, config, *weights = outputs
    if not isinstance(tokens, torch.Tensor) or tokens.shape != answer.shape:
        got = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        return f"greedy_decode returned {got} for the prompts, expected {tuple(answer.shape)}"
    accuracy = (tokens.cpu() == answer).all(dim=-1).double().mean().item()
    if accuracy < TARGET_ACCURACY:
        return (f"the model copies {accuracy:.1%} of {HELD_OUT_SEQUENCES} held-out sequences "
                f"exactly; it needs {TARGET_ACCURACY:.0%}. {STILL_LEARNING}")
    try:
        model = rebuild_model(config, weights)
    except Exception as err:  # recorded sizes or weights that do not make the lesson's model
        return f"the model could not be rebuilt from its weights ({type(err).__name__}: " \
               f"{str(err)[:300]})"
    with torch.no_grad():  # the same measure without the student's functions
        right = (model(test.inputs).argmax(dim=-1) == test.targets) | ~test.loss_mask  # (B, L)
    teacher_forced = right.all(dim=-1).double().mean().item()
    if teacher_forced < TARGET_ACCURACY:
        return (f"teacher-forced sequence accuracy {teacher_forced:.1%}, below "
                f"{TARGET_ACCURACY:.0%}: greedy_decode's tokens do not come from this model")
    return None


COPY_ACCURACY = Exercise(
    name="copy_accuracy",
    reference=None,
    inputs=("data_seed",),
    outputs=(("tokens", f"({HELD_OUT_SEQUENCES}, {COPY_TASK.seq_len})"),),
    assess=assess_copy_accuracy,
)


def check_copy_accuracy(model, greedy_decode, seed: int = 0) -> None:
    """Check that the trained ``model`` copies at least 99% of 1000 fresh sequences exactly,
    decoded with ``greedy_decode``. Lesson: 05_copy_task"""
    data_seed = HELD_OUT_SEED + seed
    cases = [Case(f"{HELD_OUT_SEQUENCES} fresh sequences of {COPY_TASK.seq_len} digits "
                  f"(seed {data_seed}, never used in training), decoded greedily", (data_seed,))]
    run_check(COPY_ACCURACY, lambda s: held_out_run(model, greedy_decode, s), cases)
