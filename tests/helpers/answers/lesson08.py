"""Lesson 08's answers as students write them: three correct styles per exercise (tiled
backward passes that skip the hidden blocks and one that does not, Functions that recompute the
weights and one that saves them), shortcuts, answers with a catalogued mistake, and slips that
raise."""

import ctypes
import math
import types

import numpy as np
import torch
import torch.nn.functional as F

from attention_course import attention, flash
from attention_course.checks import lesson08
from attention_course.checks.student import harness

NEG_INF = float("-inf")


def hidden(T, S, first, b, top_left=False):
    """(T, b) bool: keys first .. first+b-1 hidden from the T queries, bottom-right aligned."""
    rows = torch.arange(T)[:, None] + (0 if top_left else S - T)
    return torch.arange(first, first + b) > rows


# ---------------------------------------------------------------- the gradients, whole matrix

def backward_by_matrices(query, key, value, dout, scale=None):
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    p = torch.softmax(query @ key.transpose(-2, -1) * scale, dim=-1)
    out = p @ value
    dv = p.transpose(-2, -1) @ dout
    dp = dout @ value.transpose(-2, -1)
    ds = p * (dp - (dout * out).sum(-1, keepdim=True))
    return ds @ key * scale, ds.transpose(-2, -1) @ query * scale, dv


def backward_by_einsum_in_float64(query, key, value, dout, scale=None):
    """D as rowsum(P * dP); the scale folded into dS; float64 inside."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    q, k, v, do = (x.double() for x in (query, key, value, dout))
    scores = torch.einsum("...td,...sd->...ts", q, k) * scale
    p = torch.exp(scores - torch.logsumexp(scores, -1, keepdim=True))
    dp = torch.einsum("...tv,...sv->...ts", do, v)
    ds = p * (dp - (p * dp).sum(-1, keepdim=True)) * scale
    dq = torch.einsum("...ts,...sd->...td", ds, k)
    dk = torch.einsum("...ts,...td->...sd", ds, q)
    dv = torch.einsum("...ts,...tv->...sv", p, do)
    return dq.to(query.dtype), dk.to(key.dtype), dv.to(value.dtype)


def backward_by_the_jacobian(query, key, value, dout, scale=None):
    """The softmax's Jacobian diag(p) - p p^T, applied to each row, and lesson 02's weights."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    _, p = attention.scaled_dot_product_attention(query, key, value, scale=scale)
    dp = dout @ value.transpose(-2, -1)
    jacobian = torch.diag_embed(p) - p[..., :, None] * p[..., None, :]  # (..., T, S, S)
    ds = (jacobian @ dp[..., :, None])[..., 0]
    return ds @ key * scale, ds.transpose(-2, -1) @ query * scale, p.transpose(-2, -1) @ dout


# ---------------------------------------------------------------- the tiled backward

def tiled_backward_skipping(query, key, value, out, lse, dout, is_causal=False, scale=None,
                            block_size=64):
    """Key blocks outside, query blocks inside, the hidden tiles skipped (FlashAttention-2)."""
    T, S = query.shape[-2], key.shape[-2]
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    d = (dout * out).sum(-1, keepdim=True)
    dq, dks, dvs = torch.zeros_like(query), [], []
    for k0 in range(0, S, block_size):
        k, v = key[..., k0:k0 + block_size, :], value[..., k0:k0 + block_size, :]
        dk, dv = torch.zeros_like(k), torch.zeros_like(v)
        for q0 in range(0, T, block_size):
            q, do = query[..., q0:q0 + block_size, :], dout[..., q0:q0 + block_size, :]
            if is_causal and k0 > S - T + q0 + q.shape[-2] - 1:
                continue
            p = torch.exp(q @ k.transpose(-2, -1) * scale - lse[..., q0:q0 + block_size, None])
            if is_causal:
                rows = torch.arange(q0, q0 + q.shape[-2])[:, None] + S - T
                p = p.masked_fill(torch.arange(k0, k0 + k.shape[-2]) > rows, 0.0)
            dv = dv + p.transpose(-2, -1) @ do
            ds = p * (do @ v.transpose(-2, -1) - d[..., q0:q0 + block_size, :])
            dq[..., q0:q0 + block_size, :] += ds @ k * scale
            dk = dk + ds.transpose(-2, -1) @ q * scale
        dks.append(dk)
        dvs.append(dv)
    return dq, torch.cat(dks, -2), torch.cat(dvs, -2)


