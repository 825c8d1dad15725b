"""Lesson 03's answers as students write them: three correct styles per exercise, a shortcut,
answers with a catalogued mistake (some recognised by a sign), and slips that raise."""

import math

import torch
import torch.nn.functional as F

from attention_course import attention, masks
from attention_course.checks.lesson03 import LARGE_NEGATIVE
from helpers.answers.lesson02 import NEG_INF, additive, masked_attention_per_query, scores_by_einsum

# ---------------------------------------------------------------- correct

def causal_by_comparison(T, S=None, device=None):
    S = T if S is None else S
    return torch.arange(S, device=device)[None, :] <= torch.arange(T, device=device)[:, None]


def causal_by_loops(T, S=None, device=None):
    S = S or T
    return torch.tensor([[s <= t for s in range(S)] for t in range(T)], device=device)


def causal_by_inverted_triu(T, S=None, device=None):
    future = torch.ones(T, T if S is None else S, dtype=torch.bool, device=device).triu(1)
    return ~future


def padding_by_comparison(lengths, S):
    return (torch.arange(S) < lengths[:, None])[:, None, None, :]


def padding_by_loops(lengths, S):
    rows = [[s < length for s in range(S)] for length in lengths.tolist()]
    return torch.tensor(rows, dtype=torch.bool).view(-1, 1, 1, S)


def padding_by_expand(lengths, S):
    positions = torch.arange(S).expand(len(lengths), S)
    return positions.lt(lengths.unsqueeze(1)).unsqueeze(1).unsqueeze(1)


def apply_by_masked_fill(scores, attn_mask):
    if attn_mask is None:
        return scores
    if attn_mask.dtype == torch.bool:
        return scores.masked_fill(attn_mask.logical_not(), NEG_INF)
    return scores + attn_mask


def apply_by_where(scores, attn_mask):
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        return torch.where(attn_mask, scores, torch.tensor(NEG_INF, dtype=scores.dtype))
    return scores if attn_mask is None else torch.add(scores, attn_mask)


def apply_by_adding(scores, attn_mask):
    return scores if attn_mask is None else scores + additive(attn_mask, scores.dtype)


def masked_attention_additive(query, key, value, attn_mask=None, is_causal=False, scale=None):
    """Every mask becomes an additive float mask; empty rows are zeroed around the softmax."""
    T, S, D = query.shape[-2], key.shape[-2], query.shape[-1]
    scores = query @ key.transpose(-2, -1) * (D ** -0.5 if scale is None else scale)
    if is_causal:
        scores = scores + additive(torch.ones(T, S, dtype=torch.bool).tril(), scores.dtype)
    if attn_mask is not None:
        scores = scores + additive(attn_mask, scores.dtype)
    empty = scores.isneginf().all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    return weights @ value, weights


def masked_attention_where(query, key, value, attn_mask=None, is_causal=False, scale=None):
    """A bool `allowed` mask and torch.where; a hand-written softmax that leaves empty rows 0."""
    scores = scores_by_einsum(query, key, scale)
    T, S = scores.shape[-2:]
    allowed = torch.ones(T, S, dtype=torch.bool)
    if is_causal:
        allowed = torch.arange(S) <= torch.arange(T)[:, None]
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        allowed = allowed & attn_mask
    elif attn_mask is not None:
        scores = scores + attn_mask
    scores = torch.where(allowed, scores, NEG_INF)
    top = scores.amax(dim=-1, keepdim=True)
    exps = torch.exp(scores - torch.where(top.isfinite(), top, 0.0))
    total = exps.sum(dim=-1, keepdim=True)
    weights = exps / torch.where(total > 0, total, 1.0)
    return torch.einsum("...ts,...sv->...tv", weights, value), weights


def packed_by_boolean_indexing(query, key, value, lengths, is_causal=False):
    """Pad with a (B, L) bool table of the real tokens, as the lesson's solution does."""
    B, L = len(lengths), int(lengths.max())
    real = torch.arange(L) < lengths[:, None]  # (B, L)
    q, k, v = (x.new_zeros(B, L, x.shape[-1]) for x in (query, key, value))
    q[real], k[real], v[real] = query, key, value
    keys = masks.padding_mask(lengths, L)[:, 0]  # (B, 1, L)
    out, _ = masked_attention_additive(q, k, v, keys, is_causal)
    return out[real]


