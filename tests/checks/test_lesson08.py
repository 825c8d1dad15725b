"""Lesson 08's checks beyond the tables of helpers/answers: slow and memory-hungry
answers that are right pass (the lesson measures them instead); the tiled checks hand the
grader a harness it can name; and the grader gives full points to the instructor's answers and
none to a tiled backward pass in one piece, and names the demo class's mistakes."""


import pytest

from attention_course import flash
from attention_course.checks import lesson08
from attention_course.checks.framework import SESSION, Harnessed, Target
from attention_course.checks.student import harness
from helpers.answers.lesson08 import (
    IdentityFunction,
    flash_saving_the_weights,
    forward_with_lse,
    function_whose_backward_is,
    tiled_backward_every_block,
)
from helpers.checking import check_of, failure

LESSON = "08_flash_backward"


@pytest.mark.parametrize(("name", "student"), [("flash_backward", tiled_backward_every_block),
                                               ("flash_attention", flash_saving_the_weights)])
def test_right_but_slow_or_memory_hungry_answers_pass(name, student, capsys):
    """Computing the hidden tiles, or saving every tile's weights, gives the right gradients:
    the lesson shows what they cost, the check does not fail them."""
    check_of(name)(student)
    assert capsys.readouterr().out.startswith("ok:")


def autograd_through_a_tiled_forward(query, key, value, is_causal=False, scale=None,
                                     block_size=64):
    """No Function at all: autograd differentiates the tiled loop (tiles only, right numbers)."""
    out, lse = forward_with_lse(query, key, value, is_causal, scale, block_size)
    return out, lse.detach()


def a_function_of_the_tiled_forward(query, key, value, is_causal=False, scale=None,
                                    block_size=64):
    """A Function whose backward passes the gradient on unchanged, applied to the output of a
    differentiable tiled forward: autograd's backward of the loop does the work."""
    out, lse = forward_with_lse(query, key, value, is_causal, scale, block_size)
    return IdentityFunction.apply(out), lse.detach()


@pytest.mark.parametrize("student", [autograd_through_a_tiled_forward,
                                     a_function_of_the_tiled_forward])
def test_a_backward_autograd_derives_from_the_forward_is_refused(student):
    """The gradients must come from the student's Function applied to the inputs themselves."""
    assert "does not come straight from your Function's apply" in failure(
        check_of("flash_attention"), student)


def test_the_reference_flash_backward_is_allowed_in_the_functions_backward(capsys):
    """A student stuck on exercise 2 imports the course's flash_backward (the Stuck? path):
    the Function's backward may call it, as every exercise may call earlier ones."""
    def backward(ctx, dout):
        return flash.flash_backward(*ctx.saved_tensors, dout, *ctx.settings)
    check_of("flash_attention")(function_whose_backward_is("flash_attention", backward))
    assert capsys.readouterr().out.startswith("ok:")


def test_the_tiled_checks_hand_the_grader_a_harness_it_can_name():
    seen = []

    class Recording:
        def run(self, exercise, student, cases, reference, reference_parameters):
            seen.append(student)

    token = SESSION.set(Recording())
    try:
        for name in ("attention_backward", "flash_backward", "flash_attention"):
            check_of(name)(Target(name))
    finally:
        SESSION.reset(token)
    assert isinstance(seen[0], Target)
    assert isinstance(seen[1], Harnessed) and seen[1].function is harness.WithinBlocks
    # the Function's forward and backward, both run inside the watched call
    assert isinstance(seen[2], Harnessed) and seen[2].function is harness.ForwardAndBackward


@pytest.mark.slow
def test_the_grader_gives_full_points_to_right_answers_and_none_to_a_backward_in_one_piece():
    from grader.course import read_lesson
    from grader.demo import MISTAKES as DEMO_MISTAKES
    from grader.demo import practice_names, student_notebook
    from helpers.gradebook import grade_notebooks

    lesson = read_lesson(LESSON)
    in_one_piece = """
        T, S = query.shape[-2], key.shape[-2]
        scale = query.shape[-1] ** -0.5 if scale is None else scale
        p = torch.exp(query @ key.transpose(-2, -1) * scale - lse[..., None])
        if is_causal:
            p = p.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T), 0.0)
        ds = p * (dout @ value.transpose(-2, -1) - (dout * out).sum(-1, keepdim=True))
        return ds @ key * scale, ds.transpose(-2, -1) @ query * scale, p.transpose(-2, -1) @ dout
        """
    everything = dict.fromkeys(practice_names(LESSON))  # the instructor's answers
    students = {"correct": everything, "blank": {},
                "one_piece": everything | {"flash_backward": in_one_piece},
                **{f"demo-{name}": everything | {name: DEMO_MISTAKES[name][0]}
                   for name in practice_names(LESSON)}}
    results = grade_notebooks(LESSON, {student: student_notebook(LESSON, answers)
                                       for student, answers in students.items()})
    assert results["correct"].score == lesson.max_score == 11
    assert results["blank"].score == 0
    tiles = {e.grade_id: e for e in results["one_piece"].exercises}["check_flash_backward"]
    assert tiles.points == 0 and tiles.mistake == "the whole (T, S) matrix computed at once"
    for name in practice_names(LESSON):  # the demo class's mistakes, one at a time, named
        exercise = {e.grade_id: e for e in results[f"demo-{name}"].exercises}[f"check_{name}"]
        assert exercise.points == 0 and DEMO_MISTAKES[name][1] in (exercise.mistake or ""), \
            exercise.message


@pytest.mark.slow
def test_the_grader_refuses_autograd_and_names_slips_inside_the_functions_backward():
    """The Function's backward pass runs inside the watched call in the student's process
    too: torch.autograd.grad through attention in one piece there is refused, and a slip of
    the backward pass alone is named."""
    from grader.demo import practice_names, student_notebook
    from helpers.gradebook import grade_notebooks

    given = "dq, dk, dv = flash_backward(query, key, value, out, lse, dout, *ctx.settings)"
    backwards = {
        "autograd": """with torch.enable_grad():
            q, k, v = (x.detach().requires_grad_() for x in (query, key, value))
            weights = torch.exp(q @ k.transpose(-2, -1) * query.shape[-1] ** -0.5)
            o = weights / weights.sum(-1, keepdim=True) @ v
            dq, dk, dv = torch.autograd.grad(o, (q, k, v), dout)""",
        "no_scale": "dq, dk, dv = flash_backward(query, key, value, out, lse, dout, "
                    "ctx.settings[0], None, ctx.settings[2])",
    }
    notebooks = {}
    for student, body in backwards.items():
        notebook = student_notebook(LESSON, dict.fromkeys(practice_names(LESSON)))
        cell = next(c for c in notebook.cells if "class FlashAttention(" in c.source)
        assert given in cell.source
        cell.source = cell.source.replace(given, body)
        notebooks[student] = notebook
    results = grade_notebooks(LESSON, notebooks)
    verdicts = {student: {e.grade_id: e for e in result.exercises}["check_flash_attention"]
                for student, result in results.items()}
    assert verdicts["autograd"].points == 0 and verdicts["autograd"].mistake == "shortcut", \
        verdicts["autograd"].message
    assert "torch.autograd.grad" in verdicts["autograd"].message
    assert verdicts["no_scale"].points == 0
    assert verdicts["no_scale"].mistake == lesson08.BACKWARD_IGNORES_SCALE.name, \
        verdicts["no_scale"].message
