"""Training and evaluating a model on the copy task.

``copy_task_loss`` (the causal shift and the answer mask) and ``train_step`` (one step of
gradient descent) are lesson 05's exercises. The rest is the given code around them: greedy
decoding, sequence accuracy, the optimizer and ``train``, which takes the loss function and the
step as arguments, so the notebook trains with the student's own.

Lesson: 05_copy_task
"""

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from .data import Batch, CopyTask, seeded_generator


def copy_task_loss(model: nn.Module, sequences: Tensor, n: int) -> Tensor:
    """Mean next-token cross-entropy of ``model`` over the answer tokens of ``sequences``.

    The model reads every token but the last and predicts, at each position, the token that
    follows it; only the predictions of the n answer tokens count.
    Args:
        model: maps (B, L) token ids to (B, L, V) logits, causally.
        sequences: (B, 2n + 1) token ids: n source tokens, the separator, the n answer tokens.
        n: the number of source (and answer) tokens.
    Returns:
        () scalar tensor.
    Lesson: 05_copy_task
    """
    inputs, targets = sequences[:, :-1], sequences[:, 1:]  # (B, 2n) each: the causal shift
    logits = model(inputs)  # (B, 2n) -> (B, 2n, V)
    answer = logits[:, n:]  # positions n..2n-1 (the separator onwards) predict the answer
    return F.cross_entropy(answer.flatten(0, 1), targets[:, n:].flatten())  # (B*n, V), (B*n,)


def train_step(model: nn.Module, optimizer, loss_fn, sequences: Tensor, n: int,
               max_norm: float | None = None) -> float:
    """One step of training: the loss on ``sequences``, its gradients, one update.

    Args:
        model: the model to train; it is put in training mode (dropout on).
        optimizer: holds the model's parameters; ``zero_grad()`` forgets the gradients,
            ``step()`` updates every parameter from its gradient.
        loss_fn: loss_fn(model, sequences, n) -> () scalar tensor.
        sequences: (B, 2n + 1) token ids; n: the number of source digits.
        max_norm: if given, the gradients are scaled down so that their norm, all parameters
            together, is at most max_norm, before the update.
    Returns:
        the loss before the update, as a Python float (holding on to no graph).
    Lesson: 05_copy_task
    """
    model.train()
    optimizer.zero_grad()  # the gradients of the last step must not add to this one's
    loss = loss_fn(model, sequences, n)  # () scalar tensor
    loss.backward()  # a gradient in every parameter's .grad
    if max_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()


@torch.no_grad()
def greedy_decode(model: nn.Module, prompt: Tensor, n_new: int) -> Tensor:
    """Extend ``prompt`` by ``n_new`` tokens, each time appending the most likely next token.

    Args:
        prompt: (B, P) token ids.
    Returns:
        (B, n_new) generated token ids.
    Lesson: 05_copy_task
    """
    was_training = model.training
    model.eval()
    tokens = prompt
    for _ in range(n_new):
        next_token = model(tokens)[:, -1].argmax(dim=-1, keepdim=True)  # (B, T, V) -> (B, 1)
        tokens = torch.cat([tokens, next_token], dim=1)  # (B, T) -> (B, T + 1)
    model.train(was_training)
    return tokens[:, prompt.shape[1]:]


def sequence_accuracy(predicted: Tensor, expected: Tensor) -> float:
    """Fraction of sequences whose every token is right: (B, n) and (B, n) -> float in [0, 1].

    Lesson: 05_copy_task
    """
    if predicted.shape != expected.shape:
        raise ValueError(f"predicted {tuple(predicted.shape)} and expected "
                         f"{tuple(expected.shape)} must have the same shape (B, n)")
    return (predicted == expected).all(dim=-1).float().mean().item()


def evaluate(model: nn.Module, task: CopyTask, n_sequences: int = 1000, seed: int = 12345,
             device=None) -> float:
    """Held-out sequence accuracy: greedy answers to ``n_sequences`` fresh seeded sources."""
    batch = task.batch(n_sequences, seeded_generator(seed, device))
    answer = greedy_decode(model, task.prompt(batch.source), task.seq_len)
    return sequence_accuracy(answer, task.answer(batch.source))