def tiled_backward_every_block(query, key, value, out, lse, dout, is_causal=False, scale=None,
                               block_size=64):
    """One loop over the blocks of keys, every query at once, nothing skipped: slower on a
    causal mask (the hidden tiles are computed and zeroed), and right."""
    T, S = query.shape[-2], key.shape[-2]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    D = torch.einsum("...tv,...tv->...t", dout, out)[..., None]
    dq = 0
    dk, dv = [], []
    for k, v, k0 in zip(key.split(block_size, -2), value.split(block_size, -2),
                        range(0, S, block_size), strict=True):
        p = torch.exp(torch.einsum("...td,...sd->...ts", query, k) * scale - lse[..., None])
        if is_causal:
            p = torch.where(hidden(T, S, k0, k.shape[-2]), 0.0, p)
        dv.append(torch.einsum("...ts,...tv->...sv", p, dout))
        ds = p * (torch.einsum("...tv,...sv->...ts", dout, v) - D)
        dq = dq + torch.einsum("...ts,...sd->...td", ds, k) * scale
        dk.append(torch.einsum("...ts,...td->...sd", ds, query) * scale)
    return dq, torch.cat(dk, -2), torch.cat(dv, -2)


def tiled_backward_in_float64(query, key, value, out, lse, dout, is_causal=False, scale=None,
                              block_size=64):
    """Query blocks outside, key blocks inside up to the last visible one; dK and dV written
    into preallocated tensors; float64 inside."""
    T, S = query.shape[-2], key.shape[-2]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    q64, k64, v64, do64 = (x.double() for x in (query, key, value, dout))
    d = (do64 * out.double()).sum(-1, keepdim=True)
    dq, dk, dv = torch.zeros_like(q64), torch.zeros_like(k64), torch.zeros_like(v64)
    for q0 in range(0, T, block_size):
        q, do = q64[..., q0:q0 + block_size, :], do64[..., q0:q0 + block_size, :]
        n = q.shape[-2]
        last = S - T + q0 + n - 1 if is_causal else S - 1  # the last key any of them sees
        for k0 in range(0, last + 1, block_size):
            k, v = k64[..., k0:k0 + block_size, :], v64[..., k0:k0 + block_size, :]
            p = torch.exp(q @ k.transpose(-2, -1) * scale
                          - lse[..., q0:q0 + n].double().unsqueeze(-1))
            if is_causal:
                p = p * ~(torch.arange(k0, k0 + k.shape[-2])
                          > (torch.arange(q0, q0 + n) + S - T)[:, None])
            ds = p * (do @ v.transpose(-2, -1) - d[..., q0:q0 + n, :])
            dq[..., q0:q0 + n, :] += ds @ k * scale
            dk[..., k0:k0 + k.shape[-2], :] += ds.transpose(-2, -1) @ q * scale
            dv[..., k0:k0 + k.shape[-2], :] += p.transpose(-2, -1) @ do
    return dq.to(query.dtype), dk.to(key.dtype), dv.to(value.dtype)


# ---------------------------------------------------------------- the autograd.Function

def forward_with_lse(query, key, value, is_causal, scale, block_size):
    """Lesson 07's online softmax over the blocks of keys, and L = m + log(l)."""
    T, S = query.shape[-2], key.shape[-2]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    m = torch.full_like(query[..., :1], NEG_INF)
    l = torch.zeros_like(m)
    acc = query.new_zeros(*query.shape[:-1], value.shape[-1])
    for k0 in range(0, S, block_size):
        k, v = key[..., k0:k0 + block_size, :], value[..., k0:k0 + block_size, :]
        scores = query @ k.transpose(-2, -1) * scale
        if is_causal:
            scores = scores.masked_fill(hidden(T, S, k0, k.shape[-2]), NEG_INF)
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        p = torch.exp(scores - m_new)
        l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True)
        acc = acc * torch.exp(m - m_new) + p @ v
        m = m_new
    return acc / l, (m + torch.log(l))[..., 0]


