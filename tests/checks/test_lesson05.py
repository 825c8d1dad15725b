"""Lesson 05's checks: what they run on the student's side needs none of the lesson's references,
the block and model checks test their own exercise alone, the checks explain the slips that the
lesson's exercises make likely, and the graded held-out check passes a trained model of the
lesson's block (in the student's own model class) and nothing else."""

import inspect
import json

import pytest
import torch
from torch import nn

from attention_course import model, training
from attention_course.checks import (
    check_copy_accuracy,
    check_copy_task_loss,
    check_decoder_block,
    check_mlp,
    lesson05,
)
from attention_course.checks.lesson05 import rebuild_model
from attention_course.checks.student import harness
from attention_course.data import CopyTask
from attention_course.lessons import lesson
from attention_course.model import DecoderBlock, DecoderOnlyTransformer
from attention_course.training import TrainConfig, copy_task_loss, train
from grader.demo import MISTAKES as DEMO_MISTAKES
from grader.demo import practice_names, student_notebook
from helpers.answers.lesson05 import (
    BlockByTrilAndModules,
    BlockLikeTheLesson,
    MLPByFunctional,
    ModelLikeTheLesson,
    loss_by_slicing,
    step_like_the_lesson,
)
from helpers.checking import failure
from helpers.copy_task import fully_trained, lesson_model
from helpers.gradebook import read_course
from helpers.oracles import assert_close

# what runs the student's objects, and must work where the lesson's references do not exist
STUDENT_SIDE = (harness.seeded_parameters, harness.SeededModuleUnderTest, harness.SettingsUnderTest,
                harness.StandInAttention, harness.StandInMLP, harness.stand_in_block_parts,
                harness.BlockUnderTest, harness.StandInBlockMLP, harness.WholeBlockUnderTest,
                harness.StandInLanguageModel, harness.LossUnderTest,
                harness.HeldOutRun, harness.model_config, harness.StandInBlock,
                harness.StandInNorm, harness.ModelUnderTest, harness.RecordingLanguageModel,
                harness.StandInOptimizer, harness.stand_in_loss, harness.TrainStepUnderTest)


def test_the_registry_names_the_references_the_grader_drops():
    references = {p.reference for p in lesson("05_copy_task").practice if p.reference}
    assert references == {"model.MLP", "model.DecoderBlock",
                          "model.DecoderOnlyTransformer", "training.copy_task_loss",
                          "training.train_step", "model.RMSNorm"}
    signature = inspect.signature(model.DecoderOnlyTransformer)
    assert signature.parameters["block"].default is inspect.Parameter.empty  # no default block


@pytest.mark.parametrize("part", STUDENT_SIDE, ids=lambda part: part.__name__)
def test_the_students_side_names_no_reference(part):
    source = inspect.getsource(part)
    assert "reference_model" not in source and "training." not in source
    assert "import DecoderOnlyTransformer" not in source  # an exercise: absent under the grader


