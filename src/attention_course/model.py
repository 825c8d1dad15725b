"""A small decoder-only transformer: lesson 05's block, stacked on the course's embedding.

Every class here but ``CausalSelfAttention`` and ``SwiGLU`` (the gated MLP under its usual name)
is one of the lesson's exercises: the ``MLP`` (classic, or gated for a modern block), the pre-norm
``DecoderBlock`` (x + attention(norm(x)), then x + mlp(norm(x))), the ``DecoderOnlyTransformer``
around the blocks (embedding, blocks, final norm, head), and ``RMSNorm``, the other part of a
modern block. The model takes the block class as an argument, so the notebook assembles it from
the student's own block and nothing in it needs the reference block.

Lesson: 05_copy_task
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .embeddings import TokenAndPositionEmbedding
from .multihead import MultiHeadAttention

POSITIONS = ("learned", "sinusoidal", "none")


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which position t reads positions 0..t only.

    Self-attention: queries, keys and values all come from the same x. Causal: the output at t
    must not depend on anything after t, so that every position can be trained to predict the
    next token. Dropout with probability ``dropout`` acts on the attention weights (inside
    ``MultiHeadAttention``) and on the output, in training mode only.
    Lesson: 05_copy_task
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.dropout = dropout

    def forward(self, x: Tensor):
        """(B, T, C) -> (B, T, C), and the (B, H, T, T) attention weights."""
        out, weights = self.attn(x, x, x, is_causal=True)  # (B, T, C), (B, H, T, T)
        return F.dropout(out, self.dropout, self.training), weights


class MLP(nn.Module):
    """The per-token network of a block: C -> d_ff -> C, classic or gated.

    Each position goes through it alone: it transforms what attention gathered. Classic
    (``gated=False``, GPT's): ``proj(gelu(fc(x)))``, with biases and the exact GELU. Gated
    (``gated=True``, SwiGLU, the MLP of Llama-style models; Shazeer, 2020):
    ``down(silu(gate(x)) * up(x))``, three maps without bias, where one C -> d_ff map, through
    SiLU, gates the other unit by unit; three matrices instead of two, so models give it about
    2/3 of the classic width for the same parameters. Dropout on the output, in training mode
    only.
    Lesson: 05_copy_task
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, gated: bool = False):
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

    def forward(self, x: Tensor) -> Tensor:
        """(..., C) -> (..., C)."""
        if self.gated:  # (..., d_ff): the gate times the values
            out = self.down(F.silu(self.gate(x)) * self.up(x))
        else:
            out = self.proj(F.gelu(self.fc(x)))  # (..., C) -> (..., d_ff) -> (..., C)
        return F.dropout(out, self.dropout, self.training)


class DecoderBlock(nn.Module):
    """Pre-norm decoder block: x + attention(norm(x)), then x + mlp(norm(x)).

    The residual stream x passes through untouched; each sublayer reads a normalised copy and
    adds what it found, so a stack of blocks starts close to the identity and trains stably.
    The attention is lesson 04's ``MultiHeadAttention``, causal, on queries, keys and values
    from the same normed x; dropout acts on its weights (inside it) and on its output. ``norm``
    is the class of the two norms (each its own object) and ``mlp`` the class of the MLP,
    built as ``mlp(d_model, d_ff, dropout)``: the modern block passes RMSNorm and a gated MLP.
    Lesson: 05_copy_task
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0, *,
                 norm: type[nn.Module] = nn.LayerNorm, mlp: type[nn.Module] = MLP):
        super().__init__()
        self.attn_norm = norm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.mlp_norm = norm(d_model)  # an object of its own
        self.mlp = mlp(d_model, d_ff, dropout)
        self.dropout = dropout

    def forward(self, x: Tensor):
        """(B, T, C) -> (B, T, C), and the (B, H, T, T) causal attention weights."""
        h = self.attn_norm(x)
        attended, weights = self.attn(h, h, h, is_causal=True)  # (B, T, C), (B, H, T, T)
        x = x + F.dropout(attended, self.dropout, self.training)
        x = x + self.mlp(self.mlp_norm(x))
        return x, weights


class DecoderOnlyTransformer(nn.Module):
    """Predicts the next token at every position of a (B, T) sequence.

    Token + position embedding, ``n_layers`` separate blocks built as ``block(d_model, n_heads,
    d_ff, dropout)``, a final norm (``norm(d_model)``, a LayerNorm by default) and a linear head
    over the vocabulary. ``block`` is any class with that constructor whose forward maps
    (B, T, C) to ((B, T, C), (B, H, T, T) weights): in lesson 05, the student's ``DecoderBlock``.
    The final norm matters because a pre-norm block never normalises the stream it returns.

    The defaults are lesson 05's model: one block of two heads learns the copy task in well under
    a second on a CPU, and its two attention maps are easy to read. ``positions`` ("learned",
    "sinusoidal" or "none") and ``scale_tokens`` (the sqrt(C) factor of lesson 01) are there for
    the lesson's experiments.
    Lesson: 05_copy_task
    """

    def __init__(self, vocab_size: int, max_len: int, *, block: type[nn.Module],
                 d_model: int = 32, n_heads: int = 2, n_layers: int = 1, d_ff: int | None = None,
                 dropout: float = 0.0, positions: str = "learned", scale_tokens: bool = True,
                 norm: type[nn.Module] = nn.LayerNorm):
        super().__init__()
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {', '.join(POSITIONS)}, got {positions!r}")
        self.embed = TokenAndPositionEmbedding(
            vocab_size, d_model, max_len, learned_positions=positions == "learned",
            positions=positions != "none", scale_tokens=scale_tokens)
        width = d_ff or 4 * d_model  # the MLP's hidden units: 4C unless told
        self.blocks = nn.ModuleList(
            block(d_model, n_heads, width, dropout) for _ in range(n_layers))  # n separate ones
        self.norm = norm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: Tensor, return_attention: bool = False):
        """(B, T) token ids -> (B, T, V) logits [and a list of (B, H, T, T) weights per layer]."""
        x = self.embed(tokens)  # (B, T) -> (B, T, C): sqrt(C) * token rows + position rows
        attention = []
        for block in self.blocks:  # first block first
            x, weights = block(x)  # (B, T, C), (B, H, T, T)
            attention.append(weights)
        logits = self.head(self.norm(x))  # (B, T, C) -> (B, T, V)
        return (logits, attention) if return_attention else logits


class RMSNorm(nn.Module):
    """Root-mean-square norm (Zhang and Sennrich, 2019), the norm of Llama-style models.

    x / sqrt(mean(x^2) + eps) * weight over the last axis: LayerNorm without subtracting the
    mean and without a bias. It is computed in float32 (float64 stays float64) and returned in
    the input's dtype, as Llama does, so that 16-bit inputs are normalised without 16-bit
    rounding inside. ``torch.nn.RMSNorm`` computes the same.
    Lesson: 05_copy_task
    """

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))  # one gain per channel, starts at 1

    def forward(self, x: Tensor) -> Tensor:
        """(..., C) -> (..., C), in the dtype of x."""
        wide = x.to(torch.promote_types(x.dtype, torch.float32))  # float32 for 16-bit inputs
        mean_square = wide.pow(2).mean(dim=-1, keepdim=True)  # (..., 1)
        normed = wide * torch.rsqrt(mean_square + self.eps)  # (..., C), rms 1
        return (normed * self.weight).to(x.dtype)


class SwiGLU(MLP):
    """The gated MLP, ``MLP(d_model, d_ff, dropout, gated=True)``, under its usual name.
    Lesson: 05_copy_task
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__(d_model, d_ff, dropout, gated=True)