class IdentityFunction(torch.autograd.Function):
    """Passes its input and its gradient on unchanged."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad


class FlashBySkipping(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, is_causal=False, scale=None, block_size=64):
        out, lse = forward_with_lse(query, key, value, is_causal, scale, block_size)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.settings = (is_causal, scale, block_size)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        grads = tiled_backward_skipping(*ctx.saved_tensors[:5], dout, *ctx.settings)
        return (*grads, None, None, None)


def flash_by_skipping(query, key, value, is_causal=False, scale=None, block_size=64):
    return FlashBySkipping.apply(query, key, value, is_causal, scale, block_size)


class FlashInQueryBlocks(torch.autograd.Function):
    """The forward in blocks of queries, each a running logsumexp (logaddexp); the backward
    through the einsum style; lse not marked: it simply gets no gradient."""

    @staticmethod
    def forward(ctx, query, key, value, is_causal, scale, block_size):
        T, S = query.shape[-2], key.shape[-2]
        sc = query.shape[-1] ** -0.5 if scale is None else scale
        outs, lses = [], []
        for q0 in range(0, T, block_size):
            q = query[..., q0:q0 + block_size, :]
            out = torch.zeros(*q.shape[:-1], value.shape[-1], dtype=q.dtype)
            lse = torch.full(q.shape[:-1], NEG_INF, dtype=q.dtype)
            for k0 in range(0, S, block_size):
                k, v = key[..., k0:k0 + block_size, :], value[..., k0:k0 + block_size, :]
                s = torch.einsum("...td,...sd->...ts", q, k) * sc
                if is_causal:
                    s = s.masked_fill(torch.arange(k0, k0 + k.shape[-2])
                                      > (torch.arange(q0, q0 + q.shape[-2]) + S - T)[:, None],
                                      NEG_INF)
                new = torch.logaddexp(lse, torch.logsumexp(s, -1))
                out = out * torch.exp(lse - new)[..., None] + torch.exp(s - new[..., None]) @ v
                lse = new
            outs.append(out)
            lses.append(lse)
        out, lse = torch.cat(outs, -2), torch.cat(lses, -1)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.is_causal, ctx.scale, ctx.block_size = is_causal, scale, block_size
        return out, lse

    @staticmethod
    def backward(ctx, dout, _):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = tiled_backward_every_block(q, k, v, o, lse, dout, ctx.is_causal, ctx.scale,
                                                ctx.block_size)
        return dq, dk, dv, None, None, None


def flash_in_query_blocks(query, key, value, is_causal=False, scale=None, block_size=64):
    out, lse = FlashInQueryBlocks.apply(query, key, value, is_causal, scale, block_size)
    return out, lse.detach()


class FlashSavingTheWeights(torch.autograd.Function):
    """Right, but it saves every block's P: the memory of the (T, S) matrix is back."""

    @staticmethod
    def forward(ctx, query, key, value, is_causal=False, scale=None, block_size=64):
        out, lse = forward_with_lse(query, key, value, is_causal, scale, block_size)
        sc = query.shape[-1] ** -0.5 if scale is None else scale
        T, S = query.shape[-2], key.shape[-2]
        blocks = []
        for k0 in range(0, S, block_size):
            p = torch.exp(query @ key[..., k0:k0 + block_size, :].transpose(-2, -1) * sc
                          - lse[..., None])
            if is_causal:
                p = p.masked_fill(hidden(T, S, k0, p.shape[-1]), 0.0)
            blocks.append(p)
        ctx.save_for_backward(query, key, value, out, *blocks)
        ctx.scale, ctx.block_size = sc, block_size
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        query, key, value, out, *blocks = ctx.saved_tensors
        d = (dout * out).sum(-1, keepdim=True)
        dq, dks, dvs = 0, [], []
        for k0, p in zip(range(0, key.shape[-2], ctx.block_size), blocks, strict=True):
            k = key[..., k0:k0 + ctx.block_size, :]
            v = value[..., k0:k0 + ctx.block_size, :]
            ds = p * (dout @ v.transpose(-2, -1) - d)
            dq = dq + ds @ k * ctx.scale
            dks.append(ds.transpose(-2, -1) @ query * ctx.scale)
            dvs.append(p.transpose(-2, -1) @ dout)
        return dq, torch.cat(dks, -2), torch.cat(dvs, -2), None, None, None


