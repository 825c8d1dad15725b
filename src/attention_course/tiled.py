"""Tiled attention with an online softmax: FlashAttention's algorithm in plain PyTorch.

Lesson: 07_inference_and_scale

Attention as written in lesson 02 builds the whole (T, S) matrix of scores, then of weights:
memory that grows like T * S. Tiled attention reads the keys and values one block at a time
and keeps, for every query, three running quantities: the largest score so far ``m``, the sum
of exp(score - m) so far ``l``, and the sum of exp(score - m) * value so far ``acc``. When a
block brings a larger score, what was accumulated is rescaled by exp(m_old - m_new); at the
end ``acc / l`` is the softmax-weighted sum of the values, exactly, and ``m + log l`` is each
query's logsumexp, all that ``merge_attention`` needs to combine it with attention over other
keys. Only a (T, block) slice of scores ever exists.
"""

import weakref

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .attention import check_key_value, check_query_key, compute_dtype


def tiled_attention(query: Tensor, key: Tensor, value: Tensor, is_causal: bool = False,
                    scale: float | None = None, block_size: int = 64) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T * scale) V and each query's logsumexp, one block of keys at a time,
    without the (T, S) weights.

    Args:
        query: (B, H, T, D) queries (any leading dims that broadcast).
        key: (B, H, S, D) keys.
        value: (B, H, S, Dv) values.
        is_causal: query t sits at position S - T + t, as the last T tokens of a sequence of S
            (after a cache), and sees keys s <= S - T + t: the causal mask aligned at the
            bottom-right corner. Needs T <= S; with T = S it is PyTorch's ``is_causal``.
        scale: factor for the scores; None means 1/sqrt(D).
        block_size: how many keys each step reads.
    Returns:
        out: (B, H, T, Dv) the same output as attention computed in one piece, up to rounding,
            in the dtype of ``query``; 0 where there are no keys (S = 0), as in PyTorch.
        lse: (B, H, T) each query's logsumexp of its (scaled, masked) scores, m + log l, the
            natural logarithm of the sum of their exponentials; -inf for a query with no key
            (S = 0). In float32 for 16-bit inputs (as FlashAttention keeps it, and as
            ``merge_attention`` takes it), else in the dtype of ``query``. The running
            statistics of 16-bit inputs are float32 too.
    Lesson: 07_inference_and_scale
    """
    check_query_key(query, key)
    check_key_value(key, value)
    T, S = query.shape[-2], key.shape[-2]
    if is_causal and T > S:
        raise ValueError(f"is_causal needs T <= S: {T} queries cannot be the last of {S} keys")
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    dtype, wide = query.dtype, compute_dtype(query.dtype)  # float32 for 16-bit floats
    query = query.to(wide)  # the keys and values follow block by block
    m = torch.full_like(query[..., :1], float("-inf"))  # (B, H, T, 1) running max of the scores
    l = torch.zeros_like(m)  # (B, H, T, 1) running sum of exp(score - m)
    acc = query.new_zeros(*query.shape[:-1], value.shape[-1])  # (B, H, T, Dv) exp(score - m) * v
    position = torch.arange(S - T, S, device=query.device)[:, None]  # (T, 1): each query's place
    for start in range(0, S, block_size):
        k = key[..., start:start + block_size, :].to(wide)  # (B, H, b, D)
        v = value[..., start:start + block_size, :].to(wide)  # (B, H, b, Dv)
        scores = query @ k.transpose(-2, -1) * scale  # (B,H,T,D) @ (B,H,D,b) -> (B,H,T,b)
        if is_causal:
            keys_at = torch.arange(start, start + k.shape[-2], device=query.device)  # (b,)
            scores = scores.masked_fill(keys_at > position, float("-inf"))  # (T, b) future
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # (B, H, T, 1)
        rescale = torch.exp(m - m_new)  # what was summed against m is now against m_new
        p = torch.exp(scores - m_new)  # (B, H, T, b)
        l = l * rescale + p.sum(dim=-1, keepdim=True)
        acc = acc * rescale + p @ v  # (B,H,T,b) @ (B,H,b,Dv) -> (B,H,T,Dv)
        m = m_new
    out = acc / l if S > 0 else acc  # no keys: l = 0, and the output is 0
    lse = (m + torch.log(l)).squeeze(-1)  # (B, H, T) log sum exp(score); no keys: -inf
    return out.to(dtype), lse


def flash_attention(query: Tensor, key: Tensor, value: Tensor, is_causal: bool = False,
                    scale: float | None = None, block_size: int = 64) -> tuple[Tensor, Tensor]:
    """``tiled_attention`` on one block of queries at a time, as FlashAttention does.

    Then only a (block, block) slice of scores and a (block, Dv) accumulator exist at once.
    With ``is_causal`` a block of queries sees no key after its last query, so it runs on the
    keys up to there only: the blocks above the diagonal are never computed. The arguments and
    the result are those of ``tiled_attention``.
    Lesson: 07_inference_and_scale
    """
    T, S = query.shape[-2], key.shape[-2]
    outs, lses = [], []
    for start in range(0, max(T, 1), block_size):  # T = 0: one empty block, for torch.cat
        q = query[..., start:start + block_size, :]  # (B, H, b, D)
        end = S - T + start + q.shape[-2] if is_causal else S  # keys this block may see
        out, lse = tiled_attention(q, key[..., :end, :], value[..., :end, :], is_causal, scale,
                                   block_size)
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)  # (B, H, T, Dv), (B, H, T)


# ---------------------------------------------------------------- merging partial attentions

def merge_attention(out_a: Tensor, lse_a: Tensor, out_b: Tensor,
                    lse_b: Tensor) -> tuple[Tensor, Tensor]:
    """Attention over the keys of two disjoint parts, from each part's output and logsumexp.

    Part a's output is sum_s e^(x_s - lse_a) v_s over its keys: weighted by e^lse_a it is the
    unnormalised sum, so the union's output is each part's output times its share of the
    union's exponentials, e^(lse_a - lse) and e^(lse_b - lse), with lse = log(e^lse_a + e^lse_b).
    This is how split-K decoding and ring attention combine the work of several blocks or
    devices.
    Args:
        out_a: (..., T, Dv) attention of T queries over the keys of part a; 0 in a row that has
            no key there.
        lse_a: (..., T) logsumexp of each query's scores over part a; -inf where it has no key.
        out_b, lse_b: the same over part b, whose keys are not in part a.
    Returns:
        out: (..., T, Dv) attention over both parts' keys, in the dtype of ``out_a``; 0 in a
            row with no key in either part.
        lse: (..., T) the logsumexp over both parts, in the dtype of ``lse_a``. The arithmetic
            is float32 for 16-bit inputs, as the logsumexp of FlashAttention is.
    Lesson: 07_inference_and_scale
    """
    wide = compute_dtype(out_a.dtype)  # float32 for 16-bit outputs
    lse = torch.logaddexp(lse_a.to(wide), lse_b.to(wide))  # (..., T) log(e^lse_a + e^lse_b)
    base = lse.masked_fill(lse == float("-inf"), 0.0)  # a row with no key: both shares are 0
    share_a = torch.exp(lse_a.to(wide) - base)[..., None]  # (..., T, 1) part a's share
    share_b = torch.exp(lse_b.to(wide) - base)[..., None]
    out = share_a * out_a.to(wide) + share_b * out_b.to(wide)  # (..., T, Dv)
    return out.to(out_a.dtype), lse.to(lse_a.dtype)


# ---------------------------------------------------------------- measuring memory

def peak_memory(fn, *args, **kwargs) -> tuple:
    """Run ``fn(*args, **kwargs)``; return its result and the peak bytes of the tensors it
    created that were alive at the same time.

    On a GPU this is the CUDA allocator's own peak. On the CPU every tensor that an operation
    creates is counted from its creation until it is freed (views and in-place results add
    nothing); work space inside a fused kernel, which PyTorch never sees as a tensor, is not.
    Lesson: 07_inference_and_scale
    """
    device = next((a.device for a in args if isinstance(a, Tensor)), torch.device("cpu"))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = fn(*args, **kwargs)
        torch.cuda.synchronize(device)
        return result, torch.cuda.max_memory_allocated(device) - before
    with _LiveTensors() as live:
        result = fn(*args, **kwargs)
    return result, live.peak


class _LiveTensors(TorchDispatchMode):
    """Counts the bytes of the storages that operations create while it is active, until each
    storage is freed, and keeps the peak."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # nothing here is compiled: no wrapper, which would import torch._dynamo

    def __init__(self):
        super().__init__()
        self.now = self.peak = 0
        self.alive = set()  # where the counted storages start: each is counted once

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        returns = func._schema.returns
        outputs = out if isinstance(out, tuple | list) else (out,)
        for described, result in zip(returns, outputs, strict=False):
            if described.alias_info is None:  # a new tensor, not a view or an in-place result
                for tensor in tree_leaves(result):
                    if isinstance(tensor, Tensor):
                        self._count(tensor.untyped_storage())
        return out

    def _count(self, storage) -> None:
        size, where = storage.nbytes(), (storage.device, storage.data_ptr())
        if size == 0 or where in self.alive:  # empty, or an alias the schema does not mark
            return
        self.alive.add(where)
        self.now += size
        self.peak = max(self.peak, self.now)
        weakref.finalize(storage, self._free, size, where)

    def _free(self, size: int, where: tuple) -> None:
        self.now -= size
        self.alive.discard(where)
