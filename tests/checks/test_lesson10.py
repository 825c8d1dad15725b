"""Lesson 10's checks beyond the tables of helpers/answers: the absorbed check stops any
per-head keys or values (an einsum, a loop over heads, a token at a time or into a buffer
included), in the prompt's case too, and lets a query's copy through; the layer check decodes
with the student's own cache, names a right layer whose cache is too large or breaks the
contract (rotary keys off their positions, or not rotated) and tells one whose cache is not
the contract's pair; the checks refuse their own wrong variants (the references with no knob
set) and hand the grader a harness it can name; and the grader gives
full points to the instructor's answers, none to a naive form in the absorbed exercise, and
names the demo class's mistakes."""


import pytest
import torch

from attention_course.checks import lesson10
from attention_course.checks.framework import SESSION, Harnessed, Target
from attention_course.checks.student import harness
from helpers.answers.lesson10 import (
    LatentNaive,
    LatentRememberingOnItsCache,
    absorbed_in_two_chunks,
    absorbed_token_by_token,
    future,
    layer_student,
    naive_by_matrices,
)
from helpers.checking import check_of, failure, named_mistakes

LESSON = "10_latent_attention"


def absorbed_keys_by_einsum(query, latent, w_uk, w_uv, scale=None):
    """Right numbers; the keys built by an einsum, laid out (B, S, H, D)."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    keys = torch.einsum("...sc,hcd->...shd", latent, w_uk)
    scores = torch.einsum("...htd,...shd->...hts", query, keys) * scale
    weights = scores.masked_fill(future(*scores.shape[-2:]), float("-inf")).softmax(-1)
    return weights @ latent.unsqueeze(-3) @ w_uv


def absorbed_values_head_by_head(query, latent, w_uk, w_uv, scale=None):
    """The scores absorbed, but each head's values built from the latent."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    c = latent.unsqueeze(-3)
    scores = query @ w_uk.mT @ c.mT * scale
    weights = scores.masked_fill(future(*scores.shape[-2:]), float("-inf")).softmax(-1)
    return torch.stack([weights[..., h, :, :] @ (latent @ w_uv[h])
                        for h in range(w_uv.shape[0])], dim=-3)


def absorbed_keys_side_by_side(query, latent, w_uk, w_uv, scale=None):
    """The keys of every head side by side, (B, S, H * D), split afterwards."""
    H, d_c, D = w_uk.shape
    keys = latent @ w_uk.transpose(0, 1).reshape(d_c, H * D)  # (B, S, H * D)
    keys = keys.unflatten(-1, (H, D)).transpose(-3, -2)  # (B, H, S, D), a view
    return absorbed_keys_by_einsum(query, latent, w_uk, w_uv, scale) + 0 * keys.sum()


@pytest.mark.parametrize("student", [absorbed_keys_by_einsum, absorbed_values_head_by_head,
                                     absorbed_keys_side_by_side])
def test_per_head_keys_or_values_in_any_layout_are_refused(student):
    message = failure(check_of("absorbed_latent_attention"), student)
    assert named_mistakes(message) == ["per-head keys or values built (the naive form)"], message


def test_with_as_many_queries_as_tokens_a_query_passes_and_keys_are_refused():
    """With T = S a query's rows have the shape of the keys: the shape watch is off, and a
    copy of the query passes; keys made from the latent and w_uk are refused all the same,
    all at once, a token at a time or in chunks."""
    query, latent, w_uk, w_uv = (torch.randn(2, 3, 5, 4), torch.randn(2, 5, 6),
                                 torch.randn(3, 6, 4), torch.randn(3, 6, 4))
    out = harness.LatentOnly(lambda q, *rest: q.clone() + 0)(query, latent, w_uk, w_uv)
    assert out.shape == query.shape
    for student in (naive_by_matrices, absorbed_token_by_token, absorbed_in_two_chunks):
        with pytest.raises(harness.NotAbsorbed, match="made from the latent .* before any "
                                                      "query met them"):
            harness.LatentOnly(student)(query, latent, w_uk, w_uv)
    with pytest.raises(harness.NotAbsorbed, match="S = 7 tokens .* widths \\(4 or 12\\)"):
        harness.LatentOnly(lambda q, c, k, v: c.unsqueeze(-3) @ k)(
            query[..., :2, :], torch.randn(2, 7, 6), w_uk, w_uv)