@torch.no_grad()
def teacher_forced_accuracy(model: nn.Module, batch: Batch) -> float:
    """Sequence accuracy from one forward pass over the true sequences.

    Greedy decoding gets a sequence right exactly when the model's most likely next token is
    right at every answer position given the true prefix, so this equals the greedy sequence
    accuracy at the cost of a single forward pass.
    """
    was_training = model.training
    model.eval()
    right = (model(batch.inputs).argmax(dim=-1) == batch.targets) | ~batch.loss_mask  # (B, L)
    model.train(was_training)
    return right.all(dim=-1).float().mean().item()


@dataclass
class History:
    """What a training run did: losses per step, held-out accuracy per evaluation, wall time."""

    loss: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    seconds: float = 0.0
    target: float | None = None

    @property
    def steps(self) -> int:
        return len(self.loss)

    @property
    def reached_target(self) -> bool:
        return self.target is not None and bool(self.accuracy) and self.accuracy[-1] >= self.target

    def summary(self) -> str:
        """One line: how the run ended, in words."""
        accuracy = f"held-out sequence accuracy {self.accuracy[-1]:.1%}" if self.accuracy else \
            "no evaluation"
        if self.reached_target:
            return (f"stopped early at step {self.steps}: {accuracy} reached the target "
                    f"{self.target:.1%} ({self.seconds:.1f} s)")
        if self.target is None:
            return f"ran {self.steps} steps: {accuracy} ({self.seconds:.1f} s)"
        return (f"ran all {self.steps} steps: {accuracy}, below the target {self.target:.1%} "
                f"({self.seconds:.1f} s). {self.diagnosis()}")

    def diagnosis(self) -> str:
        """What a run that missed its target says, read from its loss first."""
        first, last = self.loss[0], self.loss[-1]
        accuracy = self.accuracy[-1] if self.accuracy else 0.0
        if last < 0.05 and accuracy < 0.5:
            return (f"It did not learn to copy, though the loss is {last:.3f}: a loss near 0 "
                    f"that copies nothing does not score the answer digits (look at the loss "
                    f"function first).")
        if last > 0.9 * first:
            return (f"It did not learn: the loss stayed at {last:.3f} (it started at "
                    f"{first:.3f}). Look at the loss first: a model that learns brings it "
                    f"well below its start within a few dozen steps.")
        return (f"The loss fell from {first:.3f} to {last:.3f}, so it is learning: train "
                f"further.")


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters of a training run; the defaults learn copying in well under a second."""

    max_steps: int = 300
    batch_size: int = 64
    lr: float = 1e-2
    warmup_steps: int = 10
    eval_every: int = 10
    eval_sequences: int = 500
    target_accuracy: float | None = 0.998  # at most 1 wrong sequence in 500
    seed: int = 0


class AdamW:
    """AdamW with PyTorch's defaults (betas 0.9 and 0.999, eps 1e-8, weight decay 0.01): the
    update of ``torch.optim.AdamW``, written out.

    The first use of any ``torch.optim`` optimizer imports ``torch._dynamo``, which takes about
    a second on a CPU: longer than lesson 05's whole training run. These few lines do not.
    """

    def __init__(self, parameters, lr: float, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01):
        self.parameters = [p for p in parameters if p.requires_grad]
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.mean = [torch.zeros_like(p) for p in self.parameters]  # running mean of gradients
        self.square = [torch.zeros_like(p) for p in self.parameters]  # ... of their squares
        self.steps = 0

    def zero_grad(self) -> None:
        for p in self.parameters:
            p.grad = None

    @torch.no_grad()
    def step(self, lr: float | None = None) -> None:
        """One update of every parameter that has a gradient, at ``lr`` (default: self.lr)."""
        lr = self.lr if lr is None else lr
        (beta1, beta2), self.steps = self.betas, self.steps + 1
        step_size = lr / (1 - beta1 ** self.steps)  # the bias corrections of Adam
        correction2 = (1 - beta2 ** self.steps) ** 0.5
        for p, mean, square in zip(self.parameters, self.mean, self.square, strict=True):
            if p.grad is None:
                continue
            p.mul_(1 - lr * self.weight_decay)  # decoupled weight decay
            mean.lerp_(p.grad, 1 - beta1)
            square.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            p.addcdiv_(mean, square.sqrt().div_(correction2).add_(self.eps), value=-step_size)


def train(model: nn.Module, task: CopyTask, loss_fn, config: TrainConfig = TrainConfig(),
          device=None, progress: bool = True, step=None) -> History:
    """Train ``model`` on fresh batches of ``task`` with AdamW and a short linear warm-up.

    Each step, ``step(model, optimizer, loss_fn, sequences, n)`` (lesson 05's ``train_step``,
    the student's in the notebook) minimises ``loss_fn(model, sequences, n)`` on a new batch of
    sequences, so the model never sees a batch twice; the warm-up sets the optimizer's ``lr``
    before each step. Without ``step``, the course's ``train_step`` is imported when first
    needed (the graded notebook passes the student's: the grader's copy of this module has no
    ``train_step``). Every ``eval_every`` steps it measures held-out sequence
    accuracy (teacher-forced, equal to greedy decoding's) on ``eval_sequences`` sequences from
    another seed, and stops as soon as it reaches ``target_accuracy``. With ``progress`` it shows
    a progress bar, which an early stop completes, and prints ``History.summary()``. On a CPU it
    trains on one thread.
    Lesson: 05_copy_task
    """
    if step is None:
        from .training import train_step as step  # noqa: PLW0406 (see the docstring)
    device = torch.device(device or next(model.parameters()).device)
    model.to(device)
    generator = seeded_generator(config.seed, device)
    optimizer = AdamW(model.parameters(), lr=config.lr)
    held_out = task.batch(config.eval_sequences, seeded_generator(config.seed + 1, device))
    history = History(target=config.target_accuracy)
    bar = tqdm(total=config.max_steps, desc="training", unit="step", disable=not progress)
    start = time.perf_counter()
    with _one_cpu_thread(device):
        for number in range(1, config.max_steps + 1):
            sequences = task.batch(config.batch_size, generator).sequences
            optimizer.lr = config.lr * min(1.0, number / config.warmup_steps)  # linear warm-up
            loss = step(model, optimizer, loss_fn, sequences, task.seq_len)
            history.loss.append(float(loss))
            bar.update()
            if number % config.eval_every == 0 or number == config.max_steps:
                history.eval_steps.append(number)
                history.accuracy.append(teacher_forced_accuracy(model, held_out))
                bar.set_postfix(loss=f"{history.loss[-1]:.3f}",
                                accuracy=f"{history.accuracy[-1]:.1%}")
                if history.reached_target:
                    break
    history.seconds = time.perf_counter() - start
    if history.reached_target:
        _complete(bar)
    elif history.target is not None:
        _missed(bar)
    bar.close()
    if progress:
        print(history.summary())
    return history


@contextmanager
def _one_cpu_thread(device: torch.device):
    """Train on one CPU thread. The matrices of a model this small are not worth
    splitting across cores, and a thread that waits for a core busy with something else stalls
    every step: on a loaded machine two threads train many times slower than one."""
    if device.type != "cpu":
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _missed(bar) -> None:
    """Let a run that missed its target end red (a widget's "danger" style stays after close),
    not green as any bar that ran its total would."""
    if bar.disable:
        return
    bar.colour = "red"
    if hasattr(bar, "container"):  # tqdm.notebook's widget bar
        bar.disp(bar_style="danger")


def _complete(bar) -> None:
    """Let a bar that stops before its total end as complete (green in a notebook), not as an
    interrupted run: its total becomes the steps done; the elapsed time is kept."""
    if bar.disable:
        return
    done, started = bar.n, bar.start_t
    bar.reset(total=done)
    bar.start_t = started
    bar.update(done)
