"""Lesson 02's answers as students write them: three correct styles per exercise, shortcuts,
answers with a catalogued mistake, and slips that raise."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from attention_course import attention

NEG_INF = float("-inf")


# ---------------------------------------------------------------- correct

def softmax_by_max(x, dim=-1):
    exps = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return exps / exps.sum(dim=dim, keepdim=True)


def softmax_by_logsumexp(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))


def softmax_in_float64_on_last_axis(x, dim=-1):
    y = x.double().movedim(dim, -1)
    exps = (y - y.amax(-1, keepdim=True)).exp()
    return (exps * exps.sum(-1, keepdim=True).reciprocal()).movedim(-1, dim).to(x.dtype)


def scores_by_einsum(query, key, scale=None):
    """The scores alone, for the tests' answers of later lessons."""
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    return torch.einsum("...td,...sd->...ts", query, key) * scale


def attention_scaling_queries(query, key, value, scale=None):
    if scale is None:
        scale = query.size(-1) ** -0.5
    weights = softmax_by_logsumexp((query * scale) @ key.mT)
    return weights @ value, weights


def attention_by_loop_over_keys(query, key, value, scale=None):
    columns = [(query * key[..., s : s + 1, :]).sum(-1) for s in range(key.shape[-2])]
    scores = torch.stack(columns, dim=-1)  # (..., T, S)
    scores = scores / math.sqrt(query.shape[-1]) if scale is None else scores * scale
    weights = softmax_by_max(scores)
    out = sum(weights[..., :, s, None] * value[..., s, None, :] for s in range(key.shape[-2]))
    return out, weights


def attention_by_einsum(query, key, value, scale=None):
    weights = softmax_by_max(scores_by_einsum(query, key, scale))
    return torch.einsum("...ts,...sv->...tv", weights, value), weights


def attention_in_float64(query, key, value, scale=None):
    q, k, v = query.double(), key.double(), value.double()
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    weights = torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1)
    return (weights @ v).to(query.dtype), weights.to(query.dtype)


def additive(attn_mask, dtype):
    """A bool mask (True = may attend) as 0 / -inf floats; a float mask as it is."""
    if attn_mask.dtype != torch.bool:
        return attn_mask.to(dtype)
    return torch.zeros(attn_mask.shape, dtype=dtype).masked_fill(~attn_mask, NEG_INF)


def masked_attention_per_query(query, key, value, attn_mask=None, is_causal=False, scale=None):
    """One query at a time, in float64; the results are cast back to the input dtype. Written
    for lesson 03's masked attention, and given no mask a lesson 02 answer too."""
    q, k, v = query.double(), key.double(), value.double()
    T, S = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    bias = torch.zeros(T, S, dtype=torch.float64)
    if attn_mask is not None:
        bias = torch.broadcast_to(additive(attn_mask, q.dtype), (*attn_mask.shape[:-2], T, S))
    outs, rows = [], []
    for t in range(T):
        scores = (q[..., t, None, :] * k).sum(-1) * scale + bias[..., t, :]  # (..., S)
        if is_causal:
            scores = scores.masked_fill(torch.arange(S) > t, NEG_INF)
        keep = ~scores.isneginf().all(dim=-1, keepdim=True)
        weights = torch.softmax(scores.masked_fill(~keep, 0.0), dim=-1) * keep
        rows.append(weights)
        outs.append((weights[..., None] * v).sum(-2))
    return torch.stack(outs, -2).to(query.dtype), torch.stack(rows, -2).to(query.dtype)


CORRECT = {
    "softmax": [softmax_by_max, softmax_by_logsumexp, softmax_in_float64_on_last_axis],
    "scaled_dot_product_attention": [attention_by_einsum, attention_in_float64,
                                     masked_attention_per_query, attention_scaling_queries,
                                     attention_by_loop_over_keys],
}
REFERENCES = {
    "softmax": attention.softmax,
    "scaled_dot_product_attention": attention.scaled_dot_product_attention,
}