def keys_into_a_buffer(query, latent, w_uk, w_uv, scale=None):
    """Each token's keys written into a buffer made for one token, the scores gathered."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    T, S = query.shape[-2], latent.shape[-2]
    key = torch.empty(*query.shape[:-2], 1, w_uk.shape[-1])
    scores = []
    for s in range(S):
        torch.matmul(latent[..., None, s:s + 1, :], w_uk, out=key)
        scores.append(query @ key.transpose(-2, -1))
    weights = (torch.cat(scores, -1) * scale).masked_fill(future(T, S), float("-inf"))
    return weights.softmax(-1) @ latent.unsqueeze(-3) @ w_uv


def test_keys_written_into_a_buffer_are_refused():
    """What a tensor is made from follows it through in-place writes (out=)."""
    message = failure(check_of("absorbed_latent_attention"), keys_into_a_buffer)
    assert named_mistakes(message) == ["per-head keys or values built (the naive form)"], message
    assert "before any query met them" in message


@pytest.mark.parametrize(("slips", "mistake"), [
    ({"cache_keys": True}, lesson10.LAYER_MISTAKES[0].name),
    ({"rope_per_head": True}, lesson10.LAYER_MISTAKES[1].name)])
def test_a_right_layer_whose_cache_is_too_large_is_named(slips, mistake):
    """Its outputs equal the reference's token for token: the bytes of its cache tell."""
    message = failure(check_of("latent_attention"), layer_student("Large", **slips))
    assert named_mistakes(message) == [mistake], message
    assert "cache_bytes" in message


class LatentInADict(LatentNaive):
    """The latent and the rotary key kept in a dict: the same bytes, not the contract's pair."""

    def forward(self, x, cache=None):
        out, (c, r) = super().forward(x, None if cache is None else (cache["c"], cache["r"]))
        return out, {"c": c, "r": r}


def test_a_cache_other_than_the_contracts_pair_is_told_so():
    message = failure(check_of("latent_attention"), LatentInADict)
    assert "returned a dict as its cache, expected the pair of tensors (latent, rope_key)" \
        in message, message


@pytest.mark.parametrize(("slips", "mistake"), [
    ({"shift": 1}, lesson10.LAYER_MISTAKES[10].name),
    ({"shift": -3}, lesson10.LAYER_MISTAKES[10].name),
    ({"rope_cached_raw": True}, lesson10.LAYER_MISTAKES[11].name)])
def test_right_outputs_from_a_cache_that_breaks_the_contract_are_named(slips, mistake):
    """A shift of every position cancels in the scores, and keys cached un-rotated and rotated
    at every call give the same scores: only the cache's contents tell."""
    message = failure(check_of("latent_attention"), layer_student("Contract", **slips))
    assert named_mistakes(message) == [mistake], message
    assert "`rope_key` has wrong values" in message


class LatentKeepingItsCache(LatentNaive):
    """Right outputs, its cache kept on itself, and only the newest tokens returned."""

    kept = None

    def forward(self, x, cache=None):
        out, full = super().forward(x, self.kept if cache is not None else None)
        self.kept = full
        return out, tuple(part[..., -x.shape[-2]:, :] for part in full)


def test_a_layer_that_keeps_its_cache_on_itself_fails():
    """The check decodes two streams taking turns: one cache kept on the layer mixes them."""
    assert "LatentAttention" in failure(check_of("latent_attention"), LatentKeepingItsCache)


class LatentUpdatingItsListCache(LatentNaive):
    """Right: its cache a list, updated in place at the next call."""

    def forward(self, x, cache=None):
        out, (latent, rope_key) = super().forward(x, None if cache is None else tuple(cache))
        if cache is None:
            return out, [latent, rope_key]
        cache[0], cache[1] = latent, rope_key
        return out, cache


def test_a_cache_kept_as_a_list_and_updated_in_place_passes(capsys):
    check_of("latent_attention")(LatentUpdatingItsListCache)
    assert "ok: LatentAttention" in capsys.readouterr().out