def packed_by_split_and_pad(query, key, value, lengths, is_causal=False):
    """torch.split and pad_sequence, with a head axis so that the (B, 1, 1, L) mask fits."""
    sizes = lengths.tolist()
    q, k, v = (torch.nn.utils.rnn.pad_sequence(x.split(sizes), batch_first=True)[:, None]
               for x in (query, key, value))  # (B, 1, L, .)
    L = q.shape[-2]
    allowed = torch.arange(L) < lengths[:, None, None, None]  # (B, 1, 1, L)
    if is_causal:
        allowed = allowed & torch.ones(L, L, dtype=torch.bool).tril()
    out, _ = masked_attention_where(q, k, v, allowed)
    return torch.cat([out[b, 0, :n] for b, n in enumerate(sizes)])


def packed_with_an_additive_mask(query, key, value, lengths, is_causal=False):
    """Offsets of each sequence from the cumulative lengths, a float mask, einsum in float64."""
    starts = torch.cumsum(lengths, 0) - lengths
    L, wide = int(lengths.max()), torch.float64
    position = torch.arange(L)
    real = position < lengths[:, None]  # (B, L)
    rows = (starts[:, None] + position).clamp(max=max(len(query) - 1, 0))  # (B, L) packed row
    q, k, v = (torch.where(real[..., None], x.to(wide)[rows], 0.0) for x in (query, key, value))
    hidden = ~real[:, None, :]  # (B, 1, L): pad keys
    if is_causal:
        hidden = hidden | (position[None, :] > position[:, None])
    scores = torch.einsum("btd,bsd->bts", q, k) / math.sqrt(query.shape[-1])
    weights = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
    out = torch.einsum("bts,bsv->btv", weights, v)
    return out[real].to(query.dtype)


def to_mha_by_not(attn_mask):
    return ~attn_mask if attn_mask.dtype == torch.bool else attn_mask


def to_mha_by_logical_not(attn_mask):
    return attn_mask.logical_not() if attn_mask.dtype is torch.bool else attn_mask.clone()


def to_mha_by_comparison(attn_mask):
    if attn_mask.is_floating_point():
        return attn_mask + 0.0
    return attn_mask == False  # noqa: E712 (an element-wise comparison, not an `if`)


CORRECT = {
    "causal_mask": [causal_by_comparison, causal_by_loops, causal_by_inverted_triu],
    "padding_mask": [padding_by_comparison, padding_by_loops, padding_by_expand],
    "apply_mask": [apply_by_masked_fill, apply_by_where, apply_by_adding],
    "masked_attention": [masked_attention_additive, masked_attention_where,
                         masked_attention_per_query],
    "packed_attention": [packed_by_boolean_indexing, packed_by_split_and_pad,
                         packed_with_an_additive_mask],
    "to_mha_mask": [to_mha_by_not, to_mha_by_logical_not, to_mha_by_comparison],
}
REFERENCES = {
    "causal_mask": masks.causal_mask,
    "padding_mask": masks.padding_mask,
    "apply_mask": masks.apply_mask,
    "masked_attention": attention.scaled_dot_product_attention,
    "packed_attention": attention.packed_attention,
    "to_mha_mask": masks.to_mha_mask,
}


# ---------------------------------------------------------------- shortcuts

def attention_via_torch(query, key, value, attn_mask=None, is_causal=False, scale=None):
    out = F.scaled_dot_product_attention(query, key, value, attn_mask, is_causal=is_causal,
                                         scale=scale)
    return out, masked_attention_additive(query, key, value, attn_mask, is_causal, scale)[1]


BUILT_INS = {  # exercise: {what the student called: their answer} (lesson 02's too)
    "scaled_dot_product_attention": {"F.scaled_dot_product_attention": attention_via_torch},
    "masked_attention": {"F.scaled_dot_product_attention": attention_via_torch},
}


# ---------------------------------------------------------------- mistakes recognised by a sign

