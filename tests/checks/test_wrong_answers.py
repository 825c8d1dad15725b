"""Wrong answers written the way students write them, by family, each caught and named; the
right answers beside them (einsum, loops, float64 inside) still pass; and the "Stuck?" path
that lets a student go on with the course's reference.

Families: right forward with wrong gradients, numerics that break only at extreme but legal
values, arguments that are ignored (device, scale 0), slips whose error text had the wrong name,
and the generic messages made specific (which axis, why NaN, by what factor).
"""

import json
import math
import re

import pytest
import torch
import torch.nn.functional as F

from attention_course.checks.framework import CheckFailed
from attention_course.lessons import LESSONS
from helpers.checking import check_of, failure, named_mistakes
from helpers.notebooks import SOLUTIONS

NEG_INF = float("-inf")


def scores_of(query, key, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    return query @ key.transpose(-2, -1) * scale  # (..., T, D) @ (..., D, S) -> (..., T, S)


def masked_scores(query, key, attn_mask, is_causal, scale):
    scores = scores_of(query, key, scale)
    T, S = scores.shape[-2:]
    if is_causal:
        scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), NEG_INF)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, NEG_INF)
    elif attn_mask is not None:
        scores = scores + attn_mask
    return scores  # (..., T, S)


# ---------------------------------------------------------------- right forward, wrong gradient

def masked_attention_nan_to_num(query, key, value, attn_mask=None, is_causal=False, scale=None):
    weights = torch.softmax(masked_scores(query, key, attn_mask, is_causal, scale), dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)  # the rows with nothing to attend to
    return weights @ value, weights


def masked_attention_where_nan(query, key, value, attn_mask=None, is_causal=False, scale=None):
    weights = torch.softmax(masked_scores(query, key, attn_mask, is_causal, scale), dim=-1)
    weights = torch.where(weights.isnan(), torch.zeros_like(weights), weights)
    return weights @ value, weights


def masked_attention_fill_after(query, key, value, attn_mask=None, is_causal=False, scale=None):
    scores = masked_scores(query, key, attn_mask, is_causal, scale)
    empty = scores.isneginf().all(dim=-1, keepdim=True)  # (..., T, 1)
    weights = torch.softmax(scores, dim=-1).masked_fill(empty, 0.0)
    return weights @ value, weights


# ---------------------------------------------------------------- fragile numerics

def online_attention(query, key, value, is_causal, scale, block_size, first_max):
    """An online softmax over blocks of keys, in the inputs' dtype, its running max starting at
    ``first_max``: the common body of the tiled answers below."""
    T, S = query.shape[-2], key.shape[-2]
    m = torch.full((*query.shape[:-1], 1), first_max, dtype=query.dtype)  # running max
    l = torch.zeros_like(m)
    out = torch.zeros(*query.shape[:-1], value.shape[-1], dtype=query.dtype)
    for start in range(0, S, block_size):
        k, v = key[..., start:start + block_size, :], value[..., start:start + block_size, :]
        s = query @ k.transpose(-2, -1) * scale
        if is_causal:
            keys = torch.arange(start, start + k.shape[-2])
            s = s.masked_fill(keys > torch.arange(S - T, S)[:, None], NEG_INF)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        p = torch.exp(s - m_new)
        l = l * torch.exp(m - m_new) + p.sum(dim=-1, keepdim=True)
        out = out * torch.exp(m - m_new) + p @ v
        m = m_new
    return out / l, (m + torch.log(l)).squeeze(-1)


def tiled_max_from_zero(query, key, value, is_causal=False, scale=None, block_size=64):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    return online_attention(query, key, value, is_causal, scale, block_size, first_max=0.0)


def tiled_scale_or_default(query, key, value, is_causal=False, scale=None, block_size=64):
    scale = scale or query.shape[-1] ** -0.5
    return online_attention(query, key, value, is_causal, scale, block_size, first_max=NEG_INF)