def test_a_layer_that_hangs_its_tokens_on_the_cache_it_returns_fails():
    """The next call gets copies of the returned cache: an attribute on it does not come back."""
    message = failure(check_of("latent_attention"), LatentRememberingOnItsCache)
    assert "has no attribute 'tokens'" in message, message


def test_the_checks_hand_the_grader_a_harness_it_can_name():
    seen = []

    class Recording:
        def run(self, exercise, student, cases, reference, reference_parameters):
            seen.append(student)

    token = SESSION.set(Recording())
    try:
        for name in ("naive_latent_attention", "absorbed_latent_attention", "latent_attention",
                     "cache_bytes_per_token"):
            check_of(name)(Target(name))
    finally:
        SESSION.reset(token)
    assert isinstance(seen[0], Target)
    assert isinstance(seen[1], Harnessed) and seen[1].function is harness.LatentOnly
    assert isinstance(seen[2], Harnessed) and seen[2].function is harness.DecodeUnderTest
    assert isinstance(seen[3], Harnessed) and seen[3].function is harness.NumberUnderTest


def test_the_layer_check_decodes_in_chunks_after_a_cache():
    """Every case but the first decodes after a cache; one puts a chunk of several tokens
    after it (where a top-left mask differs), one goes 40 positions far."""
    cases = []
    original = lesson10.run_check
    lesson10.run_check = lambda exercise, student, found, **kwargs: cases.extend(found)
    try:
        lesson10.check_latent_attention(None)
    finally:
        lesson10.run_check = original
    chunks = [case.args[1] for case in cases]
    assert chunks[0] == (7,) and all(len(c) > 1 for c in chunks[1:])
    assert any(any(size > 1 for size in c[1:]) for c in chunks)
    assert max(c[0] for c in chunks) >= 40 and any(case.grad for case in cases)


@pytest.mark.slow
def test_the_grader_gives_full_points_to_right_answers_and_none_to_a_naive_absorbed_form():
    from grader.course import read_lesson
    from grader.demo import MISTAKES as DEMO_MISTAKES
    from grader.demo import practice_names, student_notebook
    from helpers.gradebook import grade_notebooks

    lesson = read_lesson(LESSON)
    naive = """
        keys, values = latent.unsqueeze(-3) @ w_uk, latent.unsqueeze(-3) @ w_uv
        scale = query.shape[-1] ** -0.5 if scale is None else scale
        scores = query @ keys.transpose(-2, -1) * scale
        T, S = scores.shape[-2:]
        hidden = torch.ones(T, S, dtype=torch.bool).triu(S - T + 1)
        return torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1) @ values
        """
    everything = dict.fromkeys(practice_names(LESSON))  # the instructor's answers
    students = {"correct": everything, "blank": {},
                "naive": everything | {"absorbed_latent_attention": naive},
                **{f"demo-{name}": everything | {name: DEMO_MISTAKES[name][0]}
                   for name in practice_names(LESSON)}}
    results = grade_notebooks(LESSON, {student: student_notebook(LESSON, answers)
                                       for student, answers in students.items()})
    assert results["correct"].score == lesson.max_score == 11
    assert results["blank"].score == 0
    absorbed = {e.grade_id: e for e in results["naive"].exercises}[
        "check_absorbed_latent_attention"]
    assert absorbed.points == 0
    assert absorbed.mistake == "per-head keys or values built (the naive form)", absorbed.message
    for name in practice_names(LESSON):  # the demo class's mistakes, one at a time, named
        exercise = {e.grade_id: e for e in results[f"demo-{name}"].exercises}[f"check_{name}"]
        assert exercise.points == 0 and DEMO_MISTAKES[name][1] in (exercise.mistake or ""), \
            exercise.message


class LatentByTheChecksVariant(LatentNaive):
    def forward(self, x, cache=None):
        return lesson10.layer_variant(self, x, cache)


def test_the_layer_checks_own_variant_is_refused():
    """With no knob set the layer's variant computes the reference: a shortcut, refused as one
    (locally: the grader's student process has no checks; the function exercises' variants are
    tested with every lesson's in test_shortcuts)."""
    assert "Shortcut refused" in failure(check_of("latent_attention"), LatentByTheChecksVariant)
