"""Correct student answers written in different styles, and helpers for the tests of the checks.

Every function or class in ``CORRECT`` is a plausible correct answer that its check must accept.
The wrong answers live in the test files, next to the mistake each must be diagnosed as.
"""

import io
import math
import re
from contextlib import redirect_stdout

import pytest
import torch
import torch.nn.functional as F
from test_lesson06_answers import CORRECT as LESSON06_CORRECT
from test_lesson06_answers import REFERENCES as LESSON06_REFERENCES
from test_lesson07_answers import CORRECT as LESSON07_CORRECT
from test_lesson07_answers import REFERENCES as LESSON07_REFERENCES
from torch import nn

from attention_course import attention, checks, embeddings, masks, model, multihead, training
from attention_course.lessons import LESSONS

NEG_INF = float("-inf")
# every practice the student writes; lesson 05's trained model is tested in test_copy_task.py
CHECK_NAMES = tuple(p.name for lesson in LESSONS for p in lesson.practice if p.written)


def check_of(name: str):
    """The check function for an exercise name, e.g. "softmax" -> check_softmax."""
    return getattr(checks, f"check_{name}")


def failure(check, student, seed: int = 0) -> str:
    """The message of the AssertionError ``check`` raises for ``student``; no ``ok:`` printed."""
    printed = io.StringIO()
    with redirect_stdout(printed), pytest.raises(AssertionError) as info:
        check(student, seed=seed)
    assert "ok:" not in printed.getvalue()
    return str(info.value)


def named_mistakes(message: str) -> list[str]:
    """The catalogued mistake names a failure message gives, in order ([] if none)."""
    found = re.search(r'This is a known mistake: (.*)\.\n', message)
    return re.findall(r'"([^"]+)"', found.group(1)) if found else []


# ---------------------------------------------------------------- lesson 01: embeddings

def one_hot_by_indexing(token_ids, weight):
    return weight[token_ids]


def one_hot_by_einsum(token_ids, weight):
    vocabulary = torch.arange(weight.shape[0])
    one_hot = (token_ids[..., None] == vocabulary).to(weight.dtype)  # (..., V)
    return torch.einsum("...v,vc->...c", one_hot, weight)


def one_hot_by_index_select(token_ids, weight):
    rows = torch.index_select(weight, 0, token_ids.flatten())
    return rows.reshape(*token_ids.shape, weight.shape[1])


def positions_by_loops(seq_len, d_model):
    rows = [[math.sin(t / 10000 ** (j / d_model)) if j % 2 == 0
             else math.cos(t / 10000 ** ((j - 1) / d_model)) for j in range(d_model)]
            for t in range(seq_len)]
    return torch.tensor(rows, dtype=torch.float32)


def positions_by_stacking(seq_len, d_model):
    t = torch.arange(seq_len, dtype=torch.float64)[:, None]
    frequencies = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2) / d_model)
    angles = t * frequencies  # (T, ceil(C/2))
    pairs = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (T, C/2, 2)
    return pairs.flatten(-2)[:, :d_model].float()


def positions_by_where(seq_len, d_model):
    j = torch.arange(d_model)
    angles = torch.arange(seq_len)[:, None] / torch.pow(10000.0, (j - j % 2) / d_model)
    return torch.where(j % 2 == 0, torch.sin(angles), torch.cos(angles)).float()


def embed_by_indexing(token_ids, weight, pe):
    T, C = token_ids.shape[-1], weight.shape[-1]
    return weight[token_ids] * math.sqrt(C) + pe[:T]


def embed_by_einsum(token_ids, weight, pe):
    one_hot = F.one_hot(token_ids, weight.shape[0]).to(weight.dtype)
    tokens = torch.einsum("btv,vc->btc", one_hot, weight)
    return tokens * weight.shape[1] ** 0.5 + pe.narrow(0, 0, token_ids.shape[1]).unsqueeze(0)


def embed_in_float64(token_ids, weight, pe):
    C = weight.shape[-1]
    tokens = weight.double()[token_ids] / (1 / math.sqrt(C))
    return (tokens + pe.double()[: token_ids.shape[-1]]).to(weight.dtype)


