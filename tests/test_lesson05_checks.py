"""Lesson 05's checks: what they run on the student's side needs none of the lesson's references,
the block check tests the block's forward alone, and the checks explain the slips that the
lesson's exercises make likely."""

import inspect

import pytest
import torch
from check_solutions import (
    AttentionLayerByIsCausal,
    BlockInTwoLines,
    MLPByFunctional,
    failure,
    loss_by_slicing,
)
from torch import nn

from attention_course import model, training
from attention_course.checks import (
    check_copy_task_loss,
    check_decoder_block,
    check_mlp,
    harness,
    lesson05,
)
from attention_course.data import CopyTask
from attention_course.lessons import lesson

# what runs the student's objects, and must work where the lesson's references do not exist
STUDENT_SIDE = (harness.seeded_parameters, harness.SeededModuleUnderTest,
                harness.StandInAttention, harness.StandInMLP, harness.stand_in_block_parts,
                harness.BlockUnderTest, harness.StandInLanguageModel, harness.LossUnderTest,
                harness.HeldOutRun, harness.model_config)


def test_the_registry_names_the_references_the_grader_drops():
    references = {p.reference for p in lesson("05_copy_task").practice if p.reference}
    assert references == {"model.CausalSelfAttention", "model.MLP", "model.DecoderBlock",
                          "training.copy_task_loss"}
    signature = inspect.signature(model.DecoderOnlyTransformer)
    assert signature.parameters["block"].default is inspect.Parameter.empty  # no default block


@pytest.mark.parametrize("part", STUDENT_SIDE, ids=lambda part: part.__name__)
def test_the_students_side_names_no_reference(part):
    source = inspect.getsource(part)
    assert "reference_model" not in source and "training." not in source


def test_the_students_side_runs_without_the_lessons_references(monkeypatch, gen):
    """The grader removes the lesson's references from the student's process: every check's
    student side, the given model and the given training loop still work there."""
    torch.manual_seed(0)
    layer_state = model.CausalSelfAttention(12, 3).state_dict()
    parts = nn.ModuleDict(harness.stand_in_block_parts(12, 2))
    block_state = harness.seeded_parameters(parts, 0).state_dict()
    language_model_state = harness.StandInLanguageModel(6, 8).state_dict()
    for name in ("CausalSelfAttention", "MLP", "DecoderBlock"):
        monkeypatch.delattr(model, name)
    monkeypatch.delattr(training, "copy_task_loss")

    x = torch.randn(2, 5, 12, generator=gen)
    init = {"d_model": 12, "n_heads": 3, "dropout": 0.5}
    out, weights = harness.ModuleUnderTest(AttentionLayerByIsCausal, init, layer_state)(x)
    assert out.shape == (2, 5, 12) and weights.shape == (2, 3, 5, 5)
    mlp = harness.SeededModuleUnderTest(MLPByFunctional, {"d_model": 12, "d_ff": 20},
                                         lesson05.MLP_NAMES, 0)
    assert mlp(x).shape == (2, 5, 12) and set(mlp.probe_parameters()) == set(lesson05.MLP_NAMES)
    block_out, block_weights = harness.BlockUnderTest(BlockInTwoLines, 12, 2, block_state)(x)
    assert block_out.shape == (2, 5, 12) and block_weights.shape == (2, 2, 5, 5)
    sequences = CopyTask(4, 5).batch(3, gen).sequences
    assert harness.LossUnderTest(loss_by_slicing, 6, 8, language_model_state)(sequences, 4) > 0

    task = CopyTask(10, 10)
    trained = model.DecoderOnlyTransformer(task.n_tokens, task.context_len, block=BlockInTwoLines)
    config = training.TrainConfig(max_steps=3, eval_every=3, target_accuracy=None)
    history = training.train(trained, task, loss_by_slicing, config, progress=False)
    assert history.steps == 3
    predicted, sizes, *weights = harness.HeldOutRun(trained, 10, 10, 50)(7)
    assert predicted.shape == (50, 20) and len(weights) == len(trained.state_dict())
    assert sizes.tolist() == [11, 20, 32, 2, 1, 128, 2, 1]


class UnfinishedMLP(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        raise NotImplementedError()


class BlockOfAnUnfinishedMLP(BlockInTwoLines):
    """The notebook's constructor, run with an MLP that is not written yet."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
        nn.Module.__init__(self)
        self.attn_norm = nn.LayerNorm(d_model)
        self.attn = AttentionLayerByIsCausal(d_model, n_heads, dropout)
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp = UnfinishedMLP(d_model, d_ff, dropout)


def test_the_block_check_tests_the_forward_alone(capsys):
    check_decoder_block(BlockOfAnUnfinishedMLP)
    assert capsys.readouterr().out.startswith("ok: DecoderBlock.forward passed")


class MLPInASequential(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x):
        return self.net(x)


def test_an_mlp_with_other_names_is_told_the_contracts_names():
    message = failure(check_mlp, MLPInASequential)
    assert "net.0.weight" in message and "fc.weight, fc.bias, proj.weight, proj.bias" in message


def test_an_unwritten_mlp_constructor_is_not_implemented_yet():
    assert "not implemented yet" in failure(check_mlp, UnfinishedMLP)


def loss_reading_every_token(model_, sequences, n):
    logits = model_(sequences)[:, n:-1]
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), sequences[:, n + 1:].flatten())


def test_a_loss_that_feeds_the_last_token_is_told_what_the_model_reads():
    assert "the model reads 2n tokens" in failure(check_copy_task_loss, loss_reading_every_token)


def test_a_wrong_width_is_recognised_from_the_weights_alone():
    """Seeded weights depend only on a parameter's name and shape: a reference built with the
    student's width gets the student's weights."""
    narrow, wide = model.MLP(12, 20), model.MLP(12, 48)
    harness.seeded_parameters(narrow, 3)
    harness.seeded_parameters(wide, 3)
    again = harness.seeded_parameters(model.MLP(12, 20), 3)
    assert torch.equal(narrow.fc.weight, again.fc.weight)
    assert not torch.equal(narrow.fc.bias, harness.seeded_parameters(model.MLP(12, 20), 4).fc.bias)
    assert wide.fc.weight.shape == (48, 12)

