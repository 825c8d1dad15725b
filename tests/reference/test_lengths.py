"""Lesson 06's length experiment (attention_course.lengths): the echo task, what learned positions
learn past the training length, and the experiment showing what the lesson says."""

import pytest
import torch
from torch import nn

from attention_course import lengths
from attention_course.rope import RotaryMultiHeadAttention


def test_echo_targets_are_the_tokens_delay_steps_back(gen):
    tokens, targets = lengths.echo_batch(4, 10, 16, 3, gen)
    assert (targets[:, :3] == lengths.IGNORE).all()
    assert torch.equal(targets[:, 3:], tokens[:, :7])


def test_learned_rows_past_the_training_length_get_no_gradient(gen):
    model = lengths.EchoModel(16, max_len=32, positions="learned")
    tokens, targets = lengths.echo_batch(4, 16, 16, 3, gen)
    loss = nn.functional.cross_entropy(model(tokens).flatten(0, 1), targets.flatten(),
                                       ignore_index=lengths.IGNORE)
    loss.backward()
    assert model.position.grad[16:].abs().max() == 0
    assert model.position.grad[:16].abs().max() > 0


def test_a_model_needs_a_rotary_layer_for_rotary_positions():
    with pytest.raises(ValueError, match="rotary"):
        lengths.EchoModel(16, positions="rotary")
    with pytest.raises(ValueError, match="positions must be"):
        lengths.EchoModel(16, positions="relative")


@pytest.mark.slow
def test_the_lessons_experiment_shows_what_it_says():
    """Lesson 06, section 5: all but "none" learn the training lengths; past them learned
    positions fall to chance, and rotary ones echo best."""
    config = lengths.EchoConfig()
    runs = lengths.length_experiment(RotaryMultiHeadAttention, config)
    L, first = config.train_len, config.delay + 1
    inside = {kind: run.mean_accuracy(first, L) for kind, run in runs.items()}
    beyond = {kind: run.mean_accuracy(L + 1, 2 * L) for kind, run in runs.items()}
    assert inside["none"] < 0.5
    assert all(inside[kind] > 0.99 for kind in ("sinusoidal", "learned", "rotary")), inside
    assert beyond["learned"] < 0.15, beyond
    assert max(beyond, key=beyond.get) == "rotary", beyond
    assert beyond["rotary"] > beyond["sinusoidal"] + 0.1, beyond
    weights = lengths.attention_by_offset(runs["rotary"].model, config)  # (H, 2L)
    assert weights.shape == (config.n_heads, 2 * L)
    torch.testing.assert_close(weights.sum(-1), torch.ones(config.n_heads))
    assert (weights[:, config.delay] > 0.3).all()  # the echo's offset
