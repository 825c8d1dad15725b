"""What each check of lessons 01-04 covers: the kinds of input its cases exercise, and the
mistakes it names. An answer wrong on only one kind of input fails its check.

The table in docs/contributors/writing-a-lesson.md ("What each check covers") is generated here
from the checks themselves, so it cannot drift: `PYTHONPATH=tests python
tests/checks/test_coverage.py` prints it.
"""

import dataclasses
import math
import sys

import pytest
import torch
import torch.nn.functional as F

from attention_course.checks import MODULES
from attention_course.checks.errors import KNOWN_ERRORS
from helpers.answers.lesson01 import EmbeddingByIndexing, EmbeddingIgnoringTheOffset
from helpers.answers.lesson02 import (
    NEG_INF,
    additive,
    scores_by_einsum,
    softmax_by_max,
    softmax_on_the_last_axis,
    softmax_without_max,
)
from helpers.answers.lesson03 import (
    masked_attention_additive,
    masked_attention_causal_or_mask,
    masked_attention_fixed_scale,
    masked_attention_float_as_bool,
)
from helpers.answers.lesson04 import (
    MHAByEinsumFilling,
    MHACausalOnlyWithoutMask,
    MHAHandWritten,
    MHAIgnoringCausal,
    MHAReadingEveryMaskAsBool,
    MHAWithNaNRows,
    StudentMHA,
    split_by_view,
)
from helpers.checking import check_of, failure, named_mistakes
from helpers.notebooks import ROOT

README = ROOT / "docs" / "contributors" / "writing-a-lesson.md"
LESSONS = ("lesson01", "lesson02", "lesson03", "lesson04")
CHECKS = [name.removeprefix("check_") for module in MODULES
          if module.__name__.rpartition(".")[2] in LESSONS
          for name, value in vars(module).items()
          if name.startswith("check_") and getattr(value, "__module__", None) == module.__name__]
BATCHED = ("token_ids", "query", "scores")  # inputs that may have any number of batch axes


def captured(name: str, seed: int = 0):
    """(exercise, cases) that ``check_<name>`` hands to run_check, without running anything."""
    module = next(m for m in MODULES if hasattr(m, f"check_{name}"))
    seen = []
    original = module.run_check
    module.run_check = lambda exercise, student, cases, *args, **kwargs: seen.append(
        (exercise, cases))
    try:
        getattr(module, f"check_{name}")(None, seed=seed)
    finally:
        module.run_check = original
    if len(seen) == 1:
        return seen[0]
    # several runs (lesson 04's module in eval, then in training mode): the first exercise with
    # the mistakes of all, and every case
    exercise = dataclasses.replace(seen[0][0], mistakes=tuple(
        m for e, _ in seen for m in e.mistakes))
    return exercise, [case for _, cases in seen for case in cases]


# ---------------------------------------------------------------- kinds of input

def kinds(exercise, case, first) -> list[str]:
    """The kinds of input ``case`` exercises, in words; ``first`` is the check's first case."""
    values = dict(zip(exercise.inputs, case.args, strict=False)) | case.kwargs
    found = []
    tensors = [v for v in values.values() if isinstance(v, torch.Tensor)]
    if any(t.dtype == torch.float64 for t in tensors) or case.kwargs.get("dtype") == torch.float64:
        found.append("float64")
    if case.grad:
        found.append("gradients")
    found += _sizes(exercise, values, dict(zip(exercise.inputs, first.args, strict=False)))
    found += _masks(exercise, values)
    if case.description.startswith("training mode"):  # lesson 04's module in training mode
        found.append("training mode (dropout=1.0, bias=False)")
    if "scale" in case.kwargs:
        found.append("scale given")
    if "dim" in case.kwargs and case.kwargs["dim"] != -1:
        found.append("dim other than -1")
    x = values.get("x")
    if exercise.name == "softmax" and x is not None:
        if x.isneginf().any():
            found.append("-inf entries")
        if x.abs().max() > 100:
            found.append("large logits")
    if "device" in case.kwargs:
        found.append("device given")
    if exercise.name == "TokenAndPositionEmbedding":  # the configuration built, an offset
        found.append(case.description.partition(",")[0])
        if case.kwargs.get("offset"):
            found.append("an offset (after a cache)")
    return found


