"""The copy task (and its reverse twin) as next-token prediction.

A sequence x_1..x_n of content tokens, a separator, then the answer: x again (copy) or
reversed (reverse). The model reads ``sequences[:, :-1]`` and predicts ``sequences[:, 1:]``;
only the answer half counts in the loss.

Lesson: 05_copy_task
"""

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor


class Batch(NamedTuple):
    """One batch of the task. Shapes: B sequences, L = 2 * seq_len positions."""

    inputs: Tensor  # (B, L) token ids the model reads
    targets: Tensor  # (B, L) the next token at every position
    loss_mask: Tensor  # (B, L) bool, True where the target belongs to the answer
    source: Tensor  # (B, seq_len) the content tokens x_1..x_n
    sequences: Tensor  # (B, L + 1) the whole sequences: source, separator, answer


@dataclass(frozen=True)
class CopyTask:
    """Copy (or, with ``reverse=True``, reverse) ``seq_len`` tokens drawn from ``vocab_size``.

    Token ids 0..vocab_size-1 are content; ``separator`` = vocab_size marks the answer.
    """

    seq_len: int = 10
    vocab_size: int = 10
    reverse: bool = False

    @property
    def separator(self) -> int:
        return self.vocab_size

    @property
    def n_tokens(self) -> int:
        """Vocabulary size the model needs: the content tokens plus the separator."""
        return self.vocab_size + 1

    @property
    def context_len(self) -> int:
        """Longest input the model reads: source, separator and all but the last answer token."""
        return 2 * self.seq_len

    def answer(self, source: Tensor) -> Tensor:
        """(B, n) source -> (B, n) the tokens the model must produce."""
        return source.flip(-1) if self.reverse else source

    def prompt(self, source: Tensor) -> Tensor:
        """(B, n) source -> (B, n + 1) source followed by the separator."""
        separator = torch.full_like(source[:, :1], self.separator)
        return torch.cat([source, separator], dim=1)

    def batch(self, batch_size: int, generator: torch.Generator | None = None,
              device=None) -> Batch:
        """Draw a batch of random sources (on ``device``, using ``generator`` if given)."""
        if generator is not None:
            device = generator.device
        source = torch.randint(self.vocab_size, (batch_size, self.seq_len),
                               generator=generator, device=device)  # (B, n)
        full = torch.cat([self.prompt(source), self.answer(source)], dim=1)  # (B, 2n + 1)
        positions = torch.arange(self.context_len, device=source.device)  # (2n,)
        loss_mask = (positions >= self.seq_len).expand(batch_size, -1)  # (B, 2n)
        return Batch(full[:, :-1], full[:, 1:], loss_mask, source, full)


def seeded_generator(seed: int, device=None) -> torch.Generator:
    """A random generator on ``device`` (CPU by default) with a fixed seed."""
    return torch.Generator(device=device or "cpu").manual_seed(seed)
