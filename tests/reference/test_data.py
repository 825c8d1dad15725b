"""Lesson 05's copy task (attention_course.data): a batch is the prompt then the answer, shifted
by one, and the same seed gives the same batch."""

import pytest
import torch

from attention_course.data import CopyTask, seeded_generator

N, V = 4, 6  # a small task: 4 content tokens from a vocabulary of 6


def answers(source: torch.Tensor, reverse: bool) -> torch.Tensor:
    return torch.tensor([row[::-1] if reverse else row for row in source.tolist()])


@pytest.mark.parametrize("reverse", [False, True])
def test_batch_is_prompt_then_answer_shifted_by_one(reverse):
    task = CopyTask(seq_len=N, vocab_size=V, reverse=reverse)
    batch = task.batch(8, seeded_generator(0))
    assert batch.inputs.shape == batch.targets.shape == batch.loss_mask.shape == (8, 2 * N)
    assert torch.equal(batch.targets[:, :-1], batch.inputs[:, 1:])
    assert torch.equal(batch.inputs[:, :N], batch.source)
    assert (batch.inputs[:, N] == V).all() and (batch.source < V).all()
    assert torch.equal(batch.targets[:, N:], answers(batch.source, reverse))
    assert batch.loss_mask.tolist() == [[t >= N for t in range(2 * N)]] * 8
    assert torch.equal(batch.sequences[:, :-1], batch.inputs)
    assert torch.equal(batch.sequences[:, 1:], batch.targets)


def test_same_seed_same_batch():
    task = CopyTask(seq_len=N, vocab_size=V)
    first, again, other = (task.batch(8, seeded_generator(seed)) for seed in (0, 0, 1))
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first.source, other.source)