def test_the_students_side_runs_without_the_lessons_references(monkeypatch, gen):
    """The grader removes the lesson's references from the student's process: every check's
    student side, the given model and the given training loop still work there."""
    torch.manual_seed(0)
    block_init = {"d_model": 12, "n_heads": 2, "d_ff": 20, "dropout": 0.5}
    block_state = model.DecoderBlock(**block_init, norm=harness.StandInNorm,
                                     mlp=harness.StandInBlockMLP).state_dict()
    language_model_state = harness.StandInLanguageModel(6, 8).state_dict()
    configs = {"two": {"vocab_size": 7, "max_len": 9, "d_model": 12, "n_heads": 2,
                       "n_layers": 2}}
    model_state = model.DecoderOnlyTransformer(**configs["two"],
                                               block=harness.StandInBlock).state_dict()
    step_state = harness.StandInLanguageModel(6, 8).state_dict()
    for name in ("CausalSelfAttention", "MLP", "DecoderBlock", "DecoderOnlyTransformer",
                 "RMSNorm", "SwiGLU"):
        monkeypatch.delattr(model, name)
    monkeypatch.delattr(training, "copy_task_loss")
    monkeypatch.delattr(training, "train_step")

    x = torch.randn(2, 5, 12, generator=gen)
    mlp = harness.SettingsUnderTest(MLPByFunctional, {"d_model": 12, "d_ff": 20}, "gated",
                                    ((False, lesson05.MLP_NAMES), (True, lesson05.SWIGLU_NAMES)),
                                    0)
    assert mlp(x, gated=True).shape == (2, 5, 12)
    assert set(mlp.probe_parameters()) == set(lesson05.SWIGLU_NAMES)
    assert mlp(x, gated=False).shape == (2, 5, 12)
    assert set(mlp.probe_parameters()) == set(lesson05.MLP_NAMES)
    block_out, block_weights = harness.WholeBlockUnderTest(BlockLikeTheLesson, block_init,
                                                           "stand-in", block_state)(x)
    assert block_out.shape == (2, 5, 12) and block_weights.shape == (2, 2, 5, 5)
    sequences = CopyTask(4, 5).batch(3, gen).sequences
    assert harness.LossUnderTest(loss_by_slicing, 6, 8, language_model_state)(sequences, 4) > 0

    tokens = torch.randint(7, (2, 5), generator=gen)
    logits, weights = harness.ModelUnderTest(ModelLikeTheLesson, configs, {"two": model_state})(
        tokens, "two", return_attention=True)
    assert logits.shape == (2, 5, 7) and weights.shape == (2, 2, 2, 5, 5)
    losses, floats, modes, _ = harness.TrainStepUnderTest(step_like_the_lesson, 6, 8,
                                                          step_state)(sequences, sequences, 4)
    assert floats.all() and modes.all() and losses.isfinite().all()

    task = CopyTask(10, 10)
    trained = ModelLikeTheLesson(task.n_tokens, task.context_len, block=BlockLikeTheLesson)
    config = training.TrainConfig(max_steps=3, eval_every=3, target_accuracy=None)
    history = training.train(trained, task, loss_by_slicing, config, progress=False,
                             step=step_like_the_lesson)
    assert history.steps == 3
    predicted, sizes, *weights = harness.HeldOutRun(trained, 10, 10, 50)(7)
    assert predicted.shape == (50, 20) and len(weights) == len(trained.state_dict())
    assert sizes.tolist() == [11, 20, 32, 2, 1, 128, 2, 1]


class UnfinishedMLP(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, gated=False):
        super().__init__()
        raise NotImplementedError()