def tiled_in_float64(query, key, value, is_causal=False, scale=None, block_size=64):
    """Correct: the running statistics in float64 whatever the inputs are."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    out, lse = online_attention(query.double(), key.double(), value.double(), is_causal, scale,
                                block_size, first_max=NEG_INF)
    return out.to(query.dtype), lse.to(torch.promote_types(query.dtype, torch.float32))


def softmax_shifted_when_positive(x, dim=-1):
    """Shifts only to stop overflow: a row of scores all far below 0 underflows."""
    top = x.amax(dim=dim, keepdim=True)
    exps = (x - torch.where(top > 0, top, 0.0)).exp()
    return exps / exps.sum(dim=dim, keepdim=True)


def softmax_by_logsumexp(x, dim=-1):
    """Correct: exp(x - logsumexp(x))."""
    return (x - torch.logsumexp(x, dim=dim, keepdim=True)).exp()


def causal_on_the_cpu(T, S=None, device=None):
    S = T if S is None else S
    return torch.tril(torch.ones(T, S, dtype=torch.bool))


def causal_moved_to_cpu(T, S=None, device=None):
    S = T if S is None else S
    return (torch.arange(T)[:, None] >= torch.arange(S)).to("cpu")


def causal_by_arange_on_device(T, S=None, device=None):
    """Correct: comparisons of positions made on the device."""
    S = T if S is None else S
    return torch.arange(T, device=device)[:, None] >= torch.arange(S, device=device)


def attention_einsum_is_none(query, key, value, scale=None):
    """Correct: einsum, and None tested as None."""
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    weights = torch.einsum("...td,...sd->...ts", query, key).mul(scale).softmax(dim=-1)
    return torch.einsum("...ts,...sv->...tv", weights, value), weights


def attention_scale_or_default(query, key, value, scale=None):
    weights = torch.softmax(query @ key.mT * (scale or query.shape[-1] ** -0.5), dim=-1)
    return weights @ value, weights


def attention_by_loops(query, key, value, scale=None):
    """Correct: one query at a time."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    rows = [torch.softmax(query[..., t:t + 1, :] @ key.mT * scale, dim=-1)
            for t in range(query.shape[-2])]
    weights = torch.cat(rows, dim=-2)  # (..., T, S)
    return weights @ value, weights


def masked_attention_scale_or_default(query, key, value, attn_mask=None, is_causal=False,
                                      scale=None):
    scale = scale if scale else query.shape[-1] ** -0.5
    scores = masked_scores(query, key, attn_mask, is_causal, scale)
    empty = scores.isneginf().all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    return weights @ value, weights


def masked_attention_safe_rows(query, key, value, attn_mask=None, is_causal=False, scale=None):
    """Correct: rows with nothing to attend to never reach the softmax as -inf."""
    scores = masked_scores(query, key, attn_mask, is_causal, scale)
    empty = scores.isneginf().all(dim=-1, keepdim=True)  # (..., T, 1)
    weights = torch.softmax(torch.where(empty, 0.0, scores), dim=-1)
    weights = torch.where(empty, 0.0, weights)
    return weights @ value, weights


# ---------------------------------------------------------------- errors with a name of their own

def one_hot_times_weight(token_ids, weight):
    return F.one_hot(token_ids, num_classes=weight.shape[0]) @ weight


def one_hot_matmul(token_ids, weight):
    one_hot = F.one_hot(token_ids, weight.shape[0])
    return torch.matmul(one_hot, weight)


def one_hot_einsum(token_ids, weight):
    return torch.einsum("btv,vc->btc", F.one_hot(token_ids, weight.shape[0]), weight)


# ---------------------------------------------------------------- generic messages, made specific

def attention_out_times_three(query, key, value, scale=None):
    out, weights = attention_einsum_is_none(query, key, value, scale)
    return 3 * out, weights


def apply_mask_turned_over(scores, attn_mask):
    if attn_mask is None:
        return scores
    if attn_mask.dtype != torch.bool:
        return scores + attn_mask
    return scores.masked_fill(~attn_mask.transpose(-2, -1), NEG_INF)


def weights_turned_over(query, key, value, scale=None):
    weights = torch.softmax(scores_of(query, key, scale), dim=-1)
    return weights @ value, weights.transpose(-2, -1)


# (check, answer, the mistakes the message names, a phrase the message holds)
WRONG = [
    ("masked_attention", masked_attention_nan_to_num,
     ["NaN of fully masked rows replaced after the softmax (NaN gradients)"], "gradient"),
    ("masked_attention", masked_attention_where_nan,
     ["NaN of fully masked rows replaced after the softmax (NaN gradients)"], "gradient"),
    ("masked_attention", masked_attention_fill_after,
     ["NaN of fully masked rows replaced after the softmax (NaN gradients)"], "gradient"),
    ("tiled_attention", tiled_max_from_zero, ["running max started at 0 instead of -inf"],
     "far below -88"),
    ("softmax", softmax_shifted_when_positive,
     ["the max subtracted only where it is positive (rows far below 0 underflow)"],
     "far below -88"),
    ("causal_mask", causal_on_the_cpu, ["device argument ignored"], "device"),
    ("causal_mask", causal_moved_to_cpu, ["device argument ignored"], "device"),
    ("scaled_dot_product_attention", attention_scale_or_default,
     ["scale=0 treated as no scale (scale or default)"], "scale=0"),
    ("masked_attention", masked_attention_scale_or_default,
     ["scale=0 treated as no scale (scale or default)"], "scale=0"),
    ("tiled_attention", tiled_scale_or_default,
     ["scale=0 treated as no scale (scale or default)"], "scale=0"),
    ("one_hot_embedding", one_hot_times_weight,
     ["an integer (int64) tensor multiplied with a float one"], "long int"),
    ("one_hot_embedding", one_hot_matmul,
     ["an integer (int64) tensor multiplied with a float one"], "long int"),
    ("one_hot_embedding", one_hot_einsum,
     ["an integer (int64) tensor multiplied with a float one"], "Long"),
    ("scaled_dot_product_attention", attention_out_times_three, [],
     "every value is 3 times the expected one"),
    ("apply_mask", apply_mask_turned_over, ["two tensors whose axes do not line up"],
     "axis 3 (counted from the front"),
    ("scaled_dot_product_attention", weights_turned_over, [],
     "T is 7 instead of 5, S is 5 instead of 7 (T and S swapped)"),
]