# ---------------------------------------------------------------- lesson 02: attention

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
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    return torch.einsum("...td,...sd->...ts", query, key) * scale


def scores_by_scaling_queries(query, key, scale=None):
    if scale is None:
        scale = query.size(-1) ** -0.5
    return (query * scale) @ key.mT


def scores_by_loop_over_keys(query, key, scale=None):
    columns = [(query * key[..., s : s + 1, :]).sum(-1) for s in range(key.shape[-2])]
    scores = torch.stack(columns, dim=-1)  # (..., T, S)
    return scores / math.sqrt(query.shape[-1]) if scale is None else scores * scale


def attention_by_einsum(query, key, value, scale=None):
    weights = softmax_by_max(scores_by_einsum(query, key, scale))
    return torch.einsum("...ts,...sv->...tv", weights, value), weights


def attention_in_float64(query, key, value, scale=None):
    q, k, v = query.double(), key.double(), value.double()
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    weights = torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1)
    return (weights @ v).to(query.dtype), weights.to(query.dtype)


# ---------------------------------------------------------------- lesson 03: masks

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


def additive(attn_mask, dtype):
    """A bool mask (True = may attend) as 0 / -inf floats; a float mask as it is."""
    if attn_mask.dtype != torch.bool:
        return attn_mask.to(dtype)
    return torch.zeros(attn_mask.shape, dtype=dtype).masked_fill(~attn_mask, NEG_INF)


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


def masked_attention_per_query(query, key, value, attn_mask=None, is_causal=False, scale=None):
    """One query at a time, in float64; the results are cast back to the input dtype."""
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


def to_mha_by_not(attn_mask):
    return ~attn_mask if attn_mask.dtype == torch.bool else attn_mask


def to_mha_by_logical_not(attn_mask):
    return attn_mask.logical_not() if attn_mask.dtype is torch.bool else attn_mask.clone()


def to_mha_by_comparison(attn_mask):
    if attn_mask.is_floating_point():
        return attn_mask + 0.0
    return attn_mask == False  # noqa: E712 (an element-wise comparison, not an `if`)


# ---------------------------------------------------------------- lesson 04: multi-head

