"""Lesson 05's training (attention_course.training): the copy task's loss, decoding and accuracy,
the given training loop and its progress bar, and a model that really learns the task."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_course.data import CopyTask, seeded_generator
from attention_course.model import DecoderBlock, DecoderOnlyTransformer, RMSNorm, SwiGLU
from attention_course.training import (
    AdamW,
    History,
    TrainConfig,
    copy_task_loss,
    evaluate,
    greedy_decode,
    sequence_accuracy,
    teacher_forced_accuracy,
    train,
    train_step,
)
from helpers.copy_task import fully_trained, lesson_model, trained
from helpers.oracles import assert_close

N, V = 4, 6  # a small task: 4 content tokens from a vocabulary of 6


# ---------------------------------------------------------------- the loss

class Recorder(nn.Module):
    """Random logits that depend on the tokens it reads; remembers what it read."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(V + 1, 2 * N, V + 1, dtype=torch.float64))

    def forward(self, tokens):
        self.read = tokens.clone()
        positions = torch.arange(tokens.shape[1])
        return self.table[tokens, positions]  # (B, L) -> (B, L, V + 1)


def test_loss_is_cross_entropy_of_the_answer_predictions(gen):
    batch = CopyTask(seq_len=N, vocab_size=V).batch(3, gen)
    model = Recorder()
    loss = copy_task_loss(model, batch.sequences, N)
    assert torch.equal(model.read, batch.inputs)  # it reads all but the last token
    logits = model(batch.inputs)
    terms = [torch.logsumexp(logits[b, t], dim=0) - logits[b, t, batch.sequences[b, t + 1]]
             for b in range(3) for t in range(N, 2 * N)]
    assert_close(loss, sum(terms) / len(terms))
    loss.backward()
    assert model.table.grad is not None and model.table.grad.abs().sum() > 0


def test_the_loss_ignores_what_the_prompt_positions_predict(gen):
    batch = CopyTask(seq_len=N, vocab_size=V).batch(3, gen)
    model = Recorder()
    before = copy_task_loss(model, batch.sequences, N)
    with torch.no_grad():
        model.table[:, :N] = torch.randn(V + 1, N, V + 1, generator=gen, dtype=torch.float64)
    assert_close(copy_task_loss(model, batch.sequences, N), before)


# ---------------------------------------------------------------- decoding and accuracy

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


# ---------------------------------------------------------------- the given training loop

def test_the_written_out_adamw_is_torch_adamw(gen):
    task = CopyTask(seq_len=N, vocab_size=V)
    torch.manual_seed(1)
    ours = lesson_model(task, d_model=8).double()
    theirs = copy.deepcopy(ours)
    optimizers = {id(ours): AdamW(ours.parameters(), lr=1e-2),
                  id(theirs): torch.optim.AdamW(theirs.parameters(), lr=1e-2)}
    for _ in range(4):
        sequences = task.batch(8, gen).sequences
        for model in (ours, theirs):
            optimizer = optimizers[id(model)]
            optimizer.zero_grad()
            copy_task_loss(model, sequences, N).backward()
            optimizer.step()
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert_close(a, b)


def test_train_step_is_the_step_written_out(gen):
    """zero_grad, loss, backward, (clip), step: the same parameters as by hand, the loss as a
    float, the model put in training mode, gradients of an earlier step forgotten."""
    task = CopyTask(seq_len=N, vocab_size=V)
    torch.manual_seed(2)
    ours = lesson_model(task, d_model=8, dropout=0.0).double().eval()
    theirs = copy.deepcopy(ours)
    for p in ours.parameters():
        p.grad = torch.ones_like(p)  # stale
    sequences = task.batch(8, gen).sequences
    by_hand = AdamW(theirs.parameters(), lr=1e-2)
    loss = copy_task_loss(theirs, sequences, N)
    loss.backward()
    nn.utils.clip_grad_norm_(theirs.parameters(), 0.5)
    by_hand.step()
    returned = train_step(ours, AdamW(ours.parameters(), lr=1e-2), copy_task_loss, sequences, N,
                          max_norm=0.5)
    assert type(returned) is float and returned == pytest.approx(loss.item())
    assert ours.training
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert_close(a, b)


def test_train_hands_each_batch_to_the_step_it_is_given():
    task = CopyTask(seq_len=N, vocab_size=V)
    seen = []

    def step(model, optimizer, loss_fn, sequences, n):
        seen.append((optimizer.lr, sequences.shape, n))
        return train_step(model, optimizer, loss_fn, sequences, n)

    torch.manual_seed(0)
    config = TrainConfig(max_steps=4, eval_every=4, warmup_steps=2, target_accuracy=None)
    history = train(lesson_model(task), task, copy_task_loss, config, progress=False, step=step)
    assert [lr for lr, _, _ in seen] == [config.lr / 2, config.lr, config.lr, config.lr]
    assert all(shape == (config.batch_size, 2 * N + 1) and n == N for _, shape, n in seen)
    assert len(history.loss) == 4


