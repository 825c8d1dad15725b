"""Lesson 07, inference and scale: the references do what the lesson says (cached decoding writes
the tokens of uncached decoding, grouped-query attention is PyTorch's enable_gqa, tiled
attention is attention in one piece, in a fraction of the memory), and the checks name every
catalogued mistake as a student writes it, refuse the shortcuts, stop attention computed in one
piece, and grade through the real grader."""

import math
import tempfile
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from check_solutions import check_of, failure, named_mistakes
from test_lesson07_answers import CORRECT, cached_by_manual_softmax

from attention_course import attention, inference, tiled
from attention_course.checks import harness, lesson07
from attention_course.checks.framework import SESSION, Harnessed, Target

NEG_INF = float("-inf")
LESSON = "07_inference_and_scale"


def bottom_right(T: int, S: int) -> torch.Tensor:
    return torch.ones(T, S, dtype=torch.bool).tril(S - T)


def qkv(*shape, S=None, Dv=None, dtype=torch.float64, seed=0):
    """Query (..., T, D), key (..., S, D), value (..., S, Dv) from sizes (..., T, D)."""
    g = torch.Generator().manual_seed(seed)
    *batch, T, D = shape
    S, Dv = S or T, Dv or D
    return (torch.randn(*batch, T, D, generator=g, dtype=dtype),
            torch.randn(*batch, S, D, generator=g, dtype=dtype),
            torch.randn(*batch, S, Dv, generator=g, dtype=dtype))


# ---------------------------------------------------------------- the key/value cache

@pytest.mark.parametrize(("P", "T"), [(0, 6), (5, 1), (3, 3), (1, 5)])
def test_cached_attention_gives_the_last_rows_of_causal_attention(P, T):
    q, k, v = qkv(2, 3, P + T, 4, Dv=5)
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (2, 3, P + T, 5)
    cache = (k[..., :P, :], v[..., :P, :]) if P else (None, None)
    out, keys, values = inference.cached_attention(q[..., P:, :], k[..., P:, :], v[..., P:, :],
                                                   *cache)
    assert torch.allclose(out, full[..., P:, :])
    assert torch.equal(keys, k) and torch.equal(values, v)


def full_attention(query, key, value, past_key=None, past_value=None):
    """No cache: causal attention over the tokens given, with G <= H key/value heads."""
    group = query.shape[1] // key.shape[1]
    out = F.scaled_dot_product_attention(query, key.repeat_interleave(group, 1),
                                         value.repeat_interleave(group, 1), is_causal=True)
    return out, key, value


def grouped(attend):
    """As in the lesson: a group axis for the query heads, one key/value head per group."""
    def attend_in_groups(query, key, value, past_key=None, past_value=None):
        G = key.shape[1]
        out, keys, values = attend(query.unflatten(1, (G, -1)), key.unsqueeze(2),
                                   value.unsqueeze(2), past_key, past_value)
        return out.flatten(1, 2), keys, values
    return attend_in_groups


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_cached_decoding_writes_the_tokens_of_uncached_decoding(n_kv_heads):
    torch.manual_seed(0)
    model = inference.TinyDecoder(n_heads=4, n_kv_heads=n_kv_heads).eval()
    prompt = torch.randint(0, 64, (3, 5))
    attend = inference.cached_attention if n_kv_heads == 4 else grouped(
        inference.cached_attention)
    uncached, logits_uncached = inference.generate(model, prompt, 20, full_attention,
                                                   use_cache=False)
    cached, logits_cached = inference.generate(model, prompt, 20, attend)
    assert torch.equal(uncached, cached)
    assert torch.allclose(logits_uncached, logits_cached, atol=1e-5)
    assert len(set(cached[0].tolist())) > 3  # a sequence worth comparing, not one token


def test_a_prompt_cached_in_chunks_gives_the_logits_of_one_pass():
    torch.manual_seed(0)
    model = inference.TinyDecoder().eval()
    tokens = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        whole, _ = model(tokens, full_attention)
        first, caches = model(tokens[:, :5], inference.cached_attention)
        second, caches = model(tokens[:, 5:], inference.cached_attention, caches, start=5)
    assert torch.allclose(torch.cat([first, second], dim=1), whole, atol=1e-5)
    assert caches[0][0].shape == (2, 4, 12, 16)