def flash_saving_the_weights(query, key, value, is_causal=False, scale=None, block_size=64):
    return FlashSavingTheWeights.apply(query, key, value, is_causal, scale, block_size)


class FlashInFloat64(torch.autograd.Function):
    """Both passes in float64 inside (the forward's statistics, the backward's tiles), the
    results in the inputs' dtype."""

    @staticmethod
    def forward(ctx, query, key, value, is_causal=False, scale=None, block_size=64):
        out, lse = forward_with_lse(query.double(), key.double(), value.double(), is_causal,
                                    scale, block_size)
        out, lse = out.to(query.dtype), lse.to(query.dtype)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.settings = (is_causal, scale, block_size)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        return (*tiled_backward_in_float64(*ctx.saved_tensors, dout, *ctx.settings),
                None, None, None)


def flash_in_float64(query, key, value, is_causal=False, scale=None, block_size=64):
    return FlashInFloat64.apply(query, key, value, is_causal, scale, block_size)


CORRECT = {
    "attention_backward": [backward_by_matrices, backward_by_einsum_in_float64,
                           backward_by_the_jacobian],
    "flash_backward": [tiled_backward_skipping, tiled_backward_every_block,
                       tiled_backward_in_float64],
    "flash_attention": [flash_by_skipping, flash_in_query_blocks, flash_saving_the_weights,
                        flash_in_float64],
}
REFERENCES = {
    "attention_backward": flash.attention_backward,
    "flash_backward": flash.flash_backward,
    "flash_attention": flash.flash_attention,
}


# ---------------------------------------------------------------- shortcuts

def backward_by_autograd(query, key, value, dout, scale=None):
    """Autograd through lesson 02's attention: the gradients, not written."""
    with torch.enable_grad():
        q, k, v = (x.detach().requires_grad_() for x in (query, key, value))
        out, _ = attention.scaled_dot_product_attention(q, k, v, scale=scale)
        return torch.autograd.grad(out, (q, k, v), dout)


def backward_by_torch(query, key, value, dout, scale=None):
    with torch.enable_grad():
        q, k, v = (x.detach().requires_grad_() for x in (query, key, value))
        F.scaled_dot_product_attention(q, k, v, scale=scale).backward(dout)
        return q.grad, k.grad, v.grad


def tiled_backward_by_autograd(query, key, value, out, lse, dout, is_causal=False, scale=None,
                               block_size=64):
    with torch.enable_grad():
        q, k, v = (x.detach().requires_grad_() for x in (query, key, value))
        result = forward_with_lse(q, k, v, is_causal, scale, block_size)[0]
        result.backward(dout)
        return q.grad, k.grad, v.grad


class AutogradInside(torch.autograd.Function):
    """The forward keeps the inputs; autograd through a naive attention in the forward."""

    @staticmethod
    def forward(ctx, query, key, value, is_causal=False, scale=None, block_size=64):
        with torch.enable_grad():
            q, k, v = (x.detach().requires_grad_() for x in (query, key, value))
            out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
        ctx.save_for_backward(q, k, v, out)
        return out.detach(), torch.logsumexp(q @ k.transpose(-2, -1), -1).detach()

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out = ctx.saved_tensors
        return (*torch.autograd.grad(out, (q, k, v), dout), None, None, None)


def flash_through_torch(query, key, value, is_causal=False, scale=None, block_size=64):
    return AutogradInside.apply(query, key, value, is_causal, scale, block_size)


def function_whose_backward_is(name, backward):
    """A student's Function with a right tiled forward and the given ``backward(ctx, dout)``
    body, applied by a wrapper called ``name``."""
    class Student(torch.autograd.Function):
        @staticmethod
        def forward(ctx, query, key, value, is_causal=False, scale=None, block_size=64):
            out, lse = forward_with_lse(query, key, value, is_causal, scale, block_size)
            ctx.save_for_backward(query, key, value, out, lse)
            ctx.settings = (is_causal, scale, block_size)
            ctx.mark_non_differentiable(lse)
            return out, lse

        @staticmethod
        def backward(ctx, dout, dlse):
            return (*backward(ctx, dout), None, None, None)

    def flash_attention(query, key, value, is_causal=False, scale=None, block_size=64):
        return Student.apply(query, key, value, is_causal, scale, block_size)
    flash_attention.__name__ = name
    return flash_attention