def test_train_uses_the_given_loss_and_stops_at_max_steps():
    task = CopyTask(seq_len=N, vocab_size=V)
    calls = []

    def loss_fn(model, sequences, n):
        calls.append((sequences.shape, n))
        return copy_task_loss(model, sequences, n)

    torch.manual_seed(0)
    history = train(lesson_model(task), task, loss_fn,
                    TrainConfig(max_steps=7, eval_every=5, target_accuracy=None), progress=False)
    assert calls == [((64, 2 * N + 1), N)] * 7
    assert history.steps == 7 and history.eval_steps == [5, 7] and not history.reached_target
    assert history.summary().startswith("ran 7 steps: held-out sequence accuracy")


def test_an_early_stop_reads_as_success(capsys):
    history = History(loss=[1.0] * 40, eval_steps=[10, 20, 30, 40],
                      accuracy=[0.0, 0.1, 0.9, 1.0], seconds=0.31, target=0.996)
    assert history.reached_target
    assert history.summary() == ("stopped early at step 40: held-out sequence accuracy 100.0% "
                                 "reached the target 99.6% (0.3 s)")
    short = History(loss=[1.0] * 300, eval_steps=[300], accuracy=[0.5], target=0.996)
    assert short.summary().startswith("ran all 300 steps: held-out sequence accuracy 50.0%, "
                                      "below the target 99.6%")


def test_an_early_stop_completes_the_progress_bar(capsys):
    task = CopyTask(seq_len=N, vocab_size=V)
    torch.manual_seed(0)
    history = train(lesson_model(task), task, copy_task_loss,
                    TrainConfig(max_steps=300, target_accuracy=0.0))  # stops at the first eval
    printed = capsys.readouterr()
    assert history.steps == 10 and history.reached_target
    assert "stopped early at step 10" in printed.out
    bar = printed.err.strip().split("\r")[-1]  # the bar's last state, in a terminal
    assert "10/10" in bar and "300" not in bar, bar


def test_in_a_notebook_an_early_stop_ends_the_bar_green_and_full():
    from tqdm.notebook import tqdm

    from attention_course.training import _complete

    stopped, interrupted = tqdm(total=300), tqdm(total=300)
    for bar in (stopped, interrupted):
        bar.update(40)
    _complete(stopped)
    for bar in (stopped, interrupted):
        bar.close()
    widget = stopped.container.children[1]
    assert (widget.bar_style, widget.value, widget.max) == ("success", 40, 40)
    assert interrupted.container.children[1].bar_style == "danger"  # what it would have been


@pytest.mark.slow
def test_teacher_forced_accuracy_equals_greedy_accuracy():
    task = CopyTask(seq_len=10, vocab_size=10)
    config = TrainConfig(max_steps=28, target_accuracy=None, eval_every=28, eval_sequences=10)
    model = trained(task, config)  # partly trained: some sequences right, most wrong
    batch = task.batch(1000, seeded_generator(99))
    greedy = greedy_decode(model, task.prompt(batch.source), task.seq_len)
    accuracy = sequence_accuracy(greedy, task.answer(batch.source))
    assert 0.05 < accuracy < 0.95
    assert math.isclose(teacher_forced_accuracy(model, batch), accuracy)


@pytest.mark.slow
@pytest.mark.parametrize("reverse", [False, True], ids=["copy", "reverse"])
def test_the_model_learns_the_task(reverse):
    task = CopyTask(seq_len=10, vocab_size=10, reverse=reverse)
    # greedy decoding of sequences from a seed training never used (it draws from seeds 0 and 1)
    assert evaluate(fully_trained(reverse), task, 2000, seed=2024) >= 0.99


class ModernBlock(DecoderBlock):
    """Lesson 05's modern block: the pre-norm block with RMSNorm and a SwiGLU MLP at 2/3 of the
    width, as the notebook builds it."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
        super().__init__(d_model, n_heads, d_ff * 2 // 3, dropout, norm=RMSNorm, mlp=SwiGLU)


@pytest.mark.slow
def test_a_model_of_modern_blocks_learns_the_task():
    """What lesson 05 says of it (8 seeds: 30 to 50 steps, the classic block 40 to 50)."""
    task = CopyTask(seq_len=10, vocab_size=10)
    torch.manual_seed(0)
    model = DecoderOnlyTransformer(task.n_tokens, task.context_len, block=ModernBlock,
                                   norm=RMSNorm)
    history = train(model, task, copy_task_loss, TrainConfig(seed=0), progress=False)
    assert history.reached_target and history.steps <= 100