def apply_mask_filling(fill: float):
    def apply_mask(scores, attn_mask):
        if attn_mask is None:
            return scores
        if attn_mask.dtype == torch.bool:
            return scores.masked_fill(~attn_mask, fill)
        return scores + attn_mask
    return apply_mask


def masked_attention_filling(fill: float):
    def masked_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
        scores = query @ key.transpose(-2, -1) * (scale or 1 / math.sqrt(query.shape[-1]))
        T, S = scores.shape[-2:]
        if is_causal:
            scores = scores.masked_fill(torch.ones(T, S).tril() == 0, fill)
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, fill)
        elif attn_mask is not None:
            scores = scores + attn_mask
        weights = F.softmax(scores, dim=-1)
        return weights @ value, weights
    return masked_attention


SIGN_EXAMPLES = {  # (exercise, mistake) -> {what the student did: their function}
    ("apply_mask", LARGE_NEGATIVE): {
        "fill -1e4": apply_mask_filling(-1e4), "fill -1e9": apply_mask_filling(-1e9)},
    ("masked_attention", LARGE_NEGATIVE): {
        "fill -1e9": masked_attention_filling(-1e9), "fill -1e4": masked_attention_filling(-1e4)},
}


# ---------------------------------------------------------------- catalogued mistakes

def causal_by_triu(T, S=None, device=None):
    return torch.triu(torch.ones(T, S or T, device=device)).bool()


def causal_without_diagonal(T, S=None, device=None):
    return torch.ones(T, S or T, dtype=torch.bool, device=device).tril(-1)


def causal_hiding_the_past(T, S=None, device=None):
    return torch.ones(T, S or T, dtype=torch.bool, device=device).triu(1)


def padding_inclusive(lengths, S):
    return (torch.arange(S)[None, :] <= lengths[:, None]).view(-1, 1, 1, S)


def padding_on_queries(lengths, S):
    return (torch.arange(S) < lengths[:, None])[:, None, :, None]


def apply_true_hides(scores, attn_mask):
    if attn_mask is None or attn_mask.is_floating_point():
        return scores if attn_mask is None else scores + attn_mask
    return scores.masked_fill(attn_mask, float("-inf"))


def apply_by_multiplying(scores, attn_mask):
    if attn_mask is None or attn_mask.is_floating_point():
        return scores if attn_mask is None else scores + attn_mask
    return scores * attn_mask


def allowed_keys(T, S, attn_mask, is_causal):
    """The bool mask a student builds first: causal and/or attn_mask (bool masks only)."""
    allowed = torch.ones(T, S, dtype=torch.bool).tril() if is_causal else torch.ones(T, S) > 0
    return allowed if attn_mask is None else allowed & attn_mask


def masked_attention_hiding_after_softmax(query, key, value, attn_mask=None, is_causal=False,
                                          scale=None):
    scores = query @ key.mT / math.sqrt(query.shape[-1])
    weights = torch.softmax(scores, dim=-1) * allowed_keys(*scores.shape[-2:], attn_mask,
                                                           is_causal)
    return weights @ value, weights


def masked_attention_multiplying(query, key, value, attn_mask=None, is_causal=False,
                                 scale=None):
    scores = query @ key.mT / math.sqrt(query.shape[-1])
    scores = scores * allowed_keys(*scores.shape[-2:], attn_mask, is_causal)
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def masked_attention_without_causal(query, key, value, attn_mask=None, is_causal=False,
                                    scale=None):
    return masked_attention_additive(query, key, value, attn_mask, scale=scale)


def apply_every_mask_as_bool(scores, attn_mask):
    return scores if attn_mask is None else scores.masked_fill(attn_mask == 0, float("-inf"))


def masked_attention_fixed_scale(query, key, value, attn_mask=None, is_causal=False, scale=None):
    return masked_attention_additive(query, key, value, attn_mask, is_causal)


def masked_attention_causal_or_mask(query, key, value, attn_mask=None, is_causal=False,
                                    scale=None):
    if attn_mask is None and is_causal:
        T, S = query.shape[-2], key.shape[-2]
        attn_mask = torch.ones(T, S, dtype=torch.bool).tril()
    return masked_attention_additive(query, key, value, attn_mask, scale=scale)