RIGHT = [
    ("softmax", softmax_by_logsumexp),
    ("tiled_attention", tiled_in_float64),
    ("causal_mask", causal_by_arange_on_device),
    ("scaled_dot_product_attention", attention_einsum_is_none),
    ("scaled_dot_product_attention", attention_by_loops),
    ("masked_attention", masked_attention_safe_rows),
]


@pytest.mark.parametrize(("name", "answer", "mistakes", "phrase"), [
    pytest.param(*row, id=f"{row[0]}-{row[1].__name__}") for row in WRONG])
def test_a_wrong_answer_is_caught_and_named(name, answer, mistakes, phrase):
    message = failure(check_of(name), answer)
    assert named_mistakes(message) == mistakes, message
    assert phrase in message, message


@pytest.mark.parametrize(("name", "answer"), [
    pytest.param(*row, id=f"{row[0]}-{row[1].__name__}") for row in RIGHT])
def test_a_right_answer_passes(name, answer, capsys):
    check_of(name)(answer)
    assert capsys.readouterr().out.startswith("ok:")


def test_nan_says_where_it_comes_from():
    message = failure(check_of("masked_attention"), masked_attention_unguarded)
    assert "rows where every key is hidden" in message, message


def masked_attention_unguarded(query, key, value, attn_mask=None, is_causal=False, scale=None):
    weights = torch.softmax(masked_scores(query, key, attn_mask, is_causal, scale), dim=-1)
    return weights @ value, weights


# ---------------------------------------------------------------- the warnings of a slip

def attention_copied(query, key, value, scale=None):
    scores = torch.tensor(query @ key.transpose(-2, -1))  # copy-constructed: torch warns
    weights = torch.softmax(scores * query.shape[-1] ** -0.5, dim=-1)
    return weights @ value, weights


def test_torchs_warning_points_at_the_students_line():
    with pytest.warns(UserWarning, match="copy construct from a tensor") as caught:
        failure(check_of("scaled_dot_product_attention"), attention_copied)
    assert {w.filename for w in caught} == {__file__}


# ---------------------------------------------------------------- "Stuck?": the reference, shown

def stuck_lines() -> list[tuple[str, str, str]]:
    """(lesson, exercise, the import its task cell shows) for every written practice."""
    found = []
    for lesson in LESSONS:
        cells = json.loads((SOLUTIONS / lesson.id / f"{lesson.id}.ipynb").read_text())["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        lines = re.findall(r"\*Stuck\?\* Run `(from attention_course\.[^`]+)`",
                           text.replace("\n", " "))
        practices = [p.name for p in lesson.practice if p.written]
        found += [(lesson.id, name, line) for name, line in zip(practices, lines, strict=False)]
    return found


STUCK = stuck_lines()


def test_every_exercise_shows_its_stuck_import():
    shown = [name for _, name, _ in STUCK]
    assert shown == [p.name for lesson in LESSONS for p in lesson.practice if p.written]


@pytest.mark.parametrize(("lesson_id", "name", "line"), STUCK, ids=[s[1] for s in STUCK])
def test_the_stuck_import_lets_the_lesson_go_on(lesson_id, name, line, capsys, monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    namespace = {}
    exec(line, namespace)
    (student,) = (v for k, v in namespace.items() if k != "__builtins__")
    check_of(name)(student)
    printed = capsys.readouterr().out
    assert "this is the course's reference" in printed and "the grade needs your own" in printed


@pytest.mark.parametrize("name", ["softmax", "masked_attention", "multi_head_attention"])
def test_the_reference_earns_nothing_under_nbgrader(name, monkeypatch):
    line = next(line for _, n, line in STUCK if n == name)
    namespace = {}
    exec(line, namespace)
    (student,) = (v for k, v in namespace.items() if k != "__builtins__")
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(CheckFailed) as info:
        check_of(name)(student)
    assert info.value.mistake == "shortcut"
