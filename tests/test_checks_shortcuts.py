"""Shortcuts are refused: calling the exercise's own reference, or the PyTorch built-in it
re-implements. Functions of earlier lessons (and earlier exercises) stay allowed."""

import pytest
import torch
import torch.nn.functional as F
from check_solutions import (
    CHECK_NAMES,
    NEG_INF,
    REFERENCES,
    AttentionLayerByCourseMask,
    MHAFromEarlierLessons,
    StudentBlock,
    StudentCausalSelfAttention,
    StudentMHA,
    additive,
    check_of,
    failure,
    masked_attention_additive,
)
from test_lesson06_answers import CALLING_THE_REFERENCE as LESSON06_CALLING_THE_REFERENCE
from torch import nn

from attention_course import attention, model, multihead

SHORTCUT = "Shortcut refused"


def calling(reference):
    def student(*args, **kwargs):
        return reference(*args, **kwargs)
    return student


class MHACallingReference(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        return multihead.MultiHeadAttention.forward(self, query, key, value, attn_mask, is_causal)


class AttentionLayerCallingReference(StudentCausalSelfAttention):
    def forward(self, x):
        return model.CausalSelfAttention.forward(self, x)


class MLPCallingReference(model.MLP):
    def forward(self, x):
        return model.MLP.forward(self, x)


class BlockCallingReference(StudentBlock):
    def forward(self, x):
        return model.DecoderBlock.forward(self, x)


CALLING_THE_REFERENCE = {"multi_head_attention": MHACallingReference,
                         "causal_self_attention": AttentionLayerCallingReference,
                         "mlp": MLPCallingReference, "decoder_block": BlockCallingReference}
CALLING_THE_REFERENCE.update(LESSON06_CALLING_THE_REFERENCE)  # lesson 06's, kept with its answers


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_calling_the_reference_is_refused(name):
    student = CALLING_THE_REFERENCE.get(name) or calling(REFERENCES[name])
    message = failure(check_of(name), student)
    assert SHORTCUT in message
    assert REFERENCES[name].__qualname__ in message


# ---------------------------------------------------------------- PyTorch built-ins

def attention_via_torch(query, key, value, attn_mask=None, is_causal=False, scale=None):
    out = F.scaled_dot_product_attention(query, key, value, attn_mask, is_causal=is_causal,
                                         scale=scale)
    return out, masked_attention_additive(query, key, value, attn_mask, is_causal, scale)[1]


class MHAViaTorchModule(multihead.MultiHeadAttention):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        return self.to_torch()(query, key, value, average_attn_weights=False)


class MHAViaTorchFunction(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        out, weights = F.multi_head_attention_forward(
            query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), self.d_model,
            self.n_heads, None, torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]),
            None, None, False, 0.0, self.out_proj.weight, self.out_proj.bias, training=False,
            use_separate_proj_weight=True, q_proj_weight=self.q_proj.weight,
            k_proj_weight=self.k_proj.weight, v_proj_weight=self.v_proj.weight,
            average_attn_weights=False)
        return out.transpose(0, 1), weights


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
    "one_hot_embedding": {
        "F.embedding": lambda token_ids, weight: F.embedding(token_ids, weight),
        "nn.Embedding": lambda token_ids, weight: nn.Embedding.from_pretrained(weight)(token_ids),
    },
    "scaled_dot_product_attention": {"F.scaled_dot_product_attention": attention_via_torch},
    "masked_attention": {"F.scaled_dot_product_attention": attention_via_torch},
    "multi_head_attention": {"nn.MultiheadAttention": MHAViaTorchModule,
                             "F.multi_head_attention_forward": MHAViaTorchFunction},
}


@pytest.mark.parametrize(("name", "student"), [
    pytest.param(name, student, id=f"{name}-{label}")
    for name, students in BUILT_INS.items() for label, student in students.items()])
def test_calling_the_built_in_is_refused(name, student):
    assert SHORTCUT in failure(check_of(name), student)


# ---------------------------------------------------------------- earlier lessons are allowed

def masked_attention_from_lesson_02(query, key, value, attn_mask=None, is_causal=False,
                                    scale=None):
    scores = attention.attention_scores(query, key, scale)
    T, S = scores.shape[-2:]
    if is_causal:
        scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), NEG_INF)
    if attn_mask is not None:
        scores = scores + additive(attn_mask, scores.dtype)
    empty = scores.isneginf().all(dim=-1, keepdim=True)
    weights = attention.softmax(scores.masked_fill(empty, 0.0)).masked_fill(empty, 0.0)
    return weights @ value, weights




@pytest.mark.parametrize(("name", "student"), [
    ("masked_attention", masked_attention_from_lesson_02),
    ("multi_head_attention", MHAFromEarlierLessons),
    ("causal_self_attention", AttentionLayerByCourseMask),  # lessons 03 and 04
])
def test_earlier_lessons_are_allowed(name, student, capsys):
    check_of(name)(student)
    assert capsys.readouterr().out.startswith("ok:")