class BlockOfAnUnfinishedMLP(BlockLikeTheLesson):
    """The student's block, whose default MLP class is one not written yet."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, *, norm=nn.LayerNorm,
                 mlp=UnfinishedMLP):
        super().__init__(d_model, n_heads, d_ff, dropout, norm=norm, mlp=mlp)


def test_the_block_check_does_not_need_the_mlp(capsys):
    check_decoder_block(BlockOfAnUnfinishedMLP)
    assert capsys.readouterr().out.startswith("ok: DecoderBlock passed")


class MLPInASequential(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, gated=False):
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


# ---------------------------------------------------------------- the graded held-out check

@pytest.fixture
def copy_model() -> nn.Module:
    return fully_trained(reverse=False)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_check_copy_accuracy_passes_a_trained_model(copy_model, seed, capsys):
    for mode in (True, False):
        copy_model.train(mode)
        check_copy_accuracy(copy_model, seed=seed)
        assert capsys.readouterr().out == "ok: copy_accuracy passed 1 check\n"
        assert copy_model.training == mode, "the check left the student's model in another mode"


def test_check_copy_accuracy_fails_an_untrained_model():
    with pytest.raises(AssertionError, match=r"copies \d+\.\d% of 1000 held-out sequences "
                                             r"exactly; it needs 99%\. Look at the loss first"):
        check_copy_accuracy(lesson_model())


class PostNormBlock(DecoderBlock):
    """Trains well, but is not the lesson's block: the same weights in a pre-norm block copy
    fewer sequences (80% with seeds 1, 98% with seeds 0: too close to 99% to test on)."""

    def forward(self, x):
        attended, weights = self.attn(x, x, x, is_causal=True)
        x = self.attn_norm(x + attended)
        return self.mlp_norm(x + self.mlp(x)), weights


class BlockThatReadsAhead(DecoderBlock):
    """Without the causal mask, position t reads the token it must predict, at t + 1: measured
    one forward pass over the true sequences, it copies everything, and would decode nothing."""

    def forward(self, x):
        normed = self.attn_norm(x)
        attended, weights = self.attn(normed, normed, normed)
        x = x + attended
        return x + self.mlp(self.mlp_norm(x)), weights


@pytest.mark.slow
@pytest.mark.parametrize("block", [PostNormBlock, BlockThatReadsAhead],
                         ids=["post-norm", "reads ahead"])
def test_check_copy_accuracy_runs_the_weights_through_the_lessons_block(block):
    task = CopyTask(seq_len=10, vocab_size=10)
    torch.manual_seed(1)
    model = DecoderOnlyTransformer(task.n_tokens, task.context_len, block=block)
    history = train(model, task, copy_task_loss, TrainConfig(max_steps=600, seed=1),
                    progress=False)
    assert history.reached_target
    with pytest.raises(AssertionError, match=r"in the course's pre-norm block the model copies "
                                             r"\d+\.\d% .* \(in yours: \d+\.\d%\): your "
                                             r"DecoderBlock computes something else"):
        check_copy_accuracy(model)


@pytest.mark.slow
def test_check_copy_accuracy_accepts_a_longer_position_table(copy_model):
    """A student may give the model more positions than the task needs (max_len > 64)."""
    longer = DecoderOnlyTransformer(11, 200, block=DecoderBlock)
    state = copy_model.state_dict()
    table = longer.state_dict()["embed.position"].clone()
    table[:20] = state["embed.position"]
    longer.load_state_dict(state | {"embed.position": table})
    check_copy_accuracy(longer)


def test_check_copy_accuracy_wants_the_lessons_model():
    with pytest.raises(AssertionError, match="expected the lesson's DecoderOnlyTransformer"):
        check_copy_accuracy(nn.Linear(2, 2))


@pytest.mark.slow
def test_check_copy_accuracy_passes_the_students_own_model_class(capsys):
    """The student's DecoderOnlyTransformer, trained with the student's step, is graded as the
    course's is: its sizes are read from its parts, its weights rebuilt in the course's model."""
    task = CopyTask(seq_len=10, vocab_size=10)
    torch.manual_seed(0)
    own = ModelLikeTheLesson(task.n_tokens, task.context_len, block=BlockLikeTheLesson)
    history = train(own, task, loss_by_slicing, TrainConfig(seed=0), progress=False,
                    step=step_like_the_lesson)
    assert history.reached_target
    check_copy_accuracy(own)
    assert capsys.readouterr().out == "ok: copy_accuracy passed 1 check\n"


def test_train_without_a_step_uses_the_courses():
    task = CopyTask(10, 10)
    torch.manual_seed(0)
    config = TrainConfig(max_steps=2, eval_every=2, target_accuracy=None)
    history = train(lesson_model(task), task, copy_task_loss, config, progress=False)
    assert history.steps == 2 and all(isinstance(loss, float) for loss in history.loss)


def test_a_forged_record_of_large_sizes_allocates_nothing_before_its_weights_match():
    large = torch.tensor([64, 256, 128, 16, 1, 512, 2, 1])  # a large model it grades
    small = lesson_model().state_dict().values()
    with pytest.raises(ValueError, match="is not a tensor of shape"):
        rebuild_model(large, tuple(small))


@pytest.mark.parametrize("key", ["vocab_size", "max_len", "d_model", "n_layers", "d_ff"])
def test_a_record_of_a_model_larger_than_the_lesson_grades_is_refused_before_it_is_built(key):
    """The grader rebuilds and runs the student's model in its own process: its sizes are
    bounded first (a forged record of a 1024-wide, 16-layer model once cost it 1.9 GB)."""
    from attention_course.checks.student.harness import CONFIG

    sizes = dict.fromkeys(CONFIG, 1) | {"vocab_size": 11, "max_len": 21, "d_model": 32,
                                       "n_heads": 2, "d_ff": 128}
    sizes[key] = 10_000
    with pytest.raises(ValueError, match=f"lesson 05 grades models of {key}"):
        rebuild_model(torch.tensor([sizes[k] for k in CONFIG]), ())


@pytest.mark.parametrize("positions", ["sinusoidal", "none"])
def test_the_record_rebuilds_every_kind_of_model(positions, gen):
    from attention_course.checks.student.harness import CONFIG, model_config

    torch.manual_seed(0)
    model = lesson_model(positions=positions, scale_tokens=False, n_heads=4).eval()
    sizes = model_config(model)
    state = model.state_dict()
    rebuilt = rebuild_model(torch.tensor([sizes[key] for key in CONFIG]),
                            tuple(state[name] for name in sorted(state)))
    tokens = torch.randint(11, (2, 20), generator=gen)
    with torch.no_grad():
        assert_close(rebuilt(tokens), model(tokens))


def test_the_record_does_not_depend_on_the_order_the_parts_were_built_in(gen):
    """The student writes the block's constructor: parts built in another order than the
    course's (the MLP first, then attention, then both norms) are rebuilt where they belong."""
    torch.manual_seed(0)
    course = lesson_model().eval()
    with torch.no_grad():  # norms of their own, so that swapping them would show
        for parameter in course.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=gen))
    task = CopyTask(10, 10)
    theirs = ModelLikeTheLesson(task.n_tokens, task.context_len, block=BlockByTrilAndModules)
    theirs.load_state_dict(course.state_dict())
    assert list(theirs.state_dict()) != list(course.state_dict())
    predicted, sizes, *weights = harness.HeldOutRun(theirs, 10, 10, 50)(7)
    rebuilt = rebuild_model(sizes, tuple(weights))
    tokens = torch.randint(11, (2, 20), generator=gen)
    with torch.no_grad():
        assert_close(rebuilt(tokens), course(tokens))