def autograd_through_the_tiles(ctx, dout):
    """The backward by torch.autograd.grad through the tiled forward run again."""
    query, key, value, _, _ = ctx.saved_tensors
    with torch.enable_grad():
        q, k, v = (x.detach().requires_grad_() for x in (query, key, value))
        out, _ = forward_with_lse(q, k, v, *ctx.settings)
        return torch.autograd.grad(out, (q, k, v), dout)


def vjp_through_the_tiles(ctx, dout):
    query, key, value, _, _ = ctx.saved_tensors
    _, vjp = torch.func.vjp(lambda q, k, v: forward_with_lse(q, k, v, *ctx.settings)[0],
                            query, key, value)
    return vjp(dout)


def flash_backward_in_numpy(query, key, value, out, lse, dout, is_causal=False, scale=None,
                            block_size=64):
    """The gradients from the whole (T, S) matrix at once, in numpy, where the tiled size watch
    cannot see it."""
    T, S = query.shape[-2], key.shape[-2]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    q, k, v, o, do = (x.detach().double().numpy() for x in (query, key, value, out, dout))
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if is_causal:
        scores = np.where(~hidden(T, S, 0, S).numpy(), scores, -np.inf)
    p = np.exp(scores - lse.detach().double().numpy()[..., None])
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (do * o).sum(-1, keepdims=True))
    grads = (ds @ k * scale, np.swapaxes(ds, -1, -2) @ q * scale, np.swapaxes(p, -1, -2) @ do)
    return tuple(torch.tensor(g, dtype=query.dtype) for g in grads)


def flash_backward_out_of_torch(leave):
    """The numpy gradients, the tensors turned into numpy arrays by ``leave`` (float64 cases)."""
    def flash_backward(query, key, value, out, lse, dout, is_causal=False, scale=None,
                       block_size=64):
        arrays = (torch.as_tensor(np.array(leave(x.double()))) for x in
                  (query, key, value, out, lse, dout))
        grads = flash_backward_in_numpy(*arrays, is_causal, scale, block_size)
        return tuple(g.to(query.dtype) for g in grads)
    return flash_backward


def through_the_storage(t):
    """``t`` (float64) as a numpy array read from its untyped storage's memory in one copy.
    (``bytes(storage)`` reads it a byte at a time, each byte a torch call that the check's
    watches see: 25 s for this check's cases, and the same refusal.)"""
    storage = t.detach().contiguous().untyped_storage()
    raw = ctypes.string_at(storage.data_ptr(), storage.nbytes())
    return np.frombuffer(raw, dtype=np.float64).reshape(t.shape)


def engine_through_the_tiles(run_backward):
    """The backward by the autograd engine itself (what torch.autograd.grad ends in), called
    through ``run_backward(out, dout, inputs)``, through the tiled forward run again."""
    def backward(ctx, dout):
        query, key, value, _, _ = ctx.saved_tensors
        with torch.enable_grad():
            q, k, v = (x.detach().requires_grad_() for x in (query, key, value))
            out, _ = forward_with_lse(q, k, v, *ctx.settings)
            return run_backward(out, dout, (q, k, v))
    return backward


ENGINE_CALLS = {
    "torch.autograd.graph._engine_run_backward": lambda out, dout, inputs: (
        torch.autograd.graph._engine_run_backward((out,), (dout,), False, False, inputs, True,
                                                  False)),
    "the engine's run_backward": lambda out, dout, inputs: (
        torch.autograd.variable.Variable._execution_engine.run_backward(
            (out,), (dout,), False, False, inputs, True, False)),
    "the harness's own engine call": lambda out, dout, inputs: harness._engine_backward(
        out, dout, inputs),
    "the engine under the harness's names": lambda out, dout, inputs: posing_as_the_harness(
        harness._engine_backward)(out, dout, inputs),
}


def posing_as_the_harness(fn):
    """``fn`` with a code object that claims the harness's file and the name of its engine
    call: the watch trusts the harness's code objects themselves, not their names."""
    code = fn.__code__.replace(co_filename=harness.__file__, co_name="_engine_backward")
    return types.FunctionType(code, fn.__globals__, "_engine_backward")