# ---------------------------------------------------------------- shortcuts

BUILT_INS = {  # exercise: {what the student called: their answer}
    "softmax": {
        "torch.softmax": lambda x, dim=-1: torch.softmax(x, dim),
        "F.softmax": lambda x, dim=-1: F.softmax(x, dim=dim),
        "x.softmax": lambda x, dim=-1: x.softmax(dim),
        "torch.special.softmax": lambda x, dim=-1: torch.special.softmax(x, dim),
        "log_softmax().exp()": lambda x, dim=-1: x.log_softmax(dim).exp(),
        "F.log_softmax().exp()": lambda x, dim=-1: F.log_softmax(x, dim=dim).exp(),
        "torch.special.log_softmax().exp()":
            lambda x, dim=-1: torch.special.log_softmax(x, dim).exp(),
        "nn.Softmax": lambda x, dim=-1: nn.Softmax(dim=dim)(x),
    },
}


# ---------------------------------------------------------------- catalogued mistakes

def scores_over_d_times_values(query, key, value, scale=None):
    scores = query @ key.transpose(-2, -1) / query.shape[-1]
    return scores @ value, torch.softmax(scores, dim=-1)


def attention_softmax_over_queries(query, key, value, scale=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    weights = F.softmax(scores, dim=-2)
    return weights @ value, weights


def softmax_without_max(x, dim=-1):
    exps = torch.exp(x)
    return exps / exps.sum(dim=dim, keepdim=True)


def softmax_on_the_last_axis(x, dim=-1):
    exps = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return exps / exps.sum(dim=-1, keepdim=True)


def softmax_max_on_the_last_axis(x, dim=-1):
    exps = torch.exp(x - x.amax(-1, keepdim=True))
    return exps / exps.sum(dim, keepdim=True)


def softmax_over_everything(x, dim=-1):
    exps = (x - x.max()).exp()
    return exps / exps.sum()


def attention_keys_times_queries(query, key, value, scale=None):
    weights = torch.softmax(key @ query.transpose(-2, -1) / math.sqrt(query.shape[-1]), dim=-1)
    return weights @ value, weights


MISTAKES = {  # student's answer: (exercise, the mistakes the check must name)
    scores_over_d_times_values: ("scaled_dot_product_attention",
                                 ["1/D instead of 1/sqrt(D)",
                                  "scores multiplied by V instead of the weights"]),
    attention_softmax_over_queries: ("scaled_dot_product_attention",
                                     ["softmax over the query axis"]),
    softmax_without_max: ("softmax", ["no max-subtraction (exp overflows on large logits)"]),
    softmax_on_the_last_axis: ("softmax", ["ignores the dim argument (always the last axis)"]),
    softmax_max_on_the_last_axis: ("softmax",
                                   ["max taken over the last axis instead of along dim"]),
    softmax_over_everything: ("softmax", ["max over the whole tensor instead of along dim",
                                          "sum over the whole tensor instead of along dim"]),
}


# ---------------------------------------------------------------- slips that raise

def softmax_sum_without_keepdim(x, dim=-1):
    exps = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return exps / exps.sum(dim=dim)


def softmax_max_without_keepdim(x, dim=-1):
    exps = torch.exp(x - x.amax(dim=dim))
    return exps / exps.sum(dim=dim, keepdim=True)


def softmax_max_with_its_indices(x, dim=-1):
    exps = torch.exp(x - x.max(dim=dim, keepdim=True))
    return exps / exps.sum(dim=dim, keepdim=True)


def softmax_for_matrices(x, dim=-1):
    rows, columns = x.shape
    exps = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return exps / exps.sum(dim=dim, keepdim=True)


def attention_by_dot_T(query, key, value, scale=None):
    weights = torch.softmax(query @ key.T / math.sqrt(query.shape[-1]), dim=-1)
    return weights @ value, weights


def attention_by_dot_t(query, key, value, scale=None):
    weights = torch.softmax(query @ key.t() / math.sqrt(query.shape[-1]), dim=-1)
    return weights @ value, weights


def attention_without_transpose(query, key, value, scale=None):
    weights = torch.softmax(query @ key / math.sqrt(query.shape[-1]), dim=-1)
    return weights @ value, weights


def attention_by_torch_sqrt(query, key, value, scale=None):
    weights = torch.softmax(query @ key.transpose(-2, -1) / torch.sqrt(query.shape[-1]), dim=-1)
    return weights @ value, weights


def attention_by_fixed_axes(query, key, value, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    weights = torch.softmax(query @ key.transpose(2, 3) * scale, dim=-1)
    return weights @ value, weights


def attention_by_permute(query, key, value, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    weights = torch.softmax(query @ key.permute(0, 1, 3, 2) * scale, dim=-1)
    return weights @ value, weights


def attention_by_einsum_for_4_axes(query, key, value, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    weights = torch.softmax(torch.einsum("bhtd,bhsd->bhts", query, key) * scale, dim=-1)
    return weights @ value, weights


def attention_by_einsum_with_one_letter(query, key, value, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    weights = torch.softmax(torch.einsum("bhtd,bhtd->bhtt", query, key) * scale, dim=-1)
    return weights @ value, weights


def attention_by_unpacking(query, key, value, scale=None):
    B, H, T, D = query.shape
    scores = query @ key.transpose(-2, -1) * (D ** -0.5 if scale is None else scale)
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def attention_scaled_by_none(query, key, value, scale=None):
    weights = torch.softmax(query @ key.transpose(-2, -1) * scale, dim=-1)
    return weights @ value, weights


def attention_with_a_sum_without_keepdim(query, key, value, scale=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    exps = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    weights = exps / exps.sum(dim=-1)
    return weights @ value, weights


def attention_with_values_transposed(query, key, value, scale=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    return weights @ value.transpose(-2, -1), weights


SLIPS = [  # (exercise, slip, the mistake explain_error names from the error the slip raises)
    ("softmax", softmax_sum_without_keepdim, "reduction without keepdim=True"),
    ("softmax", softmax_max_without_keepdim, "reduction without keepdim=True"),
    ("softmax", softmax_max_with_its_indices, "max(dim=...) used as a tensor"),
    ("softmax", softmax_for_matrices, "code written for one number of axes"),
    ("scaled_dot_product_attention", attention_by_dot_T,
     "every axis of key reversed (.T) instead of the last two swapped"),
    ("scaled_dot_product_attention", attention_by_dot_t, ".t() on a tensor with batch axes"),
    ("scaled_dot_product_attention", attention_without_transpose,
     "matrix product of shapes that do not line up"),
    ("scaled_dot_product_attention", attention_by_torch_sqrt,
     "torch function given a Python number"),
    ("scaled_dot_product_attention", attention_by_fixed_axes,
     "code written for one number of axes"),
    ("scaled_dot_product_attention", attention_by_permute, "code written for one number of axes"),
    ("scaled_dot_product_attention", attention_by_einsum_for_4_axes,
     "code written for one number of axes"),
    ("scaled_dot_product_attention", attention_by_einsum_with_one_letter,
     "one einsum letter for two different axes"),
    ("scaled_dot_product_attention", attention_by_unpacking, "code written for one number of axes"),
    ("scaled_dot_product_attention", attention_scaled_by_none, "scale=None used as a number"),
    ("scaled_dot_product_attention", attention_with_a_sum_without_keepdim,
     "reduction without keepdim=True"),
    ("scaled_dot_product_attention", attention_keys_times_queries,
     "matrix product of shapes that do not line up"),
    ("scaled_dot_product_attention", attention_with_values_transposed,
     "matrix product of shapes that do not line up"),
]
