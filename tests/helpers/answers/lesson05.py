"""Lesson 05's answers as students write them: the classes a student starts from, three correct
styles per exercise (the model, the training step and RMSNorm too; the MLP in both settings),
shortcuts, and answers with a catalogued mistake (some recognised by a sign)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from attention_course import masks, model, multihead, training
from attention_course.embeddings import TokenAndPositionEmbedding, token_and_position_embedding

# ---------------------------------------------------------------- correct

class MLPByFunctional(nn.Module):
    """Both settings, each branch in a method of its own (the wrong answers below override
    one)."""

    def __init__(self, d_model, d_ff, dropout=0.0, gated=False):
        super().__init__()
        self.gated = gated
        if gated:
            self.gate = nn.Linear(d_model, d_ff, bias=False)
            self.up = nn.Linear(d_model, d_ff, bias=False)
            self.down = nn.Linear(d_ff, d_model, bias=False)
        else:
            self.fc = nn.Linear(d_model, d_ff)
            self.proj = nn.Linear(d_ff, d_model)
        self.dropout = dropout

    def forward(self, x):
        out = self.swiglu(x) if self.gated else self.classic(x)
        return F.dropout(out, self.dropout, self.training)

    def classic(self, x):
        return self.proj(F.gelu(self.fc(x)))

    def swiglu(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MLPByModules(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, gated=False):
        super().__init__()
        if gated:
            self.up = nn.Linear(d_model, d_ff, bias=False)
            self.gate = nn.Linear(d_model, d_ff, bias=False)
            self.act = nn.SiLU()
            self.down = nn.Linear(d_ff, d_model, bias=False)
        else:
            self.fc = nn.Linear(d_model, d_ff)
            self.act = nn.GELU()
            self.proj = nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        if hasattr(self, "gate"):
            return self.drop(self.down(self.act(self.gate(x)) * self.up(x)))
        return self.drop(self.proj(self.act(self.fc(x))))


class MLPByErf(MLPByFunctional):
    """GELU by erf, SiLU by sigmoid, dropout only while training."""

    def forward(self, x):
        if self.gated:
            g = self.gate(x)
            out = self.down(g * torch.sigmoid(g) * self.up(x))
        else:
            h = self.fc(x)
            h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))  # the exact GELU
            out = self.proj(h)
        return F.dropout(out, self.dropout) if self.training else out


class StudentBlock(nn.Module):
    """The constructor as the lesson writes it; ``forward`` not written yet."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, *, norm=nn.LayerNorm,
                 mlp=MLPByFunctional):
        super().__init__()
        self.attn_norm = norm(d_model)
        self.attn = multihead.MultiHeadAttention(d_model, n_heads, dropout)
        self.mlp_norm = norm(d_model)
        self.mlp = mlp(d_model, d_ff, dropout)
        self.dropout = dropout

    def forward(self, x):
        raise NotImplementedError()


class BlockLikeTheLesson(StudentBlock):
    def forward(self, x):
        h = self.attn_norm(x)
        attended, weights = self.attn(h, h, h, is_causal=True)
        x = x + F.dropout(attended, self.dropout, self.training)
        return x + self.mlp(self.mlp_norm(x)), weights


class BlockByTrilAndModules(nn.Module):
    """Parts built in another order, a bool tril mask, nn.Dropout for the output."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, *, norm=nn.LayerNorm,
                 mlp=MLPByFunctional):
        super().__init__()
        self.mlp = mlp(d_model, d_ff, dropout)
        self.attn = multihead.MultiHeadAttention(d_model, n_heads, dropout)
        self.attn_norm, self.mlp_norm = norm(d_model), norm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        T = x.shape[1]
        allowed = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
        h = self.attn_norm(x)
        a, w = self.attn(query=h, key=h, value=h, attn_mask=allowed)
        y = self.drop(a) + x
        m = self.mlp(self.mlp_norm(y))
        return m + y, w


class BlockByLoop(StudentBlock):
    """Both sublayers in one loop; lesson 03's causal mask; dropout only while training."""

    def forward(self, x):
        weights = None
        for norm, sublayer in ((self.attn_norm, "attention"), (self.mlp_norm, self.mlp)):
            h = norm(x)
            if sublayer == "attention":
                out, weights = self.attn(h, h, h,
                                         attn_mask=masks.causal_mask(h.shape[-2], device=h.device))
                if self.training:
                    out = F.dropout(out, self.dropout)
            else:
                out = sublayer(h)
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


