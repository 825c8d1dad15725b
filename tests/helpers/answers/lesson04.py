"""Lesson 04's answers as students write them: the class a student starts from, three correct
styles per exercise, shortcuts, answers with a catalogued mistake (some recognised by a sign),
and slips that raise."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from attention_course import attention, multihead
from attention_course.checks.lesson03 import LARGE_NEGATIVE
from attention_course.checks.lesson04 import DROPOUT_IN_EVAL_MODE
from helpers.answers.lesson02 import NEG_INF, additive
from helpers.answers.lesson03 import masked_attention_additive

# ---------------------------------------------------------------- correct

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
    """The constructor as the solution writes it; ``forward`` is each answer's own."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        raise NotImplementedError()


class StubMHA(nn.Module):
    """The class a student starts from: constructor and forward both to be written."""

    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__()
        raise NotImplementedError()

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
        weights = F.dropout(weights, self.dropout, self.training)
        out = torch.einsum("bhts,bshd->bthd", weights, v).flatten(-2)
        return self.out_proj(out), weights


class MHAFromEarlierLessons(nn.Module):
    """Builds its layers in a loop and reuses the course's attention function and head
    helpers: allowed, not shortcuts."""

    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.d_head, self.dropout = d_model // n_heads, dropout
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=bias))

    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = (multihead.split_heads(proj(x), self.n_heads) for proj, x in
                   ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
        out, weights = attention.scaled_dot_product_attention(
            q, k, v, attn_mask, dropout_p=self.dropout if self.training else 0.0,
            is_causal=is_causal)
        return self.out_proj(multihead.merge_heads(out)), weights


class MHAPerHead(nn.Module):
    """An nn.Dropout module next to the probability, and one head at a time."""

    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__()
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.drop = nn.Dropout(dropout)
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            nn.Linear(d_model, d_model, bias=bias) for _ in range(4))

    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        B, T, S, H = query.shape[0], query.shape[1], key.shape[1], self.n_heads
        outs, weights = [], []
        for h in range(H):
            part = slice(h * self.d_head, (h + 1) * self.d_head)
            mask = None if attn_mask is None else attn_mask.broadcast_to(B, H, T, S)[:, h]
            _, w = masked_attention_additive(q[..., part], k[..., part], v[..., part], mask,
                                             is_causal)
            w = self.drop(w)
            outs.append(w @ v[..., part])
            weights.append(w)
        return self.out_proj(torch.cat(outs, dim=-1)), torch.stack(weights, dim=1)


CORRECT = {
    "split_heads": [split_by_view, split_by_chunks, split_by_permute],
    "merge_heads": [merge_by_transpose, merge_by_concatenation, merge_by_permute],
    "multi_head_attention": [MHAByEinsum, MHAFromEarlierLessons, MHAPerHead],
}
REFERENCES = {
    "split_heads": multihead.split_heads,
    "merge_heads": multihead.merge_heads,
    "multi_head_attention": multihead.MultiHeadAttention,
}
PRINTED_NAME = {"multi_head_attention": "MultiHeadAttention"}
# the stub a student starts from, where it is a class
STUBS = {"multi_head_attention": StubMHA}


# ---------------------------------------------------------------- shortcuts