def masked_attention_float_as_bool(query, key, value, attn_mask=None, is_causal=False,
                                   scale=None):
    if attn_mask is not None and attn_mask.is_floating_point():
        attn_mask = attn_mask != 0
    return masked_attention_additive(query, key, value, attn_mask, is_causal, scale)


def packed_sequences(query, key, value, lengths):
    """(B, L, .) zero-padded copies of the packed inputs, and the (B, L) table of real tokens."""
    B, L = len(lengths), int(lengths.max())
    real = torch.arange(L) < lengths[:, None]
    return [x.new_zeros(B, L, x.shape[-1]).index_put((real,), x) for x in (query, key, value)], real


def packed_with_pad_queries_hidden(query, key, value, lengths, is_causal=False):
    (q, k, v), real = packed_sequences(query, key, value, lengths)
    out, _ = masked_attention_additive(q, k, v, real[:, :, None], is_causal)  # (B, L, 1)
    return out[real]


def packed_or_causal(query, key, value, lengths, is_causal=False):
    (q, k, v), real = packed_sequences(query, key, value, lengths)
    allowed = real[:, None, :]  # (B, 1, L)
    if is_causal:
        L = q.shape[1]
        allowed = allowed | torch.ones(L, L, dtype=torch.bool).tril()
    out, _ = masked_attention_additive(q, k, v, allowed)
    return out[real]


def packed_as_one_sequence(query, key, value, lengths, is_causal=False):
    out, _ = masked_attention_additive(query, key, value, is_causal=is_causal)
    return out


def packed_returning_every_row(query, key, value, lengths, is_causal=False):
    (q, k, v), real = packed_sequences(query, key, value, lengths)
    out, _ = masked_attention_additive(q, k, v, real[:, None, :], is_causal)
    return out.reshape(-1, out.shape[-1])


def mha_mask_unchanged(attn_mask):
    return attn_mask


MISTAKES = {  # student's answer: (exercise, the mistakes the check must name)
    causal_by_triu: ("causal_mask", ["causal mask transposed (the future is visible)"]),
    causal_without_diagonal: ("causal_mask",
                              ["causal mask excludes the diagonal (a token cannot see itself)"]),
    causal_hiding_the_past: ("causal_mask", ["mask polarity inverted"]),
    padding_inclusive: ("padding_mask",
                        ["padding mask off by one (the first pad token is visible)"]),
    padding_on_queries: ("padding_mask", ["padding mask on the query axis"]),
    apply_true_hides: ("apply_mask", ["mask polarity inverted"]),
    apply_by_multiplying: ("apply_mask", ["masked positions filled with 0 instead of -inf"]),
    masked_attention_hiding_after_softmax: ("masked_attention",
                                            ["mask applied after the softmax"]),
    masked_attention_multiplying: ("masked_attention",
                                   ["masked positions filled with 0 instead of -inf"]),
    masked_attention_without_causal: ("masked_attention", ["is_causal ignored"]),
    masked_attention_fixed_scale: ("masked_attention", ["ignores the scale argument"]),
    masked_attention_causal_or_mask: ("masked_attention",
                                      ["is_causal ignored when attn_mask is given"]),
    masked_attention_float_as_bool: ("masked_attention", ["float mask treated as a bool mask"]),
    apply_every_mask_as_bool: ("apply_mask", ["float mask treated as a bool mask"]),
    mha_mask_unchanged: ("to_mha_mask", ["bool mask not inverted for nn.MultiheadAttention"]),
    packed_with_pad_queries_hidden: (
        "packed_attention", ["pad keys not hidden (no padding mask, or one on the queries' axis)"]),
    packed_or_causal: ("packed_attention", [
        "causal mask lost (is_causal ignored, or combined with the padding mask by OR)"]),
    packed_as_one_sequence: ("packed_attention", ["the packed tokens attended as one sequence"]),
    packed_returning_every_row: ("packed_attention", ["pad rows returned with the real ones"]),
}


# ---------------------------------------------------------------- slips that raise

def causal_by_tril_of_sizes(T, S=None, device=None):
    return torch.tril(T, T if S is None else S).bool()