def split_by_view(x, n_heads):
    B, T, C = x.shape
    return x.view(B, T, n_heads, C // n_heads).transpose(1, 2)


def split_by_chunks(x, n_heads):
    return torch.stack(x.chunk(n_heads, dim=-1), dim=-3)


def split_by_permute(x, n_heads):
    *batch, T, C = x.shape
    return x.reshape(*batch, T, n_heads, C // n_heads).permute(0, 2, 1, 3)


def merge_by_transpose(x):
    B, H, T, D = x.shape
    return x.transpose(1, 2).reshape(B, T, H * D)


def merge_by_concatenation(x):
    return torch.cat(x.unbind(dim=-3), dim=-1)


def merge_by_permute(x):
    return x.permute(0, 2, 1, 3).contiguous().view(x.shape[0], x.shape[2], -1)


class StudentMHA(nn.Module):
    """The constructor the notebook gives; the student writes ``forward``."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        raise NotImplementedError()


class MHAByEinsum(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        H, D = self.n_heads, self.d_head
        q = self.q_proj(query).unflatten(-1, (H, D))  # (B, T, H, D)
        k = self.k_proj(key).unflatten(-1, (H, D))
        v = self.v_proj(value).unflatten(-1, (H, D))
        scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(D)
        T, S = scores.shape[-2:]
        if is_causal:
            scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), NEG_INF)
        if attn_mask is not None:
            scores = scores + additive(attn_mask, scores.dtype)
        sees = ~scores.isneginf().all(dim=-1, keepdim=True)  # False where a query sees no key
        weights = torch.softmax(scores.where(sees, 0.0), dim=-1) * sees
        out = torch.einsum("bhts,bshd->bthd", weights, v).flatten(-2)
        return self.out_proj(out), weights


class MHAFromEarlierLessons(StudentMHA):
    """Reuses the course's attention function and head helpers: allowed, not shortcuts."""

    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = (multihead.split_heads(proj(x), self.n_heads) for proj, x in
                   ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
        out, weights = attention.scaled_dot_product_attention(q, k, v, attn_mask,
                                                             is_causal=is_causal)
        return self.out_proj(multihead.merge_heads(out)), weights


class MHAPerHead(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        B, T, S, H = query.shape[0], query.shape[1], key.shape[1], self.n_heads
        outs, weights = [], []
        for h in range(H):
            part = slice(h * self.d_head, (h + 1) * self.d_head)
            mask = None if attn_mask is None else attn_mask.broadcast_to(B, H, T, S)[:, h]
            out, w = masked_attention_additive(q[..., part], k[..., part], v[..., part], mask,
                                               is_causal)
            outs.append(out)
            weights.append(w)
        return self.out_proj(torch.cat(outs, dim=-1)), torch.stack(weights, dim=1)


# ---------------------------------------------------------------- lesson 05: the block, the loss

class StudentCausalSelfAttention(nn.Module):
    """The constructor the notebook gives; the student writes ``forward``."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        self.attn = multihead.MultiHeadAttention(d_model, n_heads, dropout)
        self.dropout = dropout

    def forward(self, x):
        raise NotImplementedError()


class AttentionLayerByIsCausal(StudentCausalSelfAttention):
    def forward(self, x):
        out, weights = self.attn(x, x, x, is_causal=True)
        return F.dropout(out, self.dropout, training=self.training), weights


class AttentionLayerByTril(StudentCausalSelfAttention):
    def forward(self, x):
        T = x.shape[1]
        allowed = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
        out, weights = self.attn(x, x, x, attn_mask=allowed)
        if self.training:
            out = F.dropout(out, self.dropout)
        return out, weights


class AttentionLayerByCourseMask(StudentCausalSelfAttention):
    def forward(self, x):
        out, weights = self.attn(query=x, key=x, value=x,
                                 attn_mask=masks.causal_mask(x.shape[-2], device=x.device))
        return nn.functional.dropout(out, p=self.dropout, training=self.training), weights


class MLPByFunctional(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.fc = nn.Linear(d_model, d_ff)
        self.proj = nn.Linear(d_ff, d_model)
        self.dropout = dropout

    def forward(self, x):
        return F.dropout(self.proj(F.gelu(self.fc(x))), self.dropout, self.training)


class MLPByModules(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.fc = nn.Linear(d_model, d_ff)
        self.act = nn.GELU()
        self.proj = nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.proj(self.act(self.fc(x))))


class MLPByErf(MLPByFunctional):
    def forward(self, x):
        h = self.fc(x)
        h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))  # the exact GELU
        out = self.proj(h)
        return F.dropout(out, self.dropout) if self.training else out


class StudentBlock(nn.Module):
    """The constructor the notebook gives; the student writes ``forward``."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
        super().__init__()
        self.attn_norm = nn.LayerNorm(d_model)
        self.attn = AttentionLayerByIsCausal(d_model, n_heads, dropout)
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp = MLPByFunctional(d_model, d_ff, dropout)

    def forward(self, x):
        raise NotImplementedError()


class BlockInTwoLines(StudentBlock):
    def forward(self, x):
        attended, weights = self.attn(self.attn_norm(x))
        x = x + attended
        return x + self.mlp(self.mlp_norm(x)), weights


class BlockWithNames(StudentBlock):
    def forward(self, x):
        h = self.attn_norm(x)
        a, w = self.attn(h)
        y = a + x
        m = self.mlp(self.mlp_norm(y))
        return m + y, w


class BlockByLoop(StudentBlock):
    def forward(self, x):
        weights = None
        for norm, sublayer in ((self.attn_norm, self.attn), (self.mlp_norm, self.mlp)):
            out = sublayer(norm(x))
            if isinstance(out, tuple):
                out, weights = out
            x = x + out
        return x, weights


def loss_by_slicing(model, sequences, n):
    logits = model(sequences[:, :-1])[:, n:]  # (B, n, V)
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), sequences[:, n + 1:].reshape(-1))


def loss_by_position_mask(model, sequences, n):
    inputs, targets = sequences[:, :-1], sequences[:, 1:]
    answer = torch.arange(inputs.shape[1]) >= n  # (2n,)
    logits = model(inputs)
    return F.cross_entropy(logits[:, answer].transpose(1, 2), targets[:, answer])


def loss_by_gather(model, sequences, n):
    log_probs = model(sequences[:, :-1]).log_softmax(dim=-1)  # (B, 2n, V)
    picked = log_probs.gather(-1, sequences[:, 1:, None]).squeeze(-1)  # (B, 2n)
    return -picked[:, n:].mean()


CORRECT = {
    "one_hot_embedding": [one_hot_by_indexing, one_hot_by_einsum, one_hot_by_index_select],
    "sinusoidal_positional_encoding": [positions_by_loops, positions_by_stacking,
                                       positions_by_where],
    "token_and_position_embedding": [embed_by_indexing, embed_by_einsum, embed_in_float64],
    "softmax": [softmax_by_max, softmax_by_logsumexp, softmax_in_float64_on_last_axis],
    "attention_scores": [scores_by_einsum, scores_by_scaling_queries, scores_by_loop_over_keys],
    "scaled_dot_product_attention": [attention_by_einsum, attention_in_float64,
                                     masked_attention_per_query],
    "causal_mask": [causal_by_comparison, causal_by_loops, causal_by_inverted_triu],
    "padding_mask": [padding_by_comparison, padding_by_loops, padding_by_expand],
    "apply_mask": [apply_by_masked_fill, apply_by_where, apply_by_adding],
    "masked_attention": [masked_attention_additive, masked_attention_where,
                         masked_attention_per_query],
    "to_mha_mask": [to_mha_by_not, to_mha_by_logical_not, to_mha_by_comparison],
    "split_heads": [split_by_view, split_by_chunks, split_by_permute],
    "merge_heads": [merge_by_transpose, merge_by_concatenation, merge_by_permute],
    "multi_head_attention": [MHAByEinsum, MHAFromEarlierLessons, MHAPerHead],
    "causal_self_attention": [AttentionLayerByIsCausal, AttentionLayerByTril,
                              AttentionLayerByCourseMask],
    "mlp": [MLPByFunctional, MLPByModules, MLPByErf],
    "decoder_block": [BlockInTwoLines, BlockWithNames, BlockByLoop],
    "copy_task_loss": [loss_by_slicing, loss_by_position_mask, loss_by_gather],
}


# the reference each check compares with, which the student must not call
REFERENCES = {
    "one_hot_embedding": embeddings.one_hot_embedding,
    "sinusoidal_positional_encoding": embeddings.sinusoidal_positional_encoding,
    "token_and_position_embedding": embeddings.token_and_position_embedding,
    "softmax": attention.softmax,
    "attention_scores": attention.attention_scores,
    "scaled_dot_product_attention": attention.scaled_dot_product_attention,
    "causal_mask": masks.causal_mask,
    "padding_mask": masks.padding_mask,
    "apply_mask": masks.apply_mask,
    "masked_attention": attention.scaled_dot_product_attention,
    "to_mha_mask": masks.to_mha_mask,
    "split_heads": multihead.split_heads,
    "merge_heads": multihead.merge_heads,
    "multi_head_attention": multihead.MultiHeadAttention.forward,
    "causal_self_attention": model.CausalSelfAttention.forward,
    "mlp": model.MLP.forward,
    "decoder_block": model.DecoderBlock.forward,
    "copy_task_loss": training.copy_task_loss,
}


# lesson 06's answers and references are kept in test_lesson06_answers.py
CORRECT.update(LESSON06_CORRECT)
REFERENCES.update(LESSON06_REFERENCES)

# lesson 07's answers and references are kept in test_lesson07_answers.py
CORRECT.update(LESSON07_CORRECT)
REFERENCES.update(LESSON07_REFERENCES)
