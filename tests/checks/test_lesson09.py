"""Lesson 09's checks beyond the tables of helpers/answers: the answers that pass decode a long
stream exactly as attention over it under the window-plus-sinks mask; the checks hand the
grader plain targets; the demo class's planted mistakes are named; the "Stuck?" path works."""

import textwrap

import pytest
import torch

from attention_course import attention, streaming
from attention_course.checks.framework import SESSION, Target
from attention_course.rope import apply_rotary, rotary_angles
from helpers.answers import lesson09
from helpers.checking import check_of, failure, named_mistakes

NAMES = ("sliding_window_mask", "rolling_cache_attention", "rolling_rotary_attention",
         "streaming_llm_attention", "sink_attention")


def decode(step, q, k, v, **settings):
    outs, past_key, past_value = [], None, None
    for s in range(q.shape[-2]):
        where = {"start": s} if "start" in step.__code__.co_varnames else {}
        out, past_key, past_value = step(q[..., s:s + 1, :], k[..., s:s + 1, :],
                                         v[..., s:s + 1, :], past_key, past_value, **where,
                                         **settings)
        outs.append(out)
        assert past_key.shape[-2] <= settings["n_sinks"] + settings["window"] - 1
    return torch.cat(outs, dim=-2)


@pytest.mark.parametrize("student", lesson09.CORRECT["rolling_cache_attention"])
def test_answers_that_pass_decode_a_long_stream_like_full_attention(student):
    """The issue's test: token for token over a stream 8 times the cache (window 5, 3 sinks),
    the rolling cache's outputs are attention over the whole stream under the mask."""
    g = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(2, 2, 56, 4, generator=g, dtype=torch.float64) for _ in range(3))
    expected, _ = attention.scaled_dot_product_attention(
        q, k, v, attn_mask=streaming.sliding_window_mask(56, 56, 5, 3))
    torch.testing.assert_close(decode(student, q, k, v, window=5, n_sinks=3), expected)


@pytest.mark.parametrize("student", lesson09.CORRECT["rolling_rotary_attention"])
def test_rotary_answers_that_pass_decode_like_rotary_attention_over_the_stream(student):
    g = torch.Generator().manual_seed(10)
    q, k, v = (torch.randn(1, 2, 48, 8, generator=g, dtype=torch.float64) for _ in range(3))
    angles = rotary_angles(48, 8, dtype=torch.float64)
    expected, _ = attention.scaled_dot_product_attention(
        apply_rotary(q, angles), apply_rotary(k, angles), v,
        attn_mask=streaming.sliding_window_mask(48, 48, 4, 2))
    torch.testing.assert_close(decode(student, q, k, v, window=4, n_sinks=2), expected)


def test_the_checks_hand_the_grader_plain_targets():
    seen = []

    class Recording:
        def run(self, exercise, student, cases, reference, reference_parameters):
            seen.append((exercise.name, student))

    token = SESSION.set(Recording())
    try:
        for name in NAMES:
            check_of(name)(Target(name))
    finally:
        SESSION.reset(token)
    assert [name for name, _ in seen] == list(NAMES)
    assert all(isinstance(student, Target) for _, student in seen)


SIGNATURES = {
    "sliding_window_mask": "(T, S, window, n_sinks=0, device=None)",
    "rolling_cache_attention": "(query, key, value, past_key=None, past_value=None, *, window, "
                               "n_sinks=0)",
    "rolling_rotary_attention": "(query, key, value, past_key=None, past_value=None, *, start, "
                                "window, n_sinks=0, base=10000.0)",
    "streaming_llm_attention": "(query, key, value, past_key=None, past_value=None, *, window, "
                               "n_sinks=0, base=10000.0)",
    "sink_attention": "(query, key, value, sink, attn_mask=None, scale=None)",
}