# ---------------------------------------------------------------- a run that did not learn

def test_a_run_that_did_not_learn_ends_red_and_says_to_look_at_the_loss():
    from tqdm.notebook import tqdm as notebook_bar

    from attention_course.training import History, _missed

    zero = History(loss=[0.0] * 20, eval_steps=[20], accuracy=[0.0], target=0.998)
    flat = History(loss=[2.55] * 20, eval_steps=[20], accuracy=[0.0], target=0.998)
    assert "though the loss is 0.000" in zero.summary() and "look at the loss" in zero.summary()
    assert "It did not learn: the loss stayed at 2.550" in flat.summary()
    bar = notebook_bar(total=20, disable=False)
    bar.update(20)
    _missed(bar)
    bar.close()  # a bar that ran its total would end green ("success")
    assert bar.container.children[1].bar_style == "danger"


@pytest.mark.slow
def test_the_grader_gives_full_points_none_and_names_the_mistakes(graded_class):
    """Through the grader's sandbox (where the lesson's references are gone): a correct
    submission gets every point, a blank one none, and the demo class's planted mistakes are
    named (the held-out check then fails too: a model of mistaken parts)."""
    lesson_name = "05_copy_task"
    names = practice_names(lesson_name)
    notebooks = {"correct": student_notebook(lesson_name, dict.fromkeys(names)),
                 "blank": student_notebook(lesson_name, {}),
                 "mistaken": student_notebook(
                     lesson_name, {name: DEMO_MISTAKES[name][0] for name in names})}
    workspace = graded_class("lesson05", submitted={
        (student, lesson_name): (notebook, None) for student, notebook in notebooks.items()},
        grade=("--lesson", lesson_name, "--workers", "1", "--cell-timeout", "20"),
        command_line=True)
    results = {student: json.loads(workspace.result_file(student, lesson_name).read_text())
               for student in notebooks}
    course = read_course()[lesson_name]
    assert course.points == [("check_mlp", 4), ("check_decoder_block", 5),
                             ("check_decoder_only_transformer", 4),
                             ("check_copy_task_loss", 2), ("check_train_step", 3),
                             ("check_copy_accuracy", 3), ("check_rms_norm", 2)]
    assert (results["correct"]["outcome"], results["correct"]["score"]) == \
        ("graded", course.max_score), results["correct"]
    assert (results["blank"]["outcome"], results["blank"]["score"]) == ("graded", 0.0)
    assert results["mistaken"]["score"] == 0.0
    for exercise in results["mistaken"]["exercises"]:
        name = exercise["grade_id"].removeprefix("check_")
        if name in DEMO_MISTAKES:
            assert DEMO_MISTAKES[name][1] in exercise["mistake"], exercise