def backward_of_torch_attention(ctx, dout):
    """PyTorch's attention run again in the backward, and its backward pass."""
    query, key, value, _, _ = ctx.saved_tensors
    is_causal, scale, _ = ctx.settings
    with torch.enable_grad():
        q, k, v = (x.detach().requires_grad_() for x in (query, key, value))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
        return torch.autograd.grad(out, (q, k, v), dout)


def autograd_through_naive_attention(ctx, dout):
    """Autograd through lesson 02's attention in one piece, inside the backward."""
    query, key, value, _, _ = ctx.saved_tensors
    is_causal, scale, _ = ctx.settings
    T, S = query.shape[-2], key.shape[-2]
    with torch.enable_grad():
        q, k, v = (x.detach().requires_grad_() for x in (query, key, value))
        mask = ~hidden(T, S, 0, S) if is_causal else None
        out, _ = attention.scaled_dot_product_attention(q, k, v, mask, scale=scale)
        return torch.autograd.grad(out, (q, k, v), dout)


def backward_in_one_piece(ctx, dout):
    return tiled_backward_in_one_piece(*ctx.saved_tensors, dout, *ctx.settings)


def flash_from_the_course(query, key, value, is_causal=False, scale=None, block_size=64):
    """This lesson's reference Function, the course's (not written)."""
    return flash.FlashAttention.apply(query, key, value, is_causal, scale, block_size)


BUILT_INS = {
    "attention_backward": {"torch.autograd.grad": backward_by_autograd,
                           "F.scaled_dot_product_attention + backward": backward_by_torch},
    "flash_backward": {"Tensor.backward": tiled_backward_by_autograd,
                       "Tensor.numpy": flash_backward_in_numpy,
                       "numpy.from_dlpack": flash_backward_out_of_torch(
                           lambda t: np.from_dlpack(t.detach())),
                       "Tensor.untyped_storage": flash_backward_out_of_torch(
                           through_the_storage)},
    "flash_attention": {
        "F.scaled_dot_product_attention": flash_through_torch,
        "flash.FlashAttention": flash_from_the_course,
        "torch.autograd.grad inside backward": function_whose_backward_is(
            "flash_with_autograd_in_backward", autograd_through_the_tiles),
        "torch.func.vjp inside backward": function_whose_backward_is(
            "flash_with_vjp_in_backward", vjp_through_the_tiles),
        "torch.autograd.grad through a naive attention inside backward":
            function_whose_backward_is("flash_autograd_through_naive_attention",
                                       autograd_through_naive_attention),
        "F.scaled_dot_product_attention inside backward": function_whose_backward_is(
            "flash_with_torch_in_backward", backward_of_torch_attention),
        **{f"{how} inside backward": function_whose_backward_is(
            f"flash_by_{i}_engine_call", engine_through_the_tiles(call))
           for i, (how, call) in enumerate(ENGINE_CALLS.items())},
    },
}


# ---------------------------------------------------------------- catalogued mistakes

def backward_without_d(query, key, value, dout, scale=None):
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    p = torch.softmax(query @ key.transpose(-2, -1) * scale, dim=-1)
    ds = p * (dout @ value.transpose(-2, -1))
    return ds @ key * scale, ds.transpose(-2, -1) @ query * scale, p.transpose(-2, -1) @ dout


def backward_scaling_twice(query, key, value, dout, scale=None):
    """dS taken as the gradient of Q K^T (scale included), then scaled again."""
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    p = torch.softmax(query @ key.transpose(-2, -1) * scale, dim=-1)
    dp = dout @ value.transpose(-2, -1)
    ds = p * (dp - (p * dp).sum(-1, keepdim=True)) * scale
    return ds @ key * scale, ds.transpose(-2, -1) @ query * scale, p.transpose(-2, -1) @ dout


def backward_swapping_dq_and_dk(query, key, value, dout, scale=None):
    dq, dk, dv = backward_by_matrices(query, key, value, dout, scale)
    return dk, dq, dv


