"""Multi-head attention: H attention heads of width D = C / H run side by side.

Lesson: 04_multi_head
"""

import torch
from torch import Tensor, nn

from .attention import scaled_dot_product_attention


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """Split the model width into heads: (B, T, C) -> (B, H, T, D) with D = C / H.

    Lesson: 04_multi_head
    """
    C = x.shape[-1]
    if C % n_heads != 0:
        raise ValueError(f"model width C={C} is not divisible by n_heads={n_heads}")
    heads = x.unflatten(-1, (n_heads, C // n_heads))  # (B, T, C) -> (B, T, H, D)
    return heads.transpose(-3, -2)  # (B, T, H, D) -> (B, H, T, D)


def merge_heads(x: Tensor) -> Tensor:
    """Concatenate the heads again: (B, H, T, D) -> (B, T, H * D), the inverse of split_heads.

    Lesson: 04_multi_head
    """
    return x.transpose(-3, -2).flatten(-2)  # (B, H, T, D) -> (B, T, H, D) -> (B, T, C)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with separate query, key, value and output projections.

    Batch first, like ``nn.MultiheadAttention(batch_first=True)``; masks follow our convention
    (bool True = may attend, float added), broadcasting to (B, H, T, S).
    Lesson: 04_multi_head
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        factory = {"bias": bias, "device": device, "dtype": dtype}
        self.q_proj = nn.Linear(d_model, d_model, **factory)
        self.k_proj = nn.Linear(d_model, d_model, **factory)
        self.v_proj = nn.Linear(d_model, d_model, **factory)
        self.out_proj = nn.Linear(d_model, d_model, **factory)

    def forward(self, query: Tensor, key: Tensor, value: Tensor,
                attn_mask: Tensor | None = None, is_causal: bool = False):
        """Attend from (B, T, C) queries to (B, S, C) keys and values.

        Returns:
            out: (B, T, C) attended values after the output projection.
            weights: (B, H, T, S) attention weights of every head.
        """
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.shape[-1] != self.d_model:
                raise ValueError(f"{name} has width {x.shape[-1]}, expected "
                                 f"d_model={self.d_model}: shape {tuple(x.shape)}")
        q = split_heads(self.q_proj(query), self.n_heads)  # (B, T, C) -> (B, H, T, D)
        k = split_heads(self.k_proj(key), self.n_heads)  # (B, S, C) -> (B, H, S, D)
        v = split_heads(self.v_proj(value), self.n_heads)  # (B, S, C) -> (B, H, S, D)
        dropout_p = self.dropout if self.training else 0.0
        out, weights = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
        return self.out_proj(merge_heads(out)), weights  # (B, H, T, D) -> (B, T, C)

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> "MultiHeadAttention":
        """A ``MultiHeadAttention`` computing the same function as a ``nn.MultiheadAttention``."""
        if not mha._qkv_same_embed_dim or mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError("only nn.MultiheadAttention with kdim = vdim = embed_dim, no "
                             "add_bias_kv and no add_zero_attn can be transferred")
        weight = mha.in_proj_weight
        ours = cls(mha.embed_dim, mha.num_heads, mha.dropout, bias=mha.in_proj_bias is not None,
                   device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            biases = (mha.in_proj_bias.chunk(3) if mha.in_proj_bias is not None
                      else (None, None, None))
            for proj, w, b in zip(ours.input_projections(), weight.chunk(3), biases, strict=True):
                proj.weight.copy_(w)
                if b is not None:
                    proj.bias.copy_(b)
            ours.out_proj.load_state_dict(mha.out_proj.state_dict())
        return ours

    def to_torch(self) -> nn.MultiheadAttention:
        """A ``nn.MultiheadAttention(batch_first=True)`` with this module's weights.

        Remember its bool masks mean True = ignore: pass ``to_mha_mask(mask)``.
        """
        weight = self.q_proj.weight
        has_bias = self.q_proj.bias is not None
        mha = nn.MultiheadAttention(self.d_model, self.n_heads, self.dropout, bias=has_bias,
                                    batch_first=True, device=weight.device, dtype=weight.dtype)
        projections = self.input_projections()
        with torch.no_grad():
            mha.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))  # (3C, C)
            if has_bias:
                mha.in_proj_bias.copy_(torch.cat([p.bias for p in projections]))  # (3C,)
            mha.out_proj.load_state_dict(self.out_proj.state_dict())
        return mha

    def input_projections(self) -> tuple[nn.Linear, nn.Linear, nn.Linear]:
        """The query, key and value projections, in ``in_proj_weight``'s packing order."""
        return self.q_proj, self.k_proj, self.v_proj
