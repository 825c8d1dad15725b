"""Lesson 07's checks: attention computed in one piece is stopped while a whole mask or a padded
input is not, the tiled check hands the grader a harness it can name, and the grader gives full
points to right answers and none to shortcuts or whole matrices. (The lesson's mistakes, slips
and shortcuts as students write them are tested in checks/, with every lesson's.)"""


import pytest
import torch
import torch.nn.functional as F

from attention_course.checks.framework import SESSION, Harnessed, Target
from attention_course.checks.student import harness
from helpers.checking import check_of, failure
from helpers.inputs import bottom_right

NEG_INF = float("-inf")
LESSON = "07_inference_and_scale"


# ---------------------------------------------------------------- whole matrices

def test_attention_in_one_piece_is_stopped_but_a_whole_mask_or_a_padded_input_is_not(capsys):
    def with_a_whole_mask_and_padding(query, key, value, is_causal=False, scale=None,
                                      block_size=64):
        T, S = query.shape[-2], key.shape[-2]
        hidden = torch.ones(T, S, dtype=torch.bool).tril(S - T).logical_not() if is_causal \
            else torch.zeros(T, S, dtype=torch.bool)  # a whole (T, S) mask, in bool
        pad = -S % block_size  # keys and values padded to whole blocks
        key, value = F.pad(key, (0, 0, 0, pad)), F.pad(value, (0, 0, 0, pad))
        return _masked_blocks(query, key, value, F.pad(hidden, (0, pad), value=True), scale,
                              block_size)

    check_of("tiled_attention")(with_a_whole_mask_and_padding)
    assert capsys.readouterr().out.startswith("ok:")
    message = failure(check_of("tiled_attention"), untiled)
    assert 'known mistake: "the whole (T, S) score matrix computed at once"' in message


def _masked_blocks(query, key, value, hidden, scale, block_size):
    dtype, wide = query.dtype, torch.promote_types(query.dtype, torch.float32)
    query, key, value = query.to(wide), key.to(wide), value.to(wide)
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    m, l, acc = torch.full_like(query[..., :1], NEG_INF), 0.0, 0.0
    for start in range(0, key.shape[-2], block_size):
        scores = query @ key[..., start:start + block_size, :].transpose(-2, -1) * scale
        scores = scores.masked_fill(hidden[:, start:start + block_size], NEG_INF)
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        p = torch.exp(scores - m_new)
        l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True)
        acc = acc * torch.exp(m - m_new) + p @ value[..., start:start + block_size, :]
        m = m_new
    return (acc / l).to(dtype), (m + torch.log(l)).squeeze(-1)


def untiled(query, key, value, is_causal=False, scale=None, block_size=64):
    T, S = query.shape[-2], key.shape[-2]
    mask = bottom_right(T, S) if is_causal else None
    scores = query @ key.transpose(-2, -1) * (scale or query.shape[-1] ** -0.5)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    return scores.softmax(-1) @ value, scores.logsumexp(-1)


# ---------------------------------------------------------------- the harness

def test_the_tiled_check_hands_the_grader_a_harness_it_can_name():
    seen = []

    class Recording:
        def run(self, exercise, student, cases, reference, reference_parameters):
            seen.append(student)

    token = SESSION.set(Recording())
    try:
        check_of("tiled_attention")(Target("tiled_attention"))
        check_of("cached_attention")(Target("cached_attention"))
    finally:
        SESSION.reset(token)
    assert isinstance(seen[0], Harnessed) and seen[0].function is harness.WithinBlocks
    assert [a.name for a in seen[0].args] == ["tiled_attention"]
    assert "WithinBlocks" in harness.__all__
    assert isinstance(seen[1], Target)


# ---------------------------------------------------------------- through the real grader

@pytest.mark.slow
def test_the_grader_gives_full_points_to_right_answers_and_none_to_shortcuts_or_whole_matrices():
    from grader.course import read_lesson
    from grader.demo import practice_names, student_notebook
    from helpers.gradebook import grade_notebooks

    lesson = read_lesson(LESSON)
    untiled_body = """
        scores = query @ key.transpose(-2, -1) * (scale or query.shape[-1] ** -0.5)
        if is_causal:
            T, S = scores.shape[-2:]
            scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T),
                                        float("-inf"))
        return torch.softmax(scores, dim=-1) @ value, torch.logsumexp(scores, dim=-1)
        """
    by_torch = """
        if past_key is not None:
            key, value = torch.cat([past_key, key], -2), torch.cat([past_value, value], -2)
        T, S = query.shape[-2], key.shape[-2]
        allowed = torch.ones(T, S, dtype=torch.bool).tril(S - T)
        return F.scaled_dot_product_attention(query, key, value, attn_mask=allowed), key, value
        """
    everything = dict.fromkeys(practice_names(LESSON))  # the instructor's answers
    students = {"correct": everything, "blank": {},
                "untiled": everything | {"tiled_attention": untiled_body},
                "by_torch": everything | {"cached_attention": by_torch}}
    results = grade_notebooks(LESSON, {student: student_notebook(LESSON, answers)
                                       for student, answers in students.items()})
    assert results["correct"].score == lesson.max_score == 17
    assert results["blank"].score == 0
    tiles = {e.grade_id: e for e in results["untiled"].exercises}["check_tiled_attention"]
    assert tiles.points == 0 and tiles.mistake == "the whole (T, S) score matrix computed at once"
    caches = {e.grade_id: e for e in results["by_torch"].exercises}
    assert caches["check_cached_attention"].points == 0
    assert "Shortcut refused" in caches["check_cached_attention"].message