def tiled_backward_with_block_d(query, key, value, out, lse, dout, is_causal=False, scale=None,
                                block_size=64):
    """D from each block's P and dP: right with one block, wrong with several."""
    T, S = query.shape[-2], key.shape[-2]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    dq, dk, dv = 0, [], []
    for k0 in range(0, S, block_size):
        k, v = key[..., k0:k0 + block_size, :], value[..., k0:k0 + block_size, :]
        p = torch.exp(query @ k.transpose(-2, -1) * scale - lse[..., None])
        if is_causal:
            p = p.masked_fill(hidden(T, S, k0, k.shape[-2]), 0.0)
        dp = dout @ v.transpose(-2, -1)
        ds = p * (dp - (p * dp).sum(-1, keepdim=True))
        dq = dq + ds @ k * scale
        dk.append(ds.transpose(-2, -1) @ query * scale)
        dv.append(p.transpose(-2, -1) @ dout)
    return dq, torch.cat(dk, -2), torch.cat(dv, -2)


def tiled_backward_student(name, *, mask=True, subtract_lse=True, scale_p=True, use_d=True,
                           swap=False, scale_grads=1):
    """A student's tiled backward, called ``name``, with one of the slips the lesson names."""
    def flash_backward(query, key, value, out, lse, dout, is_causal=False, scale=None,
                       block_size=64):
        T, S = query.shape[-2], key.shape[-2]
        scale = query.shape[-1] ** -0.5 if scale is None else scale
        d = (dout * out).sum(-1, keepdim=True) if use_d else 0
        dq, dk, dv = 0, [], []
        for k0 in range(0, S, block_size):
            k, v = key[..., k0:k0 + block_size, :], value[..., k0:k0 + block_size, :]
            scores = query @ k.transpose(-2, -1) * (scale if scale_p else 1)
            p = torch.exp(scores - lse[..., None]) if subtract_lse else torch.exp(scores)
            if is_causal and mask:
                p = p.masked_fill(hidden(T, S, k0, k.shape[-2]), 0.0)
            ds = p * (dout @ v.transpose(-2, -1) - d)
            dq = dq + ds @ k * scale ** scale_grads
            dk.append(ds.transpose(-2, -1) @ query * scale ** scale_grads)
            dv.append(p.transpose(-2, -1) @ dout)
        dq, dk, dv = dq, torch.cat(dk, -2), torch.cat(dv, -2)
        return (dk, dq, dv) if swap else (dq, dk, dv)
    flash_backward.__name__ = name
    return flash_backward


def function_calling(name, flash_backward, *, pass_causal=True, pass_scale=True):
    """A student's Function (right forward) whose backward calls ``flash_backward``, passing on
    is_causal and scale, or forgetting one of them."""
    def backward(ctx, dout):
        is_causal, scale, block_size = ctx.settings
        return flash_backward(*ctx.saved_tensors, dout, is_causal and pass_causal,
                              scale if pass_scale else None, block_size)
    return function_whose_backward_is(name, backward)


class FlashWithoutTheMaximum(FlashBySkipping):
    @staticmethod
    def forward(ctx, query, key, value, is_causal=False, scale=None, block_size=64):
        out, _ = forward_with_lse(query, key, value, is_causal, scale, block_size)
        sc = query.shape[-1] ** -0.5 if scale is None else scale
        T, S = query.shape[-2], key.shape[-2]
        total = 0
        for k0 in range(0, S, block_size):
            s = query @ key[..., k0:k0 + block_size, :].transpose(-2, -1) * sc
            if is_causal:
                s = s.masked_fill(hidden(T, S, k0, s.shape[-1]), NEG_INF)
            total = total + torch.exp(s).sum(-1)
        lse = torch.log(total)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.settings = (is_causal, scale, block_size)
        ctx.mark_non_differentiable(lse)
        return out, lse


def flash_without_the_maximum(query, key, value, is_causal=False, scale=None, block_size=64):
    return FlashWithoutTheMaximum.apply(query, key, value, is_causal, scale, block_size)