@pytest.mark.parametrize("G", [8, 2, 1])
def test_the_cache_shrinks_by_h_over_g(G):
    torch.manual_seed(0)
    model = inference.TinyDecoder(d_model=64, n_heads=8, n_kv_heads=G, n_layers=3).eval()
    with torch.no_grad():
        _, caches = model(torch.randint(0, 64, (2, 10)), grouped(inference.cached_attention))
    assert inference.cache_bytes(caches) == 2 * 3 * 2 * 10 * G * 8 * 4  # 2 L B S G D, float32


def test_the_decoder_says_what_does_not_fit():
    with pytest.raises(ValueError, match="n_kv_heads"):
        inference.TinyDecoder(n_heads=4, n_kv_heads=3)
    with pytest.raises(ValueError, match="max_len"):
        inference.TinyDecoder(max_len=8)(torch.zeros(1, 9, dtype=torch.long), full_attention)


# ---------------------------------------------------------------- grouped-query attention

@pytest.mark.parametrize(("H", "G"), [(8, 2), (6, 3), (4, 1), (3, 3)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_grouped_query_attention_is_pytorchs_enable_gqa(H, G, is_causal):
    q, _, _ = qkv(2, H, 6, 4)
    _, k, v = qkv(2, G, 6, 4, Dv=3, seed=1)
    out, weights = inference.grouped_query_attention(q, k, v, is_causal=is_causal)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
    assert torch.allclose(out, expected)
    assert weights.shape == (2, H, 6, 6) and torch.allclose(weights.sum(-1), torch.ones(1).double())


def test_grouped_query_attention_refuses_groups_that_do_not_divide():
    q, _, _ = qkv(2, 6, 5, 4)
    _, k, v = qkv(2, 4, 5, 4)
    with pytest.raises(ValueError, match="G must divide H"):
        inference.grouped_query_attention(q, k, v)


# ---------------------------------------------------------------- tiled attention

@pytest.mark.parametrize(("T", "S"), [(7, 7), (5, 11), (1, 9), (64, 200)])
@pytest.mark.parametrize("block_size", [1, 3, 64, 500])
@pytest.mark.parametrize("is_causal", [False, True])
def test_tiled_attention_is_attention_in_one_piece(T, S, block_size, is_causal):
    q, k, v = qkv(2, 3, T, 4, S=S, Dv=6)
    mask = bottom_right(T, S) if is_causal else None
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    for tiling in (tiled.tiled_attention, tiled.flash_attention):
        assert torch.allclose(tiling(q, k, v, is_causal, block_size=block_size), expected)


def test_tiled_attention_takes_an_explicit_scale_and_huge_scores():
    q, k, v = qkv(2, 3, 9, 4, dtype=torch.float32)
    expected = F.scaled_dot_product_attention(1000 * q, k, v, scale=0.5)
    out = tiled.tiled_attention(1000 * q, k, v, scale=0.5, block_size=2)
    assert out.isfinite().all() and torch.allclose(out, expected, atol=1e-5)


def test_tiled_attention_needs_as_many_keys_as_causal_queries():
    with pytest.raises(ValueError, match="T <= S"):
        tiled.tiled_attention(*qkv(1, 1, 5, 4, S=3), is_causal=True)


def test_peak_memory_counts_new_tensors_until_they_are_freed_and_views_as_nothing():
    x = torch.zeros(1000, 250)  # 1 MB, made before: not counted

    def two_in_turn(x):
        y = x + 1  # 1 MB
        del y
        return (x * 2)[:10].clone()  # 1 MB, a view of it, and a copy of its first 10 rows

    def two_at_once(x):
        y = x + 1
        return y.T.reshape(-1)[:5] + (x - 1).sum()  # y, a copy by reshape, x - 1: 3 MB

    assert tiled.peak_memory(two_in_turn, x)[1] == 1_000_000 + 10_000
    assert 3_000_000 <= tiled.peak_memory(two_at_once, x)[1] < 3_000_100
    assert tiled.peak_memory(lambda x: x.view(-1)[::2], x)[1] == 0


def memory(way, T: int) -> int:
    q, k, v = qkv(1, 4, T, 32, dtype=torch.float32)
    with torch.no_grad():
        return tiled.peak_memory(way, q, k, v)[1]


def test_tiled_memory_grows_like_t_and_the_naive_one_like_t_squared():
    def naive(q, k, v):
        return attention.scaled_dot_product_attention(q, k, v, is_causal=True)[0]

    def tiling(q, k, v):
        return tiled.tiled_attention(q, k, v, is_causal=True)

    def in_query_blocks(q, k, v):
        return tiled.flash_attention(q, k, v, is_causal=True)

    assert 3.5 < memory(naive, 512) / memory(naive, 256) < 4.5
    assert 1.8 < memory(tiling, 512) / memory(tiling, 256) < 2.2
    assert memory(tiling, 512) < memory(naive, 512) / 5
    assert memory(in_query_blocks, 512) < 3 * memory(F.scaled_dot_product_attention, 512)


# ---------------------------------------------------------------- mistakes as students write them

def cached_new_keys_first(query, key, value, past_key=None, past_value=None):
    if past_key is not None:
        key, value = torch.cat([key, past_key], -2), torch.cat([value, past_value], -2)
    T, S = query.shape[-2], key.shape[-2]
    out, _ = attention.scaled_dot_product_attention(query, key, value,
                                                    attn_mask=bottom_right(T, S))
    return out, key, value


def cached_with_is_causal(query, key, value, past_key=None, past_value=None):
    if past_key is not None:
        key, value = torch.cat([past_key, key], -2), torch.cat([past_value, value], -2)
    out, _ = attention.scaled_dot_product_attention(query, key, value, is_causal=True)
    return out, key, value


def cached_position_after_appending(query, key, value, past_key=None, past_value=None):
    """Counts the new tokens from the cache's length after appending: they see everything."""
    if past_key is not None:
        key, value = torch.cat([past_key, key], -2), torch.cat([past_value, value], -2)
    P = key.shape[-2]  # meant to be the cache's length before appending
    T, S = query.shape[-2], key.shape[-2]
    allowed = torch.arange(S) <= (torch.arange(T) + P)[:, None]
    out, _ = attention.scaled_dot_product_attention(query, key, value, attn_mask=allowed)
    return out, key, value


def cached_position_one_late(query, key, value, past_key=None, past_value=None):
    P = 0 if past_key is None else past_key.shape[-2]
    if past_key is not None:
        key, value = torch.cat([past_key, key], -2), torch.cat([past_value, value], -2)
    T, S = query.shape[-2], key.shape[-2]
    allowed = torch.arange(S) <= (torch.arange(1, T + 1) + P)[:, None]  # positions from 1
    out, _ = attention.scaled_dot_product_attention(query, key, value, attn_mask=allowed)
    return out, key, value


def cached_returning_the_new_keys(query, key, value, past_key=None, past_value=None):
    keys = key if past_key is None else torch.cat([past_key, key], -2)
    values = value if past_value is None else torch.cat([past_value, value], -2)
    T, S = query.shape[-2], keys.shape[-2]
    out, _ = attention.scaled_dot_product_attention(query, keys, values,
                                                    attn_mask=bottom_right(T, S))
    return out, key, value


def gqa_by_repeat(query, key, value, is_causal=False, scale=None):
    group = query.shape[-3] // key.shape[-3]
    repeats = [1] * (key.ndim - 3) + [group, 1, 1]
    return attention.scaled_dot_product_attention(query, key.repeat(*repeats),
                                                  value.repeat(*repeats), is_causal=is_causal,
                                                  scale=scale)


def gqa_by_expanding_the_wrong_axis(query, key, value, is_causal=False, scale=None):
    *batch, G, S, D = key.shape
    H = query.shape[-3]
    k = key.unsqueeze(-4).expand(*batch, H // G, G, S, D).reshape(*batch, H, S, D)
    v = value.unsqueeze(-4).expand(*batch, H // G, G, S, -1).reshape(*batch, H, S, -1)
    return attention.scaled_dot_product_attention(query, k, v, is_causal=is_causal, scale=scale)


def tiled_student(*, rescale_output=True, rescale_sum=True, divide=True, block_positions=False,
                  top_left=False, full_blocks_only=False):
    """A student's tiled attention, with one of the slips the lesson names."""
    def tiled_attention(query, key, value, is_causal=False, scale=None, block_size=64):
        T, S = query.shape[-2], key.shape[-2]
        scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
        m = torch.full_like(query[..., :1], NEG_INF)
        l, acc = torch.zeros_like(m), 0.0
        stop = S - S % block_size if full_blocks_only else S
        for start in range(0, stop, block_size):
            k = key[..., start:start + block_size, :]
            v = value[..., start:start + block_size, :]
            scores = query @ k.transpose(-2, -1) * scale
            if is_causal:
                first = 0 if block_positions else start
                rows = torch.arange(T) + (0 if top_left else S - T)
                hidden = torch.arange(first, first + k.shape[-2]) > rows[:, None]
                scores = scores.masked_fill(hidden, NEG_INF)
            m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
            p = torch.exp(scores - m_new)
            alpha = torch.exp(m - m_new)
            l = (l * alpha if rescale_sum else l) + p.sum(-1, keepdim=True)
            acc = (acc * alpha if rescale_output else acc) + p @ v
            m = m_new
        return acc / l if divide else acc
    return tiled_attention


TILED = {mistake.name: mistake for mistake in lesson07.TILED_MISTAKES}
STUDENTS = [  # (exercise, what the student wrote, the mistake the check must name)
    ("cached_attention", cached_new_keys_first, lesson07.CACHE_WRONG_ORDER),
    ("cached_attention", cached_with_is_causal, lesson07.MASK_TOP_LEFT),
    ("cached_attention", cached_position_after_appending, lesson07.NEW_TOKENS_UNMASKED),
    ("cached_attention", cached_position_one_late, lesson07.POSITIONS_ONE_LATE),
    ("cached_attention", cached_returning_the_new_keys, lesson07.RETURNED_NEW_ONLY),
    ("grouped_query_attention", gqa_by_repeat, lesson07.GROUPS_TILED),
    ("grouped_query_attention", gqa_by_expanding_the_wrong_axis, lesson07.GROUPS_TILED),
    *[("tiled_attention", tiled_student(**{slip: value}), TILED[name]) for slip, value, name in [
        ("rescale_output", False, "running max not used to rescale the accumulated output"),
        ("rescale_sum", False, "normaliser not rescaled"),
        ("divide", False, "final division missing"),
        ("block_positions", True, "causal mask built from the positions inside the block"),
        ("top_left", True, "causal mask aligned top-left (queries placed at positions 0 .. T-1)"),
        ("full_blocks_only", True, "last, shorter block of keys left out")]],
]


@pytest.mark.parametrize(("name", "student", "mistake"), STUDENTS,
                         ids=[f"{name}-{mistake.name}" for name, _, mistake in STUDENTS])
def test_the_mistakes_the_lesson_names_are_named_as_students_make_them(name, student, mistake):
    for seed in (0, 1):
        assert named_mistakes(failure(check_of(name), student, seed)) == [mistake.name]


def test_a_cache_appended_on_the_wrong_axis_is_named():
    def on_the_heads(query, key, value, past_key=None, past_value=None):
        key, value = torch.cat([past_key, key], 1), torch.cat([past_value, value], 1)
        return cached_by_manual_softmax(query, key, value)

    assert 'known mistake: "cache appended on the wrong axis"' in failure(
        check_of("cached_attention"), on_the_heads)


# ---------------------------------------------------------------- shortcuts and whole matrices

def cached_by_torch(query, key, value, past_key=None, past_value=None):
    if past_key is not None:
        key, value = torch.cat([past_key, key], -2), torch.cat([past_value, value], -2)
    T, S = query.shape[-2], key.shape[-2]
    return F.scaled_dot_product_attention(query, key, value, attn_mask=bottom_right(T, S)), \
        key, value


def gqa_by_torch(query, key, value, is_causal=False, scale=None):
    out = F.scaled_dot_product_attention(query, key, value, is_causal=is_causal, scale=scale,
                                         enable_gqa=True)
    return out, CORRECT["grouped_query_attention"][0](query, key, value, is_causal, scale)[1]


def tiled_by_torch(query, key, value, is_causal=False, scale=None, block_size=64):
    T, S = query.shape[-2], key.shape[-2]
    return F.scaled_dot_product_attention(query, key, value, scale=scale,
                                          attn_mask=bottom_right(T, S) if is_causal else None)


def tiled_by_the_course(query, key, value, is_causal=False, scale=None, block_size=64):
    T, S = query.shape[-2], key.shape[-2]
    mask = bottom_right(T, S) if is_causal else None
    return attention.scaled_dot_product_attention(query, key, value, mask, scale=scale)[0]


def tiled_in_query_blocks_of_the_reference(query, key, value, is_causal=False, scale=None,
                                           block_size=64):
    return tiled.flash_attention(query, key, value, is_causal, scale, block_size)


@pytest.mark.parametrize(("name", "student"), [
    ("cached_attention", cached_by_torch),
    ("grouped_query_attention", gqa_by_torch),
    ("tiled_attention", tiled_by_torch),
    ("tiled_attention", tiled_by_the_course),
    ("tiled_attention", tiled_in_query_blocks_of_the_reference),
])
def test_shortcuts_are_refused(name, student):
    assert "Shortcut refused" in failure(check_of(name), student)


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
    return acc / l


def untiled(query, key, value, is_causal=False, scale=None, block_size=64):
    T, S = query.shape[-2], key.shape[-2]
    mask = bottom_right(T, S) if is_causal else None
    scores = query @ key.transpose(-2, -1) * (scale or query.shape[-1] ** -0.5)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    return scores.softmax(-1) @ value


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
    from grader.grading.submissions import Submission
    from grader.workspace import Workspace
    from helpers.gradebook import grade_here

    lesson = read_lesson(LESSON)
    untiled_body = """
        scores = query @ key.transpose(-2, -1) * (scale or query.shape[-1] ** -0.5)
        if is_causal:
            T, S = scores.shape[-2:]
            scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T),
                                        float("-inf"))
        return torch.softmax(scores, dim=-1) @ value
        """
    by_torch = """
        return F.scaled_dot_product_attention(query, key, value, is_causal=is_causal, scale=scale,
                                              enable_gqa=True), None
        """
    everything = dict.fromkeys(practice_names(LESSON))  # the instructor's answers
    students = {"correct": everything, "blank": {},
                "untiled": everything | {"tiled_attention": untiled_body},
                "by_torch": everything | {"grouped_query_attention": by_torch}}
    with tempfile.TemporaryDirectory() as scratch:
        workspace = Workspace(Path(scratch) / "workspace")
        submissions = []
        for student, answers in students.items():
            folder = workspace.submitted / student / LESSON
            folder.mkdir(parents=True)
            nbformat.write(student_notebook(LESSON, answers), folder / f"{LESSON}.ipynb")
            submissions.append(Submission(student, LESSON, folder))
        results = {r.student: r for r in grade_here(submissions, {LESSON: lesson}, workspace)}
    assert results["correct"].score == lesson.max_score == 10
    assert results["blank"].score == 0
    tiles = {e.grade_id: e for e in results["untiled"].exercises}["check_tiled_attention"]
    assert tiles.points == 0 and tiles.mistake == "the whole (T, S) score matrix computed at once"
    groups = {e.grade_id: e for e in results["by_torch"].exercises}
    assert groups["check_grouped_query_attention"].points == 0
    assert "Shortcut refused" in groups["check_grouped_query_attention"].message
