"""A small decoder-only transformer built from the course's own parts.

Token + position embedding, pre-norm blocks (causal multi-head attention, then an MLP, each
wrapped in a residual connection), a final LayerNorm and a linear head over the vocabulary.

Lesson: 05_copy_task
"""

from torch import Tensor, nn

from .embeddings import TokenAndPositionEmbedding
from .multihead import MultiHeadAttention


class DecoderBlock(nn.Module):
    """x + attention(norm(x)), then x + mlp(norm(x)). Lesson: 05_copy_task"""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.attn_norm = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model),
                                 nn.Dropout(dropout))

    def forward(self, x: Tensor):
        """(B, T, C) -> (B, T, C), and the (B, H, T, T) causal attention weights."""
        h = self.attn_norm(x)
        attended, weights = self.attn(h, h, h, is_causal=True)
        x = x + attended
        x = x + self.mlp(self.mlp_norm(x))
        return x, weights


class DecoderOnlyTransformer(nn.Module):
    """Predicts the next token at every position of a (B, T) sequence.

    The defaults are lesson 05's model: one block of two heads learns the copy task in a few
    seconds on a CPU, and its two attention maps are easy to read.
    Lesson: 05_copy_task
    """

    def __init__(self, vocab_size: int, max_len: int, d_model: int = 32, n_heads: int = 2,
                 n_layers: int = 1, d_ff: int | None = None, dropout: float = 0.0,
                 learned_positions: bool = True):
        super().__init__()
        self.embed = TokenAndPositionEmbedding(vocab_size, d_model, max_len, learned_positions)
        self.blocks = nn.ModuleList(
            DecoderBlock(d_model, n_heads, d_ff or 4 * d_model, dropout) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: Tensor, return_attention: bool = False):
        """(B, T) token ids -> (B, T, V) logits [and a list of (B, H, T, T) weights per layer]."""
        x = self.embed(tokens)  # (B, T) -> (B, T, C)
        attention = []
        for block in self.blocks:
            x, weights = block(x)
            attention.append(weights)
        logits = self.head(self.norm(x))  # (B, T, C) -> (B, T, V)
        return (logits, attention) if return_attention else logits