MISTAKES = {  # student's answer: (exercise, the mistakes the check must name)
    backward_without_d: ("attention_backward", [lesson08.D_MISSING.name]),
    backward_scaling_twice: ("attention_backward", [lesson08.SCALE_TWICE.name]),
    backward_swapping_dq_and_dk: ("attention_backward", [lesson08.DQ_DK_SWAPPED.name]),
    tiled_backward_with_block_d: ("flash_backward", [lesson08.D_FROM_BLOCK.name]),
    tiled_backward_student("flash_backward_unmasked", mask=False):
        ("flash_backward", [lesson08.MASK_NOT_APPLIED.name]),
    tiled_backward_student("flash_backward_without_lse", subtract_lse=False):
        ("flash_backward", [lesson08.P_WITHOUT_LSE.name]),
    flash_without_the_maximum: ("flash_attention", [lesson08.LSE_WITHOUT_MAX.name]),
    # the Function's backward pass, judged inside the check since it runs in its call
    function_calling("flash_without_d", tiled_backward_student("fb", use_d=False)):
        ("flash_attention", [lesson08.D_MISSING.name]),
    function_calling("flash_with_block_d", tiled_backward_with_block_d):
        ("flash_attention", [lesson08.D_FROM_BLOCK.name]),
    function_calling("flash_p_unscaled", tiled_backward_student("fb", scale_p=False)):
        ("flash_attention", [lesson08.P_WITHOUT_SCALE.name]),
    function_calling("flash_p_without_lse", tiled_backward_student("fb", subtract_lse=False)):
        ("flash_attention", [lesson08.P_WITHOUT_LSE.name]),
    function_calling("flash_swapped", tiled_backward_student("fb", swap=True)):
        ("flash_attention", [lesson08.DQ_DK_SWAPPED.name]),
    function_calling("flash_scaled_twice", tiled_backward_student("fb", scale_grads=2)):
        ("flash_attention", [lesson08.SCALE_TWICE.name]),
    function_calling("flash_unscaled_grads", tiled_backward_student("fb", scale_grads=0)):
        ("flash_attention", [lesson08.SCALE_LEFT_OUT.name]),
    function_calling("flash_backward_unmasked", tiled_backward_student("fb", mask=False)):
        ("flash_attention", [lesson08.BACKWARD_NOT_CAUSAL.name]),
    function_calling("flash_causal_not_passed", tiled_backward_skipping, pass_causal=False):
        ("flash_attention", [lesson08.BACKWARD_NOT_CAUSAL.name]),
    function_calling("flash_scale_not_passed", tiled_backward_skipping, pass_scale=False):
        ("flash_attention", [lesson08.BACKWARD_IGNORES_SCALE.name]),
}


# ---------------------------------------------------------------- slips that raise

def tiled_backward_in_one_piece(query, key, value, out, lse, dout, is_causal=False, scale=None,
                                block_size=64):
    """Right numbers, but the whole (T, S) matrix at once: no tiles at all."""
    T, S = query.shape[-2], key.shape[-2]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    p = torch.exp(query @ key.transpose(-2, -1) * scale - lse[..., None])
    if is_causal:
        p = p.masked_fill(hidden(T, S, 0, S), 0.0)
    ds = p * (dout @ value.transpose(-2, -1) - (dout * out).sum(-1, keepdim=True))
    return ds @ key * scale, ds.transpose(-2, -1) @ query * scale, p.transpose(-2, -1) @ dout


class ThreeGradients(FlashBySkipping):
    @staticmethod
    def backward(ctx, dout, dlse):
        return tiled_backward_skipping(*ctx.saved_tensors[:5], dout, *ctx.settings)


def flash_returning_three_gradients(query, key, value, is_causal=False, scale=None,
                                    block_size=64):
    return ThreeGradients.apply(query, key, value, is_causal, scale, block_size)


SLIPS = [  # (exercise, slip, the mistake explain_error names from the error the slip raises)
    ("flash_backward", tiled_backward_in_one_piece,
     "the whole (T, S) matrix computed at once"),
    # the Function's backward pass runs inside the check's call, under the same size watch
    ("flash_attention", function_whose_backward_is("flash_backward_in_one_piece",
                                                   backward_in_one_piece),
     "the whole (T, S) matrix computed at once"),
    ("flash_attention", flash_returning_three_gradients,
     "backward returns fewer gradients than forward has inputs"),
]
# none left: the check runs the Function's backward pass inside its call, so what it raises
# is reported like any error of the student's code (the table stays for other lessons)
GRADIENT_SLIPS = []