class ModelLikeTheLesson(nn.Module):
    """The model, as the lesson's solution writes it."""

    def __init__(self, vocab_size, max_len, *, block, d_model=32, n_heads=2, n_layers=1,
                 d_ff=None, dropout=0.0, positions="learned", scale_tokens=True,
                 norm=nn.LayerNorm):
        super().__init__()
        self.embed = TokenAndPositionEmbedding(
            vocab_size, d_model, max_len, learned_positions=positions == "learned",
            positions=positions != "none", scale_tokens=scale_tokens)
        d_ff = d_ff or 4 * d_model
        self.blocks = nn.ModuleList([block(d_model, n_heads, d_ff, dropout)
                                     for _ in range(n_layers)])
        self.norm = norm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens, return_attention=False):
        x = self.embed(tokens)
        attention = []
        for block in self.blocks:
            x, weights = block(x)
            attention.append(weights)
        logits = self.head(self.norm(x))
        return (logits, attention) if return_attention else logits


class ModelWritingOutTheEmbedding(ModelLikeTheLesson):
    """Lesson 01's sum written out from the embedding's tables, weights kept in a tuple."""

    def forward(self, tokens, return_attention=False):
        T, C = tokens.shape[-1], self.head.in_features
        rows = self.embed.token.weight[tokens]
        if self.embed.scale_tokens:
            rows = rows * math.sqrt(C)
        x = rows + self.embed.position[:T]
        weights = ()
        for block in self.blocks:
            x, w = block(x)
            weights += (w,)
        out = self.head(self.norm(x))
        if return_attention:
            return out, list(weights)
        return out


class ModelByLessonOneFunction(nn.Module):
    """Blocks added one by one with add_module; lesson 01's function where the tokens are
    scaled."""

    def __init__(self, vocab_size, max_len, *, block, d_model=32, n_heads=2, n_layers=1,
                 d_ff=None, dropout=0.0, positions="learned", scale_tokens=True,
                 norm=nn.LayerNorm):
        super().__init__()
        self.embed = TokenAndPositionEmbedding(vocab_size, d_model, max_len,
                                               positions == "learned",
                                               positions=positions != "none",
                                               scale_tokens=scale_tokens)
        self.blocks = nn.ModuleList()
        for _ in range(n_layers):
            self.blocks.append(block(d_model, n_heads, 4 * d_model if d_ff is None else d_ff,
                                     dropout))
        self.norm, self.head = norm(d_model), nn.Linear(d_model, vocab_size)

    def forward(self, tokens, return_attention=False):
        if self.embed.scale_tokens:
            x = token_and_position_embedding(tokens, self.embed.token.weight, self.embed.position)
        else:
            x = self.embed(tokens)
        maps = []
        for i in range(len(self.blocks)):
            x, w = self.blocks[i](x)
            maps.append(w)
        logits = self.head(self.norm(x))
        return (logits, maps) if return_attention else logits


def step_like_the_lesson(model, optimizer, loss_fn, sequences, n, max_norm=None):
    model.train()
    optimizer.zero_grad()
    loss = loss_fn(model, sequences, n)
    loss.backward()
    if max_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()


def step_zeroing_by_hand(model, optimizer, loss_fn, sequences, n, max_norm=None):
    model.train(True)
    for p in model.parameters():
        p.grad = None
    loss = loss_fn(model, sequences, n)
    loss.backward()
    if max_norm:
        torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm=max_norm)
    optimizer.step()
    return float(loss.detach())


def step_clipping_by_hand(model, optimizer, loss_fn, sequences, n, max_norm=None):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model, sequences, n)
    loss.backward()
    if max_norm is not None:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        total = torch.sqrt(sum((g ** 2).sum() for g in grads))
        factor = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for g in grads:
            g.mul_(factor)
    optimizer.step()
    value = loss.item()
    return value


