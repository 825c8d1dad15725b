"""Lesson 05: the copy task, its loss, decoding, accuracy, and a model that really learns it."""

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from oracles import assert_close
from torch import nn

from attention_course.checks import check_copy_accuracy
from attention_course.checks.lesson05 import rebuild_model
from attention_course.data import CopyTask, seeded_generator
from attention_course.model import DecoderOnlyTransformer
from attention_course.training import (
    TrainConfig,
    copy_task_loss,
    evaluate,
    greedy_decode,
    sequence_accuracy,
    teacher_forced_accuracy,
    train,
    train_step,
)

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


def test_same_seed_same_batch():
    task = CopyTask(seq_len=N, vocab_size=V)
    first, again, other = (task.batch(8, seeded_generator(seed)) for seed in (0, 0, 1))
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first.source, other.source)


def test_loss_is_cross_entropy_over_the_answer_only(gen):
    batch = CopyTask(seq_len=N, vocab_size=V).batch(3, gen)
    logits = torch.randn(3, 2 * N, V + 1, generator=gen, dtype=torch.float64)
    terms = [torch.logsumexp(logits[b, t], dim=0) - logits[b, t, batch.targets[b, t]]
             for b in range(3) for t in range(N, 2 * N)]
    assert_close(copy_task_loss(logits, batch.targets, batch.loss_mask), sum(terms) / len(terms))
    changed = logits.clone()
    changed[:, :N] = torch.randn(3, N, V + 1, generator=gen, dtype=torch.float64)
    assert_close(copy_task_loss(changed, batch.targets, batch.loss_mask),
                 copy_task_loss(logits, batch.targets, batch.loss_mask))


class PrefixSumModel(nn.Module):
    """Predicts (sum of the tokens so far) mod V at every position; records its mode."""

    def forward(self, tokens):
        self.mode_seen = self.training
        return F.one_hot(tokens.cumsum(dim=-1) % V, V).float()  # (B, T) -> (B, T, V)


def test_greedy_decode_appends_the_most_likely_token(gen):
    prompt = torch.randint(V, (3, 4), generator=gen)
    expected = []
    for row in prompt.tolist():
        for _ in range(5):
            row.append(sum(row) % V)
        expected.append(row[4:])
    model = PrefixSumModel().train()
    before = prompt.clone()
    assert greedy_decode(model, prompt, 5).tolist() == expected
    assert model.mode_seen is False and model.training  # eval while decoding, then restored
    assert torch.equal(prompt, before)


def test_sequence_accuracy_counts_fully_right_sequences(gen):
    expected = torch.randint(V, (4, 5), generator=gen)
    predicted = expected.clone()
    assert sequence_accuracy(predicted, expected) == 1.0
    predicted[1, 3] = (predicted[1, 3] + 1) % V
    predicted[3, 0] = (predicted[3, 0] + 1) % V
    assert sequence_accuracy(predicted, expected) == 0.5


def test_train_step_returns_the_loss_before_updating():
    task = CopyTask(seq_len=N, vocab_size=V)
    torch.manual_seed(0)
    model = DecoderOnlyTransformer(task.n_tokens, task.context_len)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = task.batch(8, seeded_generator(0))
    expected = copy_task_loss(model(batch.inputs), batch.targets, batch.loss_mask)
    loss = train_step(model, optimizer, batch)
    assert_close(loss, expected.detach())
    assert not loss.requires_grad
    after = copy_task_loss(model(batch.inputs), batch.targets, batch.loss_mask)
    assert after < loss  # one gradient step on this batch lowered its loss


def trained(task: CopyTask, config: TrainConfig) -> nn.Module:
    torch.manual_seed(0)
    model = DecoderOnlyTransformer(task.n_tokens, task.context_len)
    train(model, task, config, progress=False)
    return model


@pytest.mark.slow
def test_teacher_forced_accuracy_equals_greedy_accuracy():
    task = CopyTask(seq_len=10, vocab_size=10)
    config = TrainConfig(max_steps=200, target_accuracy=None, eval_every=200, eval_sequences=10)
    model = trained(task, config)  # partly trained: some sequences right, most wrong
    batch = task.batch(1000, seeded_generator(99))
    greedy = greedy_decode(model, task.prompt(batch.source), task.seq_len)
    accuracy = sequence_accuracy(greedy, task.answer(batch.source))
    assert 0.05 < accuracy < 0.95
    assert math.isclose(teacher_forced_accuracy(model, batch), accuracy)


@functools.cache
def fully_trained(reverse: bool) -> nn.Module:
    """Lesson 05's model trained as the notebook trains it (once per run)."""
    return trained(CopyTask(seq_len=10, vocab_size=10, reverse=reverse), TrainConfig(seed=0))


@pytest.mark.slow
@pytest.mark.parametrize("reverse", [False, True], ids=["copy", "reverse"])
def test_the_model_learns_the_task(reverse):
    task = CopyTask(seq_len=10, vocab_size=10, reverse=reverse)
    # greedy decoding of sequences from a seed training never used (it draws from seeds 0 and 1)
    assert evaluate(fully_trained(reverse), task, 2000, seed=2024) >= 0.99


# ---------------------------------------------------------------- the graded held-out check

@pytest.fixture
def copy_model() -> nn.Module:
    return fully_trained(reverse=False)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_check_copy_accuracy_passes_a_trained_model(copy_model, seed, capsys):
    for mode in (True, False):
        copy_model.train(mode)
        check_copy_accuracy(copy_model, greedy_decode, seed=seed)
        assert capsys.readouterr().out == "ok: copy_accuracy passed 1 check\n"
        assert copy_model.training == mode, "the check left the student's model in another mode"


def test_check_copy_accuracy_fails_an_untrained_model():
    model = DecoderOnlyTransformer(11, 20)
    with pytest.raises(AssertionError, match=r"copies \d+\.\d% of 1000 held-out sequences "
                                             r"exactly; it needs 99%\. Did training reach"):
        check_copy_accuracy(model, greedy_decode)


def test_check_copy_accuracy_measures_the_model_not_only_the_decoding():
    def copies_the_prompt(model, prompt, n_new):  # right answers, without the model
        return prompt[:, :n_new]

    with pytest.raises(AssertionError, match="teacher-forced sequence accuracy"):
        check_copy_accuracy(DecoderOnlyTransformer(11, 20), copies_the_prompt)


@pytest.mark.slow
def test_check_copy_accuracy_accepts_a_longer_position_table(copy_model):
    """A student may give the model more positions than the task needs (max_len > 64)."""
    longer = DecoderOnlyTransformer(11, 200)
    state = copy_model.state_dict()
    table = longer.state_dict()["embed.position"].clone()
    table[:20] = state["embed.position"]
    longer.load_state_dict(state | {"embed.position": table})
    check_copy_accuracy(longer, greedy_decode)


def test_check_copy_accuracy_wants_the_lessons_model():
    with pytest.raises(AssertionError, match="expected the lesson's DecoderOnlyTransformer"):
        check_copy_accuracy(nn.Linear(2, 2), greedy_decode)


def test_a_forged_record_of_huge_sizes_allocates_nothing_before_its_weights_match():
    huge = torch.tensor([1024, 4096, 1024, 64, 1, 8192, 1])  # one layer of 1024 wide, 8192 MLP
    small = DecoderOnlyTransformer(11, 20).state_dict().values()
    with pytest.raises(ValueError, match="is not a tensor of shape"):
        rebuild_model(huge, tuple(small))