def _sizes(exercise, values, first) -> list[str]:
    found = []
    if "query" in values and "key" in values:
        T, S = values["query"].shape[-2], values["key"].shape[-2]
        found.append("T != S" if T != S else "T = S")
    elif "scores" in values:
        found.append("T != S" if values["scores"].shape[-2] != values["scores"].shape[-1]
                     else "T = S")
    elif exercise.name == "causal_mask":
        T, S = values["T"], values.get("S")
        found.append("S left to its default" if S is None else "T > S" if T > S else "T < S")
    if "value" in values and values["value"].shape[-1] != values["query"].shape[-1]:
        found.append("Dv != D")
    for name in BATCHED:  # fewer or more axes than in the first case
        if name in values and name in first and values[name].ndim != first[name].ndim:
            fewer = values[name].ndim < first[name].ndim
            found.append("no batch dims" if fewer else "extra batch dims")
    if "weight" in values and "token_ids" in values and "pe" not in values:
        if values["token_ids"].max() < values["weight"].shape[0] - 1:
            found.append("ids that do not reach V - 1")
    if exercise.name == "offset_matrix" and values["k"] <= 0:
        found.append("offset k = 0" if values["k"] == 0 else "a negative offset")
    if "lengths" in values and (values["lengths"] == 0).any():
        found.append("a sequence of length 0")
    return found


def _masks(exercise, values) -> list[str]:
    takes_mask = "attn_mask" in exercise.inputs or exercise.name == "MultiHeadAttention"
    if not takes_mask:  # packed sequences: their padding comes from the lengths
        return ["is_causal"] if values.get("is_causal") else []
    mask, causal = values.get("attn_mask"), values.get("is_causal", False)
    found = []
    if mask is None and exercise.name != "to_mha_mask":
        found.append("no mask")
    elif mask is not None:
        found.append(f"{'bool' if mask.dtype == torch.bool else 'float'} mask "
                     f"{tuple(mask.shape)}")
        kind = "bool" if mask.dtype == torch.bool else "float"
        hidden = ~mask if kind == "bool" else mask.isneginf()
        if exercise.name != "to_mha_mask" and hidden.all(dim=-1).any():
            found.append(f"a query that may attend to nothing ({kind} mask)")
    if causal:
        found.append(f"is_causal with a {kind} mask" if mask is not None else "is_causal")
    return found


# ---------------------------------------------------------------- the table

ORDER = ("T = S", "T != S", "T < S", "T > S", "S left", "Dv != D", "no batch", "extra batch",
         "float64", "gradients", "dim other", "large logits", "-inf", "ids that", "offset k",
         "a negative", "a sequence",
         "no mask", "bool mask", "float mask", "a query", "is_causal", "scale", "device",
         "training mode", "sinusoidal", "learned", "positions=False", "an offset")


def _order(label: str) -> int:
    return next(i for i, start in enumerate(ORDER) if label.startswith(start))


def row(name: str) -> str:
    exercise, cases = captured(name)
    covered = sorted({k for case in cases for k in kinds(exercise, case, cases[0])}, key=lambda
                     k: (_order(k), k))
    mistakes = "; ".join(dict.fromkeys(m.name for m in exercise.mistakes)) or "-"
    errors = "; ".join(dict.fromkeys(e.mistake for e in KNOWN_ERRORS
                                     if exercise.name in e.exercises)) or "-"
    return (f"| `check_{name}` | {len(cases)} | {', '.join(covered) or 'sizes only'} | "
            f"{mistakes} | {errors} |")


def table() -> str:
    everywhere = "; ".join(dict.fromkeys(e.mistake for e in KNOWN_ERRORS if not e.exercises))
    return "\n".join([
        "| check | cases | inputs it exercises | mistakes it names | errors it explains |",
        "|---|---|---|---|---|",
        *(row(name) for name in CHECKS),
        "",
        f"Every check also explains these errors: {everywhere}.",
    ])


def test_every_check_of_lessons_01_to_04_is_in_the_table():
    assert len(CHECKS) == 15


def test_readme_table_matches_the_checks():
    assert table() in README.read_text(), \
        "regenerate: PYTHONPATH=tests python tests/checks/test_coverage.py"


@pytest.mark.parametrize("name", CHECKS)
def test_every_case_is_described_and_the_sizes_differ(name):
    exercise, cases = captured(name)
    assert len({case.description for case in cases}) == len(cases)


# ---------------------------------------------------------------- wrong on one kind of input

def one_hot_on_float32(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]).float() @ weight


def one_hot_by_data(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]).to(weight.dtype) @ weight.data


def one_hot_by_einsum_for_b_t(token_ids, weight):
    one_hot = F.one_hot(token_ids, weight.shape[0]).to(weight.dtype)
    return torch.einsum("btv,vc->btc", one_hot, weight)


def one_hot_without_num_classes(token_ids, weight):
    return F.one_hot(token_ids).to(weight.dtype) @ weight