class RMSNormLikeTheLesson(nn.Module):
    def __init__(self, d_model, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        wide = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        normed = wide * torch.rsqrt(wide.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (normed * self.weight).to(x.dtype)


class RMSNormInFloat64(RMSNormLikeTheLesson):
    def forward(self, x):
        wide = x.double()
        rms = (wide.square().mean(-1, keepdim=True) + self.eps).sqrt()
        return (wide / rms * self.weight.double()).to(x.dtype)


class RMSNormByVectorNorm(RMSNormLikeTheLesson):
    def forward(self, x):
        h = x.to(torch.float32) if x.element_size() < 4 else x
        C = h.shape[-1]
        rms = torch.sqrt(torch.linalg.vector_norm(h, dim=-1, keepdim=True) ** 2 / C + self.eps)
        return (self.weight * (h / rms)).type_as(x)


CORRECT = {
    "mlp": [MLPByFunctional, MLPByModules, MLPByErf],
    "decoder_block": [BlockLikeTheLesson, BlockByTrilAndModules, BlockByLoop],
    "copy_task_loss": [loss_by_slicing, loss_by_position_mask, loss_by_gather],
    "decoder_only_transformer": [ModelLikeTheLesson, ModelWritingOutTheEmbedding,
                                 ModelByLessonOneFunction],
    "train_step": [step_like_the_lesson, step_zeroing_by_hand, step_clipping_by_hand],
    "rms_norm": [RMSNormLikeTheLesson, RMSNormInFloat64, RMSNormByVectorNorm],
}
REFERENCES = {
    "mlp": model.MLP.forward,
    "decoder_block": model.DecoderBlock.forward,
    "copy_task_loss": training.copy_task_loss,
    "decoder_only_transformer": model.DecoderOnlyTransformer.forward,
    "train_step": training.train_step,
    "rms_norm": model.RMSNorm.forward,
}
PRINTED_NAME = {"mlp": "MLP", "decoder_block": "DecoderBlock",
                "decoder_only_transformer": "DecoderOnlyTransformer", "rms_norm": "RMSNorm"}
# the stubs a student starts from, where they are classes with a given constructor
STUBS = {"decoder_block": StudentBlock}


# ---------------------------------------------------------------- shortcuts

class MLPCallingReference(model.MLP):
    def forward(self, x):
        return model.MLP.forward(self, x)


class BlockCallingReference(StudentBlock):
    def forward(self, x):
        return model.DecoderBlock.forward(self, x)


class ModelCallingReference(ModelLikeTheLesson):
    def forward(self, tokens, return_attention=False):
        return model.DecoderOnlyTransformer.forward(self, tokens, return_attention)


class RMSNormCallingReference(RMSNormLikeTheLesson):
    def forward(self, x):
        return model.RMSNorm.forward(self, x)


CALLING_THE_REFERENCE = {"mlp": MLPCallingReference, "decoder_block": BlockCallingReference,
                         "decoder_only_transformer": ModelCallingReference,
                         "rms_norm": RMSNormCallingReference}


class RMSNormByFunctional(RMSNormLikeTheLesson):
    def forward(self, x):
        h = x.to(torch.promote_types(x.dtype, torch.float32))
        return F.rms_norm(h, (x.shape[-1],), self.weight.to(h.dtype), self.eps).to(x.dtype)


class RMSNormByTorchModule(RMSNormLikeTheLesson):
    def forward(self, x):
        norm = nn.RMSNorm(x.shape[-1], eps=self.eps, dtype=self.weight.dtype)
        norm.weight = self.weight
        return norm(x.to(self.weight.dtype)).to(x.dtype)


class RMSNormByLayerNorm(RMSNormLikeTheLesson):
    """LayerNorm of [x, -x]: its mean is 0, so its variance is x's mean square."""

    def forward(self, x):
        h = x.to(torch.promote_types(x.dtype, torch.float32))
        both = F.layer_norm(torch.cat([h, -h], dim=-1), (2 * x.shape[-1],), eps=self.eps)
        return (both[..., :x.shape[-1]] * self.weight.to(h.dtype)).to(x.dtype)


BUILT_INS = {"rms_norm": {"F.rms_norm": RMSNormByFunctional,
                          "nn.RMSNorm": RMSNormByTorchModule,
                          "F.layer_norm of [x, -x]": RMSNormByLayerNorm}}


# ---------------------------------------------------------------- mistakes recognised by a sign

class MLPDroppingOutInEvalMode(MLPByFunctional):
    def forward(self, x):
        return F.dropout(self.swiglu(x) if self.gated else self.classic(x), self.dropout)


class MLPDroppingOutInEvalModeWhenGated(MLPByFunctional):
    def forward(self, x):
        if self.gated:
            return F.dropout(self.swiglu(x), self.dropout)
        return F.dropout(self.classic(x), self.dropout, self.training)


def step_returning_nothing(model, optimizer, loss_fn, sequences, n, max_norm=None):
    model.train()
    optimizer.zero_grad()
    loss_fn(model, sequences, n).backward()
    if max_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()


def step_returning_the_tensor(model, optimizer, loss_fn, sequences, n, max_norm=None):
    model.train()
    optimizer.zero_grad()
    loss = loss_fn(model, sequences, n)
    loss.backward()
    if max_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss


def step_in_eval_mode(model, optimizer, loss_fn, sequences, n, max_norm=None):
    optimizer.zero_grad()
    loss = loss_fn(model, sequences, n)
    loss.backward()
    if max_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()


SIGN_EXAMPLES = {  # (exercise, mistake) -> {what the student did: their answer}
    ("mlp", "dropout applied in eval mode"): {
        "F.dropout(out, p)": MLPDroppingOutInEvalMode,
        "F.dropout(out, p) in the gated branch only": MLPDroppingOutInEvalModeWhenGated},
    ("train_step", "nothing returned"): {"no return": step_returning_nothing},
    ("train_step", "loss returned as a tensor, not a number"): {
        "return loss": step_returning_the_tensor},
    ("train_step", "model left in eval mode"): {"no model.train()": step_in_eval_mode},
}


# ---------------------------------------------------------------- catalogued mistakes

class BlockWithoutMask(BlockLikeTheLesson):
    def forward(self, x):
        h = self.attn_norm(x)
        attended, weights = self.attn(h, h, h)
        x = x + F.dropout(attended, self.dropout, self.training)
        return x + self.mlp(self.mlp_norm(x)), weights


class BlockWithTriu(BlockLikeTheLesson):
    def forward(self, x):
        T = x.shape[1]
        h = self.attn_norm(x)
        attended, weights = self.attn(h, h, h, attn_mask=torch.ones(T, T).triu().bool())
        x = x + F.dropout(attended, self.dropout, self.training)
        return x + self.mlp(self.mlp_norm(x)), weights


class BlockDroppingOutInEvalMode(BlockLikeTheLesson):
    def forward(self, x):
        h = self.attn_norm(x)
        attended, weights = self.attn(h, h, h, is_causal=True)
        x = x + F.dropout(attended, self.dropout)
        return x + self.mlp(self.mlp_norm(x)), weights


class BlockSharingOneNorm(BlockLikeTheLesson):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, *, norm=nn.LayerNorm,
                 mlp=MLPByFunctional):
        super().__init__(d_model, n_heads, d_ff, dropout, norm=norm, mlp=mlp)
        self.attn_norm = self.mlp_norm = norm(d_model)


class MLPWithoutActivation(MLPByFunctional):
    def classic(self, x):
        return self.proj(self.fc(x))


class MLPWithReLU(MLPByFunctional):
    def classic(self, x):
        return self.proj(torch.relu(self.fc(x)))


class MLPFourTimesWide(MLPByFunctional):
    def __init__(self, d_model, d_ff, dropout=0.0, gated=False):
        super().__init__(d_model, 4 * d_model, dropout, gated)


class BlockPostNorm(StudentBlock):
    def forward(self, x):
        attended, weights = self.attn(x, x, x, is_causal=True)
        x = self.attn_norm(x + attended)
        return self.mlp_norm(x + self.mlp(x)), weights


class BlockWithoutResiduals(StudentBlock):
    def forward(self, x):
        h = self.attn_norm(x)
        x, weights = self.attn(h, h, h, is_causal=True)
        return self.mlp(self.mlp_norm(x)), weights


class BlockAddingToTheNorm(StudentBlock):
    def forward(self, x):
        x = self.attn_norm(x)
        attended, weights = self.attn(x, x, x, is_causal=True)
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


class ModelWithoutFinalNorm(ModelLikeTheLesson):
    def forward(self, tokens, return_attention=False):
        x = self.embed(tokens)
        attention = []
        for block in self.blocks:
            x, weights = block(x)
            attention.append(weights)
        logits = self.head(x)
        return (logits, attention) if return_attention else logits


class ModelRepeatingOneBlock(ModelLikeTheLesson):
    def __init__(self, vocab_size, max_len, *, block, d_model=32, n_heads=2, n_layers=1,
                 d_ff=None, dropout=0.0, positions="learned", scale_tokens=True,
                 norm=nn.LayerNorm):
        super().__init__(vocab_size, max_len, block=block, d_model=d_model, n_heads=n_heads,
                         n_layers=n_layers, d_ff=d_ff, dropout=dropout, positions=positions,
                         scale_tokens=scale_tokens, norm=norm)
        self.blocks = nn.ModuleList([block(d_model, n_heads, d_ff or 4 * d_model, dropout)]
                                    * n_layers)


class ModelWithPositionsAfterTheBlocks(ModelLikeTheLesson):
    def forward(self, tokens, return_attention=False):
        x = self.embed.token(tokens) * math.sqrt(self.head.in_features)
        attention = []
        for block in self.blocks:
            x, weights = block(x)
            attention.append(weights)
        x = x + self.embed.position[:tokens.shape[-1]]
        logits = self.head(self.norm(x))
        return (logits, attention) if return_attention else logits


class ModelInsertingWeightsFirst(ModelLikeTheLesson):
    def forward(self, tokens, return_attention=False):
        x = self.embed(tokens)
        attention = []
        for block in self.blocks:
            x, weights = block(x)
            attention.insert(0, weights)
        logits = self.head(self.norm(x))
        return (logits, attention) if return_attention else logits


def step_never_zeroing(model, optimizer, loss_fn, sequences, n, max_norm=None):
    model.train()
    loss = loss_fn(model, sequences, n)
    loss.backward()
    if max_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()


def step_before_backward(model, optimizer, loss_fn, sequences, n, max_norm=None):
    model.train()
    optimizer.zero_grad()
    loss = loss_fn(model, sequences, n)
    optimizer.step()
    loss.backward()
    if max_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return loss.item()


def step_clipping_each_parameter(model, optimizer, loss_fn, sequences, n, max_norm=None):
    model.train()
    optimizer.zero_grad()
    loss = loss_fn(model, sequences, n)
    loss.backward()
    if max_norm is not None:
        for p in model.parameters():
            nn.utils.clip_grad_norm_(p, max_norm)
    optimizer.step()
    return loss.item()


class RMSNormLikeLayerNorm(RMSNormLikeTheLesson):
    def forward(self, x):
        h = x.float()
        h = h - h.mean(-1, keepdim=True)
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
                ).to(x.dtype)


