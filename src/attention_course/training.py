"""Training and evaluating a model on the copy task: masked loss, train step, greedy decoding.

Lesson: 05_copy_task
"""

import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from .data import Batch, CopyTask, seeded_generator


def copy_task_loss(logits: Tensor, targets: Tensor, loss_mask: Tensor) -> Tensor:
    """Mean cross-entropy over the positions where ``loss_mask`` is True (the answer half).

    Args:
        logits: (B, L, V) next-token logits.
        targets: (B, L) next-token ids.
        loss_mask: (B, L) bool, True where the prediction counts.
    Returns:
        scalar loss.
    Lesson: 05_copy_task
    """
    per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, L)
    return per_token[loss_mask].mean()


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch) -> Tensor:
    """One optimisation step on one batch; returns the loss before the update (detached).

    Lesson: 05_copy_task
    """
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = copy_task_loss(model(batch.inputs), batch.targets, batch.loss_mask)
    loss.backward()
    optimizer.step()
    return loss.detach()


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
    """What a training run did: losses per step, evaluations, wall time."""

    loss: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def steps(self) -> int:
        return len(self.loss)


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters of a training run; the defaults learn copying in seconds on a CPU."""

    max_steps: int = 1500
    batch_size: int = 64
    lr: float = 1e-2
    warmup_steps: int = 20
    eval_every: int = 25
    eval_sequences: int = 2000
    target_accuracy: float | None = 0.998
    seed: int = 0


def train(model: nn.Module, task: CopyTask, config: TrainConfig = TrainConfig(),
          device=None, progress: bool = True) -> History:
    """Train ``model`` on fresh batches of ``task`` with AdamW.

    Evaluates held-out sequence accuracy every ``eval_every`` steps and stops early once it
    reaches ``target_accuracy``. Shows a progress bar unless ``progress`` is False.
    Lesson: 05_copy_task
    """
    device = torch.device(device or next(model.parameters()).device)
    model.to(device)
    generator = seeded_generator(config.seed, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    held_out = task.batch(config.eval_sequences, seeded_generator(config.seed + 1, device))
    warmup = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / config.warmup_steps))
    history, losses, start = History(), [], time.perf_counter()
    bar = tqdm(range(1, config.max_steps + 1), disable=not progress, desc="training")
    for step in bar:
        losses.append(train_step(model, optimizer, task.batch(config.batch_size, generator)))
        warmup.step()
        if step % config.eval_every == 0 or step == config.max_steps:
            history.loss.extend(torch.stack(losses).tolist())  # one device sync per evaluation
            losses.clear()
            accuracy = teacher_forced_accuracy(model, held_out)
            history.eval_steps.append(step)
            history.accuracy.append(accuracy)
            bar.set_postfix(loss=f"{history.loss[-1]:.3f}", accuracy=f"{accuracy:.1%}")
            if config.target_accuracy is not None and accuracy >= config.target_accuracy:
                break
    history.seconds = time.perf_counter() - start
    return history
