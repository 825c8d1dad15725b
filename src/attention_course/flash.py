"""FlashAttention's backward pass: training with tiled attention, in plain PyTorch.

Lesson: 08_flash_backward

Tiled attention (lesson 07) never builds the (T, S) matrix in its forward pass, but under
autograd every block's exponentials are kept for the backward pass, and the memory grows like
T * S again. FlashAttention keeps only the output O and each query's logsumexp
L = m + log(l) of its scores, and its backward pass recomputes each block's weights from them,
P = exp(S * scale - L). With P, the gradients of attention are

    dV = P^T dO,   dP = dO V^T,   D = rowsum(dO * O),   dS = P * (dP - D),
    dQ = dS K * scale,   dK = dS^T Q * scale,

and every one of them is a sum over blocks: dK and dV of a block of keys add up over the
blocks of queries, dQ of a block of queries over the blocks of keys. ``FlashAttention`` wraps
the tiled forward and the tiled backward in a ``torch.autograd.Function`` that saves Q, K, V,
O and L only.
"""

import torch
from torch import Tensor

from .attention import check_key_value, check_query_key, compute_dtype
from .masks import broadcast_shape

NEG_INF = float("-inf")


def attention_backward(query: Tensor, key: Tensor, value: Tensor, dout: Tensor,
                       scale: float | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """The gradients of out = softmax(Q K^T * scale) V, from the whole (T, S) matrix.

    Args:
        query: (B, H, T, D), key: (B, H, S, D), value: (B, H, S, Dv) (any leading dims, the
            same for the three).
        dout: (B, H, T, Dv) the gradient of the loss with respect to the output.
        scale: factor for the scores; None means 1/sqrt(D).
    Returns:
        dq (B, H, T, D), dk (B, H, S, D), dv (B, H, S, Dv): the gradients of the loss with
        respect to the query, the key and the value.
    Lesson: 08_flash_backward
    """
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    weights = torch.softmax(query @ key.transpose(-2, -1) * scale, dim=-1)  # P: (B, H, T, S)
    out = weights @ value  # O: (B, H, T, Dv)
    dv = weights.transpose(-2, -1) @ dout  # P^T dO: (B,H,S,T) @ (B,H,T,Dv) -> (B,H,S,Dv)
    dweights = dout @ value.transpose(-2, -1)  # dP = dO V^T: (B, H, T, S)
    d = (dout * out).sum(dim=-1, keepdim=True)  # D = rowsum(dO * O) = rowsum(P * dP): (B,H,T,1)
    dscores = weights * (dweights - d)  # dS: the softmax's backward, row by row
    dq = dscores @ key * scale  # (B,H,T,S) @ (B,H,S,D) -> (B,H,T,D)
    dk = dscores.transpose(-2, -1) @ query * scale  # (B,H,S,T) @ (B,H,T,D) -> (B,H,S,D)
    return dq, dk, dv


def _hidden(q0: int, n: int, k0: int, b: int, T: int, S: int, device) -> Tensor:
    """(n, b) bool: which keys k0 .. k0+b-1 the queries q0 .. q0+n-1 may not see, the causal
    mask aligned at the bottom-right (query t sits at position S - T + t)."""
    rows = torch.arange(S - T + q0, S - T + q0 + n, device=device)[:, None]  # (n, 1)
    return torch.arange(k0, k0 + b, device=device) > rows  # (n, b)


def flash_forward(query: Tensor, key: Tensor, value: Tensor, is_causal: bool = False,
                  scale: float | None = None, block_size: int = 64) -> tuple[Tensor, Tensor]:
    """Attention and each query's logsumexp, one (block, block) tile at a time.

    For every block of queries an online softmax runs over the blocks of keys (lesson 07);
    with ``is_causal`` the blocks of keys that the whole block of queries may not see are
    skipped. Args as ``tiled.tiled_attention``.
    Returns:
        out: (B, H, T, Dv) in the dtype of ``query``; 0 where there are no keys (S = 0).
        lse: (B, H, T) log(sum_s exp(score_s)) of each query's scores, float32 for 16-bit
            inputs; -inf where there are no keys.
    Lesson: 08_flash_backward
    """
    check_query_key(query, key)
    check_key_value(key, value)
    T, S = query.shape[-2], key.shape[-2]
    if is_causal and T > S:
        raise ValueError(f"is_causal needs T <= S: {T} queries cannot be the last of {S} keys")
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    wide = compute_dtype(query.dtype)
    batch = broadcast_shape(query.shape[:-2], key.shape[:-2])  # checked above to broadcast
    out = query.new_zeros(*batch, T, value.shape[-1], dtype=wide)
    lse = query.new_full((*batch, T), NEG_INF, dtype=wide)
    for q0 in range(0, T, block_size):
        q = query[..., q0:q0 + block_size, :].to(wide)  # (B, H, n, D)
        n = q.shape[-2]
        m = q.new_full((*batch, n, 1), NEG_INF)  # running max
        l = q.new_zeros((*batch, n, 1))  # running sum of exp(score - m)
        acc = q.new_zeros((*batch, n, value.shape[-1]))  # running sum of exp(score - m) * v
        for k0 in range(0, S, block_size):
            if is_causal and k0 > S - T + q0 + n - 1:
                break  # this block of keys and every later one is after the last query
            k = key[..., k0:k0 + block_size, :].to(wide)  # (B, H, b, D)
            v = value[..., k0:k0 + block_size, :].to(wide)  # (B, H, b, Dv)
            scores = q @ k.transpose(-2, -1) * scale  # (B, H, n, b)
            if is_causal:
                scores = scores.masked_fill(_hidden(q0, n, k0, k.shape[-2], T, S, q.device),
                                            NEG_INF)
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
            p = torch.exp(scores - m_new)
            rescale = torch.exp(m - m_new)
            l = l * rescale + p.sum(dim=-1, keepdim=True)
            acc = acc * rescale + p @ v
            m = m_new
        if S > 0:
            out[..., q0:q0 + n, :] = acc / l
            lse[..., q0:q0 + n] = (m + torch.log(l))[..., 0]  # log(sum exp(score)), no overflow
    return out.to(query.dtype), lse


def flash_backward(query: Tensor, key: Tensor, value: Tensor, out: Tensor, lse: Tensor,
                   dout: Tensor, is_causal: bool = False, scale: float | None = None,
                   block_size: int = 64) -> tuple[Tensor, Tensor, Tensor]:
    """The gradients of attention, one (block, block) tile at a time, from O and L alone.

    Each tile's weights are recomputed from the queries, the keys and the logsumexps:
    P = exp(S * scale - L), exactly the softmax's weights, since L is the logarithm of each
    row's whole sum. With ``is_causal`` (aligned at the bottom-right, as in
    ``tiled.tiled_attention``) the tiles that no query of the block may see are skipped, and
    the hidden entries of the diagonal tiles are 0.
    Args:
        query, key, value: as in the forward pass.
        out: (B, H, T, Dv) the forward's output; lse: (B, H, T) its logsumexps.
        dout: (B, H, T, Dv) the gradient of the loss with respect to out.
        is_causal, scale, block_size: as in the forward pass.
    Returns:
        dq (B, H, T, D), dk (B, H, S, D), dv (B, H, S, Dv), in the dtypes of the inputs;
        the arithmetic is float32 for 16-bit inputs.
    Lesson: 08_flash_backward
    """
    T, S = query.shape[-2], key.shape[-2]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    wide = compute_dtype(query.dtype)
    q_all, k_all, v_all = query.to(wide), key.to(wide), value.to(wide)
    do_all, lse = dout.to(wide), lse.to(wide)[..., None]  # (B, H, T, 1)
    d = (do_all * out.to(wide)).sum(dim=-1, keepdim=True)  # D = rowsum(dO * O): (B, H, T, 1)
    dq = torch.zeros_like(q_all)  # (B, H, T, D), filled block by block
    dk_blocks, dv_blocks = [], []
    for k0 in range(0, S, block_size):
        k, v = k_all[..., k0:k0 + block_size, :], v_all[..., k0:k0 + block_size, :]
        dk, dv = 0.0, 0.0  # this block's gradients, summed over the blocks of queries
        for q0 in range(0, T, block_size):
            q, do = q_all[..., q0:q0 + block_size, :], do_all[..., q0:q0 + block_size, :]
            n = q.shape[-2]
            if is_causal and k0 > S - T + q0 + n - 1:
                continue  # every query of this block comes before every key of this one
            p = torch.exp(q @ k.transpose(-2, -1) * scale - lse[..., q0:q0 + n, :])  # (n, b)
            if is_causal:
                p = p.masked_fill(_hidden(q0, n, k0, k.shape[-2], T, S, q.device), 0.0)
            dv = dv + p.transpose(-2, -1) @ do  # (b, n) @ (n, Dv)
            dp = do @ v.transpose(-2, -1)  # (n, Dv) @ (Dv, b)
            ds = p * (dp - d[..., q0:q0 + n, :])  # (n, b)
            dq[..., q0:q0 + n, :] += ds @ k * scale  # (n, b) @ (b, D)
            dk = dk + ds.transpose(-2, -1) @ q * scale  # (b, n) @ (n, D)
        dk_blocks.append(torch.zeros_like(k) + dk)
        dv_blocks.append(torch.zeros_like(v) + dv)
    if not dk_blocks:  # no keys: empty gradients
        return dq.to(query.dtype), key.new_zeros(key.shape), value.new_zeros(value.shape)
    dk = torch.cat(dk_blocks, dim=-2).to(key.dtype)
    dv = torch.cat(dv_blocks, dim=-2).to(value.dtype)
    return dq.to(query.dtype), dk, dv


class FlashAttention(torch.autograd.Function):
    """Attention whose backward pass recomputes the weights tile by tile: the forward saves
    Q, K, V, O and the logsumexps only, never a (T, S) or (T, block) matrix.

    ``FlashAttention.apply(query, key, value, is_causal, scale, block_size)`` returns
    ``(out, lse)`` as ``flash_forward`` does; lse carries no gradient.
    Lesson: 08_flash_backward
    """

    @staticmethod
    def forward(ctx, query, key, value, is_causal=False, scale=None, block_size=64):
        out, lse = flash_forward(query, key, value, is_causal, scale, block_size)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.is_causal, ctx.scale, ctx.block_size = is_causal, scale, block_size
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        query, key, value, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_backward(query, key, value, out, lse, dout, ctx.is_causal,
                                    ctx.scale, ctx.block_size)
        return dq, dk, dv, None, None, None  # no gradient for is_causal, scale, block_size


def flash_attention(query: Tensor, key: Tensor, value: Tensor, is_causal: bool = False,
                    scale: float | None = None, block_size: int = 64) -> tuple[Tensor, Tensor]:
    """``FlashAttention`` applied: (out, lse), with FlashAttention's backward pass.

    Args and Returns as ``flash_forward``; gradients reach query, key and value, none flows
    through lse.
    Lesson: 08_flash_backward
    """
    return FlashAttention.apply(query, key, value, is_causal, scale, block_size)


# ---------------------------------------------------------------- what P saved would cost

class SavedWeightsAttention(torch.autograd.Function):
    """The same forward and gradients as ``FlashAttention``, but the forward keeps every
    tile's weights P for the backward pass instead of recomputing them: right, and as large
    as the (T, S) matrix. For measuring what recomputation saves.
    Lesson: 08_flash_backward
    """

    @staticmethod
    def forward(ctx, query, key, value, is_causal=False, scale=None, block_size=64):
        out, lse = flash_forward(query, key, value, is_causal, scale, block_size)
        scale_ = query.shape[-1] ** -0.5 if scale is None else scale
        T, S = query.shape[-2], key.shape[-2]
        weights = []  # every (T, b) slice of P, exactly what autograd keeps for tiled attention
        for k0 in range(0, S, block_size):
            k = key[..., k0:k0 + block_size, :]
            p = torch.exp(query @ k.transpose(-2, -1) * scale_ - lse[..., None].to(query.dtype))
            if is_causal:
                p = p.masked_fill(_hidden(0, T, k0, k.shape[-2], T, S, query.device), 0.0)
            weights.append(p)
        ctx.save_for_backward(query, key, value, out, *weights)
        ctx.scale, ctx.block_size = scale_, block_size
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        query, key, value, out, *weights = ctx.saved_tensors
        d = (dout * out).sum(dim=-1, keepdim=True)
        dq, dks, dvs = torch.zeros_like(query), [], []
        for k0, p in zip(range(0, key.shape[-2], ctx.block_size), weights, strict=True):
            k = key[..., k0:k0 + p.shape[-1], :]
            v = value[..., k0:k0 + p.shape[-1], :]
            dvs.append(p.transpose(-2, -1) @ dout)
            ds = p * (dout @ v.transpose(-2, -1) - d)
            dq = dq + ds @ k * ctx.scale
            dks.append(ds.transpose(-2, -1) @ query * ctx.scale)
        return dq, torch.cat(dks, dim=-2), torch.cat(dvs, dim=-2), None, None, None