def one_hot_reshaped_to_two_axes(token_ids, weight):
    one_hot = F.one_hot(token_ids, weight.shape[0]).to(weight.dtype)
    return (one_hot.flatten(0, -2) @ weight).view(*token_ids.shape[:2], -1)


class EmbeddingIntoZeros(EmbeddingByIndexing):
    def forward(self, token_ids, offset=0):
        C, T = self.token.weight.shape[-1], token_ids.shape[-1]
        out = torch.zeros(*token_ids.shape, C)
        scale = math.sqrt(C) if self.scale_tokens else 1.0
        out[:] = self.token(token_ids) * scale + self.position[offset:offset + T]
        return out


class EmbeddingByData(EmbeddingByIndexing):
    def forward(self, token_ids, offset=0):
        scale = math.sqrt(self.token.weight.shape[-1]) if self.scale_tokens else 1.0
        return (self.token.weight.data[token_ids] * scale
                + self.position.data[offset:offset + token_ids.shape[-1]])


def softmax_in_float32(x, dim=-1):
    return softmax_by_max(x.float(), dim)


def softmax_of_values(x, dim=-1):
    return softmax_by_max(torch.tensor(x.tolist(), dtype=x.dtype), dim)


def softmax_zeroing_minus_inf(x, dim=-1):
    return softmax_by_max(torch.where(x.isneginf(), 0.0, x), dim)


def scores_by_fixed_axes(query, key, scale=None):
    return query @ key.transpose(2, 3) * (query.shape[-1] ** -0.5 if scale is None else scale)


def swap_last_two(key):
    """The key's last two axes swapped, written for (S, D) and (B, H, S, D) keys only."""
    return key.t() if key.ndim == 2 else key.permute(0, 1, 3, 2)


def scores_for_two_or_four_axes(query, key, scale=None):
    return query @ swap_last_two(key) * (query.shape[-1] ** -0.5 if scale is None else scale)


def attention_keys_by_queries(query, key, value, scale=None):
    scores = key @ query.mT * (query.shape[-1] ** -0.5 if scale is None else scale)
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def attention_scaled_by_dv(query, key, value, scale=None):
    scale = 1 / math.sqrt(value.shape[-1]) if scale is None else scale
    scores = query @ key.mT * scale
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def attention_with_float32_weights(query, key, value, scale=None):
    weights = torch.softmax(scores_by_einsum(query, key, scale), dim=-1, dtype=torch.float32)
    return weights @ value, weights


def attention_with_detached_weights(query, key, value, scale=None):
    weights = torch.softmax(scores_by_einsum(query, key, scale), dim=-1)
    return weights.detach() @ value, weights


def attention_ignoring_scale(query, key, value, scale=None):
    weights = torch.softmax(scores_by_einsum(query, key), dim=-1)
    return weights @ value, weights


def attention_by_fixed_axes(query, key, value, scale=None):
    weights = torch.softmax(scores_by_fixed_axes(query, key, scale), dim=-1)
    return weights @ value, weights


def attention_for_two_or_four_axes(query, key, value, scale=None):
    weights = torch.softmax(scores_for_two_or_four_axes(query, key, scale), dim=-1)
    return weights @ value, weights


def causal_ignoring_s(T, S=None, device=None):
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def causal_without_default(T, S, device=None):
    return torch.ones(T, S, dtype=torch.bool, device=device).tril()


def apply_mask_as_zero_test(scores, attn_mask):
    return scores if attn_mask is None else scores.masked_fill(attn_mask == 0, NEG_INF)


def apply_mask_without_none(scores, attn_mask):
    if attn_mask.dtype == torch.bool:
        return scores.masked_fill(~attn_mask, NEG_INF)
    return scores + attn_mask


def apply_mask_expanded(scores, attn_mask):
    if attn_mask is None or attn_mask.is_floating_point():
        return scores if attn_mask is None else scores + attn_mask
    B, H, T, S = scores.shape
    return scores.masked_fill(~attn_mask.expand(B, H, T, S), NEG_INF)


def apply_mask_on_data(scores, attn_mask):
    if attn_mask is None or attn_mask.is_floating_point():
        return scores if attn_mask is None else scores + attn_mask
    return scores.data.masked_fill(~attn_mask, NEG_INF)


def masked_attention_square_causal(query, key, value, attn_mask=None, is_causal=False,
                                   scale=None):
    if is_causal:
        T = query.shape[-2]
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        attn_mask = causal if attn_mask is None else causal & attn_mask
    return masked_attention_additive(query, key, value, attn_mask, scale=scale)