class RMSNormInHalf(RMSNormLikeTheLesson):
    def forward(self, x):
        normed = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (normed * self.weight).to(x.dtype)


class RMSNormEpsOutside(RMSNormLikeTheLesson):
    def forward(self, x):
        h = x.float()
        return (h / (h.pow(2).mean(-1, keepdim=True).sqrt() + self.eps) * self.weight).to(x.dtype)


class MLPGatingUp(MLPByFunctional):
    def swiglu(self, x):
        return self.down(self.gate(x) * F.silu(self.up(x)))


class MLPGatingWithGELU(MLPByFunctional):
    def swiglu(self, x):
        return self.down(F.gelu(self.gate(x)) * self.up(x))


class MLPGatingTheProduct(MLPByFunctional):
    def swiglu(self, x):
        return self.down(F.silu(self.gate(x) * self.up(x)))


MISTAKES = {  # student's answer: (exercise, the mistakes the check must name)
    BlockWithoutMask: ("decoder_block", ["no causal mask"]),
    BlockWithTriu: ("decoder_block", ["causal mask transposed (the future is visible)"]),
    BlockDroppingOutInEvalMode: ("decoder_block", ["dropout applied in eval mode"]),
    BlockSharingOneNorm: ("decoder_block", ["one norm object shared by both sublayers"]),
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
    ModelWithoutFinalNorm: ("decoder_only_transformer", ["no final norm before the head"]),
    ModelRepeatingOneBlock: ("decoder_only_transformer", ["one block used for every layer"]),
    ModelWithPositionsAfterTheBlocks: ("decoder_only_transformer",
                                       ["positions added after the blocks"]),
    ModelInsertingWeightsFirst: ("decoder_only_transformer",
                                 ["attention weights returned last block first"]),
    step_never_zeroing: ("train_step", ["gradients never zeroed (they add up from step to step)"]),
    step_before_backward: ("train_step", ["the update never sees this step's gradients"]),
    step_clipping_each_parameter: ("train_step", ["each parameter clipped on its own"]),
    RMSNormLikeLayerNorm: ("rms_norm", ["mean subtracted (that is LayerNorm)"]),
    RMSNormInHalf: ("rms_norm", ["computed in 16-bit (the squares overflow)"]),
    RMSNormEpsOutside: ("rms_norm", ["eps added after the square root"]),
    MLPGatingUp: ("mlp", ["SiLU on the up branch instead of the gate"]),
    MLPGatingWithGELU: ("mlp", ["GELU instead of SiLU"]),
    MLPGatingTheProduct: ("mlp", ["SiLU applied to the product"]),
}