def causal_made_then_moved(T, S=None, device=None):
    S = T if S is None else S
    return torch.ones(T, S, dtype=torch.bool).tril().to(device)


def padding_without_a_column(lengths, S):
    return (torch.arange(S) < lengths)[:, None, None, :]


def apply_mask_without_none(scores, attn_mask):
    if attn_mask.dtype == torch.bool:
        return scores.masked_fill(~attn_mask, NEG_INF)
    return scores + attn_mask


def apply_mask_inverting_every_mask(scores, attn_mask):
    return scores if attn_mask is None else scores.masked_fill(~attn_mask, NEG_INF)


def apply_mask_if_mask(scores, attn_mask):
    if attn_mask:
        return scores.masked_fill(~attn_mask, NEG_INF)
    return scores


def masked_attention_with_a_square_causal_mask(query, key, value, attn_mask=None,
                                               is_causal=False, scale=None):
    T = query.shape[-2]
    if is_causal:
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        attn_mask = causal if attn_mask is None else causal & attn_mask
    return masked_attention_additive(query, key, value, attn_mask, scale=scale)


def masked_attention_combining_with_and(query, key, value, attn_mask=None, is_causal=False,
                                        scale=None):
    if is_causal:
        causal = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool).tril()
        attn_mask = causal if attn_mask is None else causal & attn_mask
    return masked_attention_additive(query, key, value, attn_mask, scale=scale)


def masked_attention_filling_float_masks(query, key, value, attn_mask=None, is_causal=False,
                                         scale=None):
    scores = query @ key.transpose(-2, -1) * (query.shape[-1] ** -0.5 if scale is None
                                              else scale)
    if is_causal:
        scores = scores.masked_fill(torch.ones(*scores.shape[-2:]).tril() == 0, NEG_INF)
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask.logical_not() if attn_mask.dtype == torch.bool
                                    else attn_mask, NEG_INF)
    empty = scores.isneginf().all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    return weights @ value, weights


def to_mha_inverting_every_mask(attn_mask):
    return ~attn_mask


def apply_mask_transposed(scores, attn_mask):
    """A (T, S) mask turned over before use: its axes no longer line up with the scores'."""
    if attn_mask is None or attn_mask.is_floating_point():
        return scores if attn_mask is None else scores + attn_mask
    return scores.masked_fill(~attn_mask.mT, NEG_INF)


def packed_with_a_four_axis_mask(query, key, value, lengths, is_causal=False):
    """The (B, 1, 1, L) padding mask against (B, L, L) scores: they broadcast to (B, B, L, L)."""
    (q, k, v), real = packed_sequences(query, key, value, lengths)
    out, _ = masked_attention_additive(q, k, v, masks.padding_mask(lengths, q.shape[1]),
                                       is_causal)
    return out[real]


SLIPS = [  # (exercise, slip, the mistake explain_error names from the error the slip raises)
    ("apply_mask", apply_mask_transposed, "two tensors whose axes do not line up"),
    ("causal_mask", causal_by_tril_of_sizes, "torch function given a Python number"),
    ("causal_mask", causal_made_then_moved, "device argument ignored"),
    ("padding_mask", padding_without_a_column,
     "lengths compared with the positions without lining up their axes"),
    ("apply_mask", apply_mask_without_none, "attn_mask=None not handled"),
    ("apply_mask", apply_mask_inverting_every_mask, "float mask used as a bool mask"),
    ("apply_mask", apply_mask_if_mask, "a tensor used as a single True/False"),
    ("masked_attention", masked_attention_with_a_square_causal_mask,
     "shapes that differ along the keys' axis"),
    ("masked_attention", masked_attention_filling_float_masks, "float mask used as a bool mask"),
    ("to_mha_mask", to_mha_inverting_every_mask, "float mask used as a bool mask"),
    ("packed_attention", packed_with_a_four_axis_mask,
     "a (B, 1, 1, S) padding mask against scores with no head axis"),
]
# Slips a check cannot report yet: torch raises their error as NotImplementedError, which a
# check takes for the exercise's unwritten stub. The text is torch's own.
RAISED_AS_NOT_IMPLEMENTED = [
    ("masked_attention", masked_attention_combining_with_and, "float mask used as a bool mask"),
]