def masked_attention_softmax_only(query, key, value, attn_mask=None, is_causal=False,
                                  scale=None):
    scores = scores_by_einsum(query, key, scale)
    T, S = scores.shape[-2:]
    if is_causal:
        scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), NEG_INF)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, NEG_INF)
    elif attn_mask is not None:
        scores = scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def masked_attention_float_causal_dropped(query, key, value, attn_mask=None, is_causal=False,
                                          scale=None):
    if attn_mask is not None and attn_mask.is_floating_point():
        is_causal = False
    return masked_attention_additive(query, key, value, attn_mask, is_causal, scale)


def masked_attention_guarding_bool_rows_only(query, key, value, attn_mask=None, is_causal=False,
                                             scale=None):
    if attn_mask is None or attn_mask.dtype == torch.bool:
        return masked_attention_additive(query, key, value, attn_mask, is_causal, scale)
    return masked_attention_softmax_only(query, key, value, attn_mask, is_causal, scale)


def masked_from_scores(scores, value, attn_mask=None, is_causal=False):
    """The rest of a correct masked attention, from (..., T, S) scores."""
    T, S = scores.shape[-2:]
    if is_causal:
        scores = scores + additive(torch.ones(T, S, dtype=torch.bool).tril(), scores.dtype)
    if attn_mask is not None:
        scores = scores + additive(attn_mask, scores.dtype)
    empty = scores.isneginf().all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    return weights @ value, weights


def masked_attention_by_fixed_axes(query, key, value, attn_mask=None, is_causal=False,
                                   scale=None):
    return masked_from_scores(scores_by_fixed_axes(query, key, scale), value, attn_mask,
                              is_causal)


def masked_attention_for_two_or_four_axes(query, key, value, attn_mask=None, is_causal=False,
                                          scale=None):
    return masked_from_scores(scores_for_two_or_four_axes(query, key, scale), value, attn_mask,
                              is_causal)


def masked_attention_detached(query, key, value, attn_mask=None, is_causal=False, scale=None):
    out, weights = masked_attention_additive(query, key, value, attn_mask, is_causal, scale)
    return weights.detach() @ value, weights


def to_mha_inverting_every_mask(attn_mask):
    return ~attn_mask


def to_mha_in_float32(attn_mask):
    return ~attn_mask if attn_mask.dtype == torch.bool else attn_mask.float()


def split_on_data(x, n_heads):
    return split_by_view(x.data, n_heads)


def merge_on_data(x):
    B, H, T, D = x.shape
    return x.data.transpose(1, 2).reshape(B, T, H * D)


class MHASquareCausal(MHAHandWritten):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        if is_causal:
            T = query.shape[1]
            causal = torch.ones(T, T, dtype=torch.bool).tril()
            attn_mask = causal if attn_mask is None else causal & attn_mask
        return super().forward(query, key, value, attn_mask)