class MHACallingReference(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        return multihead.MultiHeadAttention.forward(self, query, key, value, attn_mask, is_causal)


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


CALLING_THE_REFERENCE = {"multi_head_attention": MHACallingReference}
BUILT_INS = {  # exercise: {what the student called: their answer}
    "multi_head_attention": {"nn.MultiheadAttention": MHAViaTorchModule,
                             "F.multi_head_attention_forward": MHAViaTorchFunction},
}


# ---------------------------------------------------------------- mistakes recognised by a sign

class MHADroppingOutInEvalMode(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = (p(x).unflatten(-1, (self.n_heads, -1)).transpose(1, 2)
                   for p, x in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
        out, weights = attention.scaled_dot_product_attention(q, k, v, attn_mask, self.dropout,
                                                              is_causal)
        return self.out_proj(out.transpose(1, 2).flatten(-2)), weights


class MHAByEinsumFilling(StudentMHA):
    """Einsum over (B, T, H, D) heads; hidden scores filled with ``fill``, as in many tutorials.
    With ``float_masks_as_bool``, every mask is read as "0 = hidden" (masked_fill(mask == 0))."""

    fill = -1e9
    float_masks_as_bool = False

    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        H, D = self.n_heads, self.d_head
        q, k, v = (p(x).unflatten(-1, (H, D)) for p, x in
                   ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
        scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(D)
        T, S = scores.shape[-2:]
        if is_causal:
            scores = scores.masked_fill(torch.ones(T, S).tril() == 0, self.fill)
        if attn_mask is not None and (attn_mask.dtype == torch.bool or self.float_masks_as_bool):
            scores = scores.masked_fill(attn_mask == 0, self.fill)
        elif attn_mask is not None:
            scores = scores + attn_mask
        weights = torch.softmax(scores, dim=-1)
        return self.out_proj(torch.einsum("bhts,bshd->bthd", weights, v).flatten(-2)), weights


SIGN_EXAMPLES = {  # (exercise, mistake) -> {what the student did: their answer}
    ("multi_head_attention", DROPOUT_IN_EVAL_MODE.name): {
        "dropout_p=self.dropout": MHADroppingOutInEvalMode},
    ("multi_head_attention", LARGE_NEGATIVE): {"fill -1e9": MHAByEinsumFilling},
}


# ---------------------------------------------------------------- catalogued mistakes

def split_by_view_only(x, n_heads):
    B, T, C = x.shape
    return x.view(B, n_heads, T, C // n_heads)


def merge_by_reshape_only(x):
    B, H, T, D = x.shape
    return x.reshape(B, T, H * D)


class MHAHandWritten(StudentMHA):
    """A student's forward; the subclasses below each change one line of it."""

    def project(self, query, key, value):
        return self.q_proj(query), self.k_proj(key), self.v_proj(value)

    def split(self, x):
        return split_by_view(x, self.n_heads)

    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = (self.split(x) for x in self.project(query, key, value))
        out, weights = masked_attention_additive(q, k, v, attn_mask, is_causal, self.scale())
        if self.training:
            weights = F.dropout(weights, self.dropout)
            out = weights @ v
        return self.out_proj(merge_by_transpose(out)), weights

    def scale(self):
        return 1 / math.sqrt(self.d_head)


class MHAWithoutOutProj(MHAHandWritten):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = (self.split(x) for x in self.project(query, key, value))
        out, weights = masked_attention_additive(q, k, v, attn_mask, is_causal)
        return merge_by_transpose(out), weights


class MHAScaledByDModel(MHAHandWritten):
    def scale(self):
        return self.d_model ** -0.5


class MHASplitByView(MHAHandWritten):
    def split(self, x):
        return x.view(x.shape[0], self.n_heads, x.shape[1], self.d_head)


class MHASwappedKeyValue(MHAHandWritten):
    def project(self, query, key, value):
        return self.q_proj(query), self.v_proj(key), self.k_proj(value)


class MHAIgnoringCausal(MHAHandWritten):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        return super().forward(query, key, value, attn_mask)


class MHACausalOnlyWithoutMask(MHAHandWritten):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        if attn_mask is not None:
            return super().forward(query, key, value, attn_mask)
        return super().forward(query, key, value, None, is_causal)


class MHAIgnoringFloatMasks(MHAHandWritten):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        bool_mask = attn_mask if attn_mask is not None and attn_mask.dtype == torch.bool else None
        return super().forward(query, key, value, bool_mask, is_causal)


class MHAReadingEveryMaskAsBool(MHAByEinsumFilling):
    fill = -1e20
    float_masks_as_bool = True


class MHAWithNaNRows(MHAByEinsumFilling):
    fill = float("-inf")


class MHASharingOneKeyValueLayer(MHAHandWritten):
    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__(d_model, n_heads, dropout, bias)
        self.k_proj = self.v_proj = nn.Linear(d_model, d_model, bias=bias)


class MHANeverDropping(MHAHandWritten):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = (self.split(x) for x in self.project(query, key, value))
        out, weights = masked_attention_additive(q, k, v, attn_mask, is_causal)
        return self.out_proj(merge_by_transpose(out)), weights


class MHADroppingTheHeadsOutput(MHAHandWritten):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = (self.split(x) for x in self.project(query, key, value))
        out, weights = masked_attention_additive(q, k, v, attn_mask, is_causal)
        out = F.dropout(merge_by_transpose(out), self.dropout, self.training)
        return self.out_proj(out), weights


class MHADroppingTheLayersOutput(MHANeverDropping):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        out, weights = super().forward(query, key, value, attn_mask, is_causal)
        return F.dropout(out, self.dropout, self.training), weights


MISTAKES = {  # student's answer: (exercise, the mistakes the check must name)
    split_by_view_only: ("split_heads", ["heads split with view and no transpose"]),
    merge_by_reshape_only: ("merge_heads", ["heads merged without the inverse transpose"]),
    MHAWithoutOutProj: ("multi_head_attention", ["missing output projection"]),
    MHAScaledByDModel: ("multi_head_attention", ["d_model instead of d_head in the scale"]),
    MHASplitByView: ("multi_head_attention", ["heads split with view and no transpose"]),
    MHASwappedKeyValue: ("multi_head_attention", ["key and value projections swapped"]),
    MHAIgnoringCausal: ("multi_head_attention", ["is_causal not passed on"]),
    MHACausalOnlyWithoutMask: ("multi_head_attention",
                               ["is_causal ignored when attn_mask is given"]),
    MHAIgnoringFloatMasks: ("multi_head_attention", ["float mask ignored"]),
    MHAReadingEveryMaskAsBool: ("multi_head_attention", ["float mask treated as a bool mask"]),
    MHAWithNaNRows: ("multi_head_attention", ["fully masked rows give NaN"]),
    MHASharingOneKeyValueLayer: ("multi_head_attention",
                                 ["one projection shared by key and value"]),
    MHANeverDropping: ("multi_head_attention", ["dropout never applied in training"]),
    MHADroppingTheHeadsOutput: ("multi_head_attention",
                                ["dropout applied to the output instead of the weights"]),
    MHADroppingTheLayersOutput: ("multi_head_attention",
                                 ["dropout applied to the output instead of the weights"]),
}


# ---------------------------------------------------------------- slips that raise

def split_with_the_width_for_each_head(x, n_heads):
    B, T, C = x.shape
    return x.view(B, T, n_heads, C).transpose(1, 2)


def split_unpacking_four_sizes(x, n_heads):
    B, T, H, D = x.shape
    return x.view(B, T, n_heads, -1).transpose(1, 2)


def merge_by_view(x):
    B, H, T, D = x.shape
    return x.transpose(1, 2).view(B, T, H * D)


def project(module, query, key, value):
    return (split_by_view(projection(x), module.n_heads) for projection, x in
            ((module.q_proj, query), (module.k_proj, key), (module.v_proj, value)))


class MHAProjectingBeforeMerging(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        out, weights = masked_attention_additive(*project(self, query, key, value), attn_mask,
                                                 is_causal)
        return merge_by_transpose(self.out_proj(out)), weights


class MHAEinsumBeforeSplitting(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(self.d_head)
        weights = torch.softmax(scores, dim=-1)
        return self.out_proj(torch.einsum("bhts,bhsd->bthd", weights, v).flatten(-2)), weights


class MHAMergingByView(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        out, weights = masked_attention_additive(*project(self, query, key, value), attn_mask,
                                                 is_causal)
        B, H, T, D = out.shape
        return self.out_proj(out.transpose(1, 2).view(B, T, H * D)), weights


class MHAKeysNotTransposed(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = project(self, query, key, value)
        weights = torch.softmax(q @ k / math.sqrt(self.d_head), dim=-1)
        return self.out_proj(merge_by_transpose(weights @ v)), weights


class MHAKeysByDotT(StudentMHA):
    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        q, k, v = project(self, query, key, value)
        weights = torch.softmax(q @ k.T / math.sqrt(self.d_head), dim=-1)
        return self.out_proj(merge_by_transpose(weights @ v)), weights


class MHAAlwaysWithBiases(MHAHandWritten):
    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__(d_model, n_heads, dropout)


class MHAWithoutBiases(MHAHandWritten):
    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__(d_model, n_heads, dropout, bias=False)


class MHAWithHeadSizedQueries(MHAHandWritten):
    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__(d_model, n_heads, dropout, bias)
        self.q_proj = nn.Linear(d_model, d_model // n_heads, bias=bias)


class MHAWithAFusedKeyValueLayer(MHAHandWritten):
    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__(d_model, n_heads, dropout, bias)
        del self.k_proj, self.v_proj
        self.kv_proj = nn.Linear(d_model, 2 * d_model, bias=bias)

    def project(self, query, key, value):
        k, _ = self.kv_proj(key).chunk(2, dim=-1)
        _, v = self.kv_proj(value).chunk(2, dim=-1)
        return self.q_proj(query), k, v


class MHAForgettingTheDropout(MHAHandWritten):
    """Named as the notebook's class is, since the error's text names the class."""

    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__(d_model, n_heads, dropout, bias)
        del self.dropout


MHAForgettingTheDropout.__name__ = "MultiHeadAttention"


SLIPS = [  # (exercise, slip, the mistake explain_error names from the error the slip raises)
    ("split_heads", split_with_the_width_for_each_head,
     "view or reshape sizes that do not multiply to the tensor's size"),
    ("split_heads", split_unpacking_four_sizes, "shape unpacked into the wrong number of names"),
    ("merge_heads", merge_by_view, "view on a transposed tensor"),
    ("multi_head_attention", MHAProjectingBeforeMerging,
     "a projection applied to a tensor whose last axis is not d_model"),
    ("multi_head_attention", MHAEinsumBeforeSplitting,
     "einsum letters that do not match the tensor's axes"),
    ("multi_head_attention", MHAMergingByView, "view on a transposed tensor"),
    ("multi_head_attention", MHAKeysNotTransposed, "matrix product of shapes that do not line up"),
    ("multi_head_attention", MHAKeysByDotT,
     "every axis of key reversed (.T) instead of the last two swapped"),
    ("multi_head_attention", MHAAlwaysWithBiases, "biases although bias=False"),
    ("multi_head_attention", MHAWithoutBiases, "no biases although bias=True"),
    ("multi_head_attention", MHAWithHeadSizedQueries, "a projection of the wrong size"),
    ("multi_head_attention", MHAWithAFusedKeyValueLayer, "layers not named as the docstring says"),
    ("multi_head_attention", MHAForgettingTheDropout, "an attribute the constructor does not set"),
]
