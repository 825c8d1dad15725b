"""Lesson 05's answers as students write them: the classes a student starts from, three correct
styles per exercise, shortcuts, and answers with a catalogued mistake (some recognised by a
sign)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from attention_course import masks, model, multihead, training

# ---------------------------------------------------------------- correct

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
    "causal_self_attention": [AttentionLayerByIsCausal, AttentionLayerByTril,
                              AttentionLayerByCourseMask],
    "mlp": [MLPByFunctional, MLPByModules, MLPByErf],
    "decoder_block": [BlockInTwoLines, BlockWithNames, BlockByLoop],
    "copy_task_loss": [loss_by_slicing, loss_by_position_mask, loss_by_gather],
}
REFERENCES = {
    "causal_self_attention": model.CausalSelfAttention.forward,
    "mlp": model.MLP.forward,
    "decoder_block": model.DecoderBlock.forward,
    "copy_task_loss": training.copy_task_loss,
}
PRINTED_NAME = {"causal_self_attention": "CausalSelfAttention.forward", "mlp": "MLP",
                "decoder_block": "DecoderBlock.forward"}
# the stubs a student starts from, where they are classes with a given constructor
STUBS = {"causal_self_attention": StudentCausalSelfAttention, "decoder_block": StudentBlock}


# ---------------------------------------------------------------- shortcuts

class AttentionLayerCallingReference(StudentCausalSelfAttention):
    def forward(self, x):
        return model.CausalSelfAttention.forward(self, x)


class MLPCallingReference(model.MLP):
    def forward(self, x):
        return model.MLP.forward(self, x)


class BlockCallingReference(StudentBlock):
    def forward(self, x):
        return model.DecoderBlock.forward(self, x)


CALLING_THE_REFERENCE = {"causal_self_attention": AttentionLayerCallingReference,
                         "mlp": MLPCallingReference, "decoder_block": BlockCallingReference}


# ---------------------------------------------------------------- mistakes recognised by a sign

class AttentionLayerDroppingOutInEvalMode(StudentCausalSelfAttention):
    def forward(self, x):
        out, weights = self.attn(x, x, x, is_causal=True)
        return F.dropout(out, self.dropout), weights


class MLPDroppingOutInEvalMode(MLPByFunctional):
    def forward(self, x):
        return F.dropout(self.proj(F.gelu(self.fc(x))), self.dropout)


SIGN_EXAMPLES = {  # (exercise, mistake) -> {what the student did: their answer}
    ("causal_self_attention", "dropout applied in eval mode"): {
        "F.dropout(out, p)": AttentionLayerDroppingOutInEvalMode},
    ("mlp", "dropout applied in eval mode"): {"F.dropout(out, p)": MLPDroppingOutInEvalMode},
}


# ---------------------------------------------------------------- catalogued mistakes

class AttentionLayerWithoutMask(StudentCausalSelfAttention):
    def forward(self, x):
        return self.attn(x, x, x)


class AttentionLayerWithTriu(StudentCausalSelfAttention):
    def forward(self, x):
        T = x.shape[1]
        return self.attn(x, x, x, attn_mask=torch.ones(T, T).triu().bool())


class MLPWithoutActivation(MLPByFunctional):
    def forward(self, x):
        return self.proj(self.fc(x))


class MLPWithReLU(MLPByFunctional):
    def forward(self, x):
        return self.proj(torch.relu(self.fc(x)))


class MLPFourTimesWide(MLPByFunctional):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, 4 * d_model, dropout)


class BlockPostNorm(StudentBlock):
    def forward(self, x):
        attended, weights = self.attn(x)
        x = self.attn_norm(x + attended)
        return self.mlp_norm(x + self.mlp(x)), weights


class BlockWithoutResiduals(StudentBlock):
    def forward(self, x):
        x, weights = self.attn(self.attn_norm(x))
        return self.mlp(self.mlp_norm(x)), weights


class BlockAddingToTheNorm(StudentBlock):
    def forward(self, x):
        x = self.attn_norm(x)
        attended, weights = self.attn(x)
        x = x + attended
        x = self.mlp_norm(x)
        return x + self.mlp(x), weights


def loss_without_shift(model, sequences, n):
    inputs = sequences[:, :-1]
    logits = model(inputs)
    return F.cross_entropy(logits[:, n:].flatten(0, 1), inputs[:, n:].flatten())


def loss_over_every_position(model, sequences, n):
    logits = model(sequences[:, :-1])
    return F.cross_entropy(logits.transpose(1, 2), sequences[:, 1:])


def loss_from_the_first_answer_digit(model, sequences, n):
    logits = model(sequences[:, :-1])
    return F.cross_entropy(logits[:, n + 1:].flatten(0, 1), sequences[:, n + 2:].flatten())


def loss_summed(model, sequences, n):
    logits = model(sequences[:, :-1])[:, n:]
    return F.cross_entropy(logits.flatten(0, 1), sequences[:, n + 1:].flatten(), reduction="sum")


MISTAKES = {  # student's answer: (exercise, the mistakes the check must name)
    AttentionLayerWithoutMask: ("causal_self_attention", ["no causal mask"]),
    AttentionLayerWithTriu: ("causal_self_attention",
                             ["causal mask transposed (the future is visible)"]),
    MLPWithoutActivation: ("mlp", ["MLP without its nonlinearity"]),
    MLPWithReLU: ("mlp", ["ReLU instead of GELU"]),
    MLPFourTimesWide: ("mlp", ["hidden width 4 * d_model instead of d_ff"]),
    BlockPostNorm: ("decoder_block", ["post-norm instead of pre-norm"]),
    BlockWithoutResiduals: ("decoder_block", ["attention residual missing",
                                              "MLP residual missing"]),
    BlockAddingToTheNorm: ("decoder_block", ["residual added to the normalised x"]),
    loss_without_shift: ("copy_task_loss", ["targets not shifted"]),
    loss_over_every_position: ("copy_task_loss", ["loss over the prompt half too"]),
    loss_from_the_first_answer_digit: ("copy_task_loss", ["first answer token left out"]),
    loss_summed: ("copy_task_loss", ["summed instead of averaged"]),
}