class MHAWithFloat32Weights(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = (split_by_view(p(x), self.n_heads) for p, x in
                   ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
        out, weights = masked_attention_additive(q, k, v, attn_mask, is_causal)
        weights = weights.float()
        out = (weights @ v).transpose(1, 2).flatten(-2)
        return self.out_proj(out), weights


# (check, the kind of input of the case it fails on (labels of `kinds`, joined by " + "),
#  an answer wrong on that kind only, the mistakes the check names, if any)
WRONG_ON_ONE_KIND = [
    ("one_hot_embedding", "float64", one_hot_on_float32,
     ["float32 tensor mixed with float64 inputs"]),
    ("one_hot_embedding", "gradients", one_hot_by_data, []),
    ("one_hot_embedding", "no batch dims", one_hot_by_einsum_for_b_t,
     ["code written for one number of axes"]),
    ("one_hot_embedding", "ids that do not reach V - 1", one_hot_without_num_classes,
     ["one-hot width taken from the ids instead of the vocabulary"]),
    ("one_hot_embedding", "extra batch dims", one_hot_reshaped_to_two_axes, []),
    ("embedding_layer", "float64", EmbeddingIntoZeros, []),
    ("embedding_layer", "gradients", EmbeddingByData, []),
    ("embedding_layer", "an offset (after a cache)", EmbeddingIgnoringTheOffset,
     ["positions 0..T-1 whatever the offset"]),
    ("softmax", "dim other than -1", softmax_on_the_last_axis,
     ["ignores the dim argument (always the last axis)"]),
    ("softmax", "float64", softmax_in_float32, []),
    ("softmax", "gradients", softmax_of_values, []),
    ("softmax", "large logits", softmax_without_max,
     ["no max-subtraction (exp overflows on large logits)"]),
    ("softmax", "-inf entries", softmax_zeroing_minus_inf, []),
    ("scaled_dot_product_attention", "T != S", attention_keys_by_queries,
     ["matrix product of shapes that do not line up"]),
    ("scaled_dot_product_attention", "Dv != D", attention_scaled_by_dv, []),
    ("scaled_dot_product_attention", "float64", attention_with_float32_weights,
     ["float32 tensor mixed with float64 inputs"]),
    ("scaled_dot_product_attention", "gradients", attention_with_detached_weights, []),
    ("scaled_dot_product_attention", "scale given", attention_ignoring_scale,
     ["ignores the scale argument"]),
    ("scaled_dot_product_attention", "no batch dims", attention_by_fixed_axes,
     ["code written for one number of axes"]),
    ("scaled_dot_product_attention", "extra batch dims", attention_for_two_or_four_axes,
     ["code written for one number of axes"]),
    ("causal_mask", "T < S", causal_ignoring_s, []),
    ("causal_mask", "S left to its default", causal_without_default, []),
    ("apply_mask", "float mask (5, 7)", apply_mask_as_zero_test,
     ["float mask treated as a bool mask"]),
    ("apply_mask", "no mask", apply_mask_without_none, ["attn_mask=None not handled"]),
    ("apply_mask", "gradients", apply_mask_on_data, []),
    ("apply_mask", "no batch dims", apply_mask_expanded,
     ["code written for one number of axes"]),
    ("masked_attention", "is_causal + T != S", masked_attention_square_causal,
     ["shapes that differ along the keys' axis"]),
    ("masked_attention", "a query that may attend to nothing (bool mask)",
     masked_attention_softmax_only, ["fully masked rows give NaN"]),
    ("masked_attention", "float mask (5, 7)", masked_attention_float_as_bool,
     ["float mask treated as a bool mask"]),
    ("masked_attention", "is_causal with a bool mask", masked_attention_causal_or_mask,
     ["is_causal ignored when attn_mask is given"]),
    ("masked_attention", "is_causal with a float mask",
     masked_attention_float_causal_dropped, ["is_causal ignored when attn_mask is a float mask"]),
    ("masked_attention", "a query that may attend to nothing (float mask)",
     masked_attention_guarding_bool_rows_only, ["rows hidden by a float mask give NaN"]),
    ("masked_attention", "scale given", masked_attention_fixed_scale,
     ["ignores the scale argument"]),
    ("masked_attention", "no batch dims", masked_attention_by_fixed_axes,
     ["code written for one number of axes"]),
    ("masked_attention", "extra batch dims", masked_attention_for_two_or_four_axes,
     ["code written for one number of axes"]),
    ("masked_attention", "gradients", masked_attention_detached, []),
    ("to_mha_mask", "float mask (5, 7)", to_mha_inverting_every_mask,
     ["float mask used as a bool mask"]),
    ("to_mha_mask", "float64", to_mha_in_float32, []),
    ("split_heads", "gradients", split_on_data, []),
    ("merge_heads", "gradients", merge_on_data, []),
    ("multi_head_attention", "is_causal", MHAIgnoringCausal, ["is_causal not passed on"]),
    ("multi_head_attention", "float64", MHAWithFloat32Weights,
     ["float32 tensor mixed with float64 inputs"]),
    ("multi_head_attention", "float mask (5, 7)", MHAReadingEveryMaskAsBool,
     ["float mask treated as a bool mask"]),
    ("multi_head_attention", "a query that may attend to nothing (bool mask)", MHAByEinsumFilling,
     ["masked positions filled with a large negative number instead of -inf"]),
    ("multi_head_attention", "a query that may attend to nothing (bool mask)", MHAWithNaNRows,
     ["fully masked rows give NaN"]),
    ("multi_head_attention", "is_causal with a bool mask", MHACausalOnlyWithoutMask,
     ["is_causal ignored when attn_mask is given"]),
    ("multi_head_attention", "is_causal with a bool mask + T != S", MHASquareCausal,
     ["shapes that differ along the keys' axis"]),
]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("name", "kind", "student", "mistakes"), [
    pytest.param(*entry, id=f"{entry[0]}-{entry[2].__name__}") for entry in WRONG_ON_ONE_KIND])
def test_an_answer_wrong_on_one_kind_of_input_fails_there(name, kind, student, mistakes):
    message = failure(check_of(name), student)
    tested = message.partition("\n  tested: ")[2].partition("\n  called with")[0]
    exercise, cases = captured(name)
    case = next(c for c in cases if c.description == tested)
    assert set(kind.split(" + ")) <= set(kinds(exercise, case, cases[0])), message
    assert named_mistakes(message) == mistakes, message


if __name__ == "__main__":
    sys.exit(print(table()))