@pytest.mark.parametrize("name", NAMES)
def test_the_demo_class_mistake_is_named(name):
    """grader/demo.py's planted body for the exercise, the other exercises right."""
    from grader.demo import MISTAKES

    body, mistake = MISTAKES[name]
    namespace = {"torch": torch, "rotary_angles": rotary_angles, "apply_rotary": apply_rotary,
                 "scaled_dot_product_attention": attention.scaled_dot_product_attention,
                 "sliding_window_mask": lesson09.window_by_comparisons,
                 "rolling_cache_attention": lesson09.rolling_by_hand}
    exec(f"def {name}{SIGNATURES[name]}:\n" + textwrap.indent(textwrap.dedent(body), "    "),
         namespace)
    named = named_mistakes(failure(check_of(name), namespace[name]))
    assert len(named) == 1 and mistake in named[0]


def test_the_reference_rolling_cache_may_be_called_by_the_rotary_exercise(capsys):
    """A student stuck on the rolling cache imports the course's (the Stuck? path): the rotary
    exercises may call it, as every exercise may call earlier ones."""
    check_of("rolling_rotary_attention")(lesson09.rotary_with_rotate_pairs)
    assert capsys.readouterr().out.startswith("ok:")


def test_a_ring_buffer_in_slot_order_fails():
    """Overwriting the oldest recent slot in place keeps the right tokens in the wrong order;
    the contract's order (sinks, then the recent tokens by position) is what the next step's
    mask relies on, so the check fails the returned keys."""
    def ring(query, key, value, past_key=None, past_value=None, *, window, n_sinks=0):
        out, keys, values = lesson09.rolling_by_hand(query, key, value, past_key, past_value,
                                                     window=window, n_sinks=n_sinks)
        if keys.shape[-2] == n_sinks + window - 1 and window > 2:
            keys = torch.cat([keys[..., :n_sinks, :], keys[..., -1:, :],
                              keys[..., n_sinks:-1, :]], dim=-2)
        return out, keys, values
    assert "rolling_cache_attention: `keys` has wrong values" in failure(
        check_of("rolling_cache_attention"), ring)


@pytest.mark.slow
def test_the_grader_gives_full_points_to_right_answers_and_refuses_torch_attention():
    """Through the grader's sandbox: the instructor's answers get the lesson's 11 points, a
    blank notebook none, a rolling cache calling F.scaled_dot_product_attention is refused,
    and the demo class's mistakes, planted one at a time, are named."""
    from grader.course import read_lesson
    from grader.demo import MISTAKES as DEMO_MISTAKES
    from grader.demo import practice_names, student_notebook
    from helpers.gradebook import grade_notebooks

    lesson_id = "09_sliding_windows"
    lesson = read_lesson(lesson_id)
    by_torch = """
        if past_key is not None:
            key = torch.cat([past_key, key], dim=-2)
            value = torch.cat([past_value, value], dim=-2)
        mask = sliding_window_mask(query.shape[-2], key.shape[-2], window, n_sinks)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
        S, keep = key.shape[-2], window - 1
        if S > n_sinks + keep:
            key = torch.cat([key[..., :n_sinks, :], key[..., S - keep:, :]], dim=-2)
            value = torch.cat([value[..., :n_sinks, :], value[..., S - keep:, :]], dim=-2)
        return out, key, value
        """
    everything = dict.fromkeys(practice_names(lesson_id))  # the instructor's answers
    students = {"correct": everything, "blank": {},
                "torch": everything | {"rolling_cache_attention": by_torch},
                **{f"demo-{name}": everything | {name: DEMO_MISTAKES[name][0]}
                   for name in practice_names(lesson_id)}}
    results = grade_notebooks(lesson_id, {student: student_notebook(lesson_id, answers)
                                          for student, answers in students.items()})
    assert results["correct"].score == lesson.max_score == 11
    assert results["blank"].score == 0
    refused = {e.grade_id: e for e in results["torch"].exercises}["check_rolling_cache_attention"]
    assert refused.points == 0 and refused.mistake == "shortcut", refused.message
    for name in practice_names(lesson_id):
        exercise = {e.grade_id: e for e in results[f"demo-{name}"].exercises}[f"check_{name}"]
        assert exercise.points == 0 and DEMO_MISTAKES[name][1] in (exercise.mistake or ""), \
            exercise.message

