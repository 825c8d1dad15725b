"""Lesson 10's answers as students write them: three correct styles or more per exercise
(matrices, einsum in float64, loops over heads, lesson 03's attention; layers naive and
absorbed), shortcuts, one answer per catalogued mistake, and slips that raise."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from attention_course import attention, latent
from attention_course.checks import lesson10
from attention_course.rope import apply_rotary, rotary_angles, rotate_pairs

NEG_INF = float("-inf")


def future(T, S):
    """(T, S) bool, True where the key comes after the query (the T queries are the last T)."""
    return torch.ones(T, S, dtype=torch.bool).triu(S - T + 1)


# ---------------------------------------------------------------- naive

def naive_by_matrices(query, latent, w_uk, w_uv, scale=None):
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    keys = latent[..., None, :, :] @ w_uk  # (B, H, S, D)
    values = latent[..., None, :, :] @ w_uv
    scores = query @ keys.transpose(-2, -1) * scale
    weights = scores.masked_fill(future(*scores.shape[-2:]), NEG_INF).softmax(-1)
    return weights @ values


def naive_by_einsum_in_float64(query, latent, w_uk, w_uv, scale=None):
    q, c, wk, wv = (t.double() for t in (query, latent, w_uk, w_uv))
    keys = torch.einsum("...sc,hcd->...hsd", c, wk)
    values = torch.einsum("...sc,hcv->...hsv", c, wv)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.einsum("...htd,...hsd->...hts", q, keys) * scale
    T, S = scores.shape[-2:]
    bias = torch.zeros(T, S, dtype=torch.float64).masked_fill(future(T, S), NEG_INF)
    weights = torch.softmax(scores + bias, dim=-1)
    return torch.einsum("...hts,...hsv->...htv", weights, values).to(query.dtype)


def naive_head_by_head(query, latent, w_uk, w_uv, scale=None):
    """A loop over the heads with lesson 03's attention."""
    T, S = query.shape[-2], latent.shape[-2]
    outs = []
    for h in range(query.shape[-3]):
        out, _ = attention.scaled_dot_product_attention(
            query[..., h, :, :], latent @ w_uk[h], latent @ w_uv[h],
            attn_mask=~future(T, S), scale=scale)
        outs.append(out)
    return torch.stack(outs, dim=-3)


# ---------------------------------------------------------------- absorbed

def absorbed_by_matrices(query, latent, w_uk, w_uv, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    c = latent.unsqueeze(-3)  # (B, 1, S, d_c)
    scores = query @ w_uk.transpose(-2, -1) @ c.transpose(-2, -1) * scale  # (B, H, T, S)
    weights = torch.softmax(scores.masked_fill(future(*scores.shape[-2:]), NEG_INF), dim=-1)
    return weights @ c @ w_uv


def absorbed_by_einsum_in_float64(query, latent, w_uk, w_uv, scale=None):
    q, c, wk, wv = (t.double() for t in (query, latent, w_uk, w_uv))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    q_latent = torch.einsum("...htd,hcd->...htc", q, wk)
    scores = torch.einsum("...htc,...sc->...hts", q_latent, c) * scale
    scores = scores.masked_fill(future(*scores.shape[-2:]), NEG_INF)
    mixed = torch.einsum("...hts,...sc->...htc", scores.softmax(-1), c)
    return torch.einsum("...htc,hcv->...htv", mixed, wv).to(query.dtype)


def absorbed_as_multi_query(query, latent, w_uk, w_uv, scale=None):
    """Lesson 03's attention with one key/value head, the latent, and the head width's scale."""
    D = query.shape[-1]
    q_latent = query @ w_uk.mT
    c = latent.unsqueeze(-3)
    T, S = query.shape[-2], latent.shape[-2]
    out, _ = attention.scaled_dot_product_attention(
        q_latent, c, c, attn_mask=~future(T, S), scale=D ** -0.5 if scale is None else scale)
    return out @ w_uv


def absorbed_head_by_head(query, latent, w_uk, w_uv, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    T, S = query.shape[-2], latent.shape[-2]
    outs = []
    for h in range(w_uk.shape[0]):
        q = query[..., h, :, :] @ w_uk[h].T  # (B, T, d_c)
        scores = (q @ latent.transpose(-2, -1) * scale).masked_fill(future(T, S), NEG_INF)
        outs.append(torch.softmax(scores, -1) @ latent @ w_uv[h])
    return torch.stack(outs, dim=-3)


# ---------------------------------------------------------------- the layer

class StubLatentAttention(nn.Module):
    """The notebook's class: the constructor given, forward to be written."""

    def __init__(self, d_model, n_heads, d_latent, d_rope, base=10000.0):
        super().__init__()
        H, C, D = n_heads, d_model, d_model // n_heads
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, D
        self.d_latent, self.d_rope, self.base = d_latent, d_rope, base
        self.w_q = nn.Parameter(torch.randn(H, C, D) / math.sqrt(C))
        self.w_qr = nn.Parameter(torch.randn(H, C, d_rope) / math.sqrt(C))
        self.w_dkv = nn.Parameter(torch.randn(C, d_latent) / math.sqrt(C))
        self.w_kr = nn.Parameter(torch.randn(C, d_rope) / math.sqrt(C))
        self.w_uk = nn.Parameter(torch.randn(H, d_latent, D) / math.sqrt(d_latent))
        self.w_uv = nn.Parameter(torch.randn(H, d_latent, D) / math.sqrt(d_latent))
        self.w_o = nn.Parameter(torch.randn(H, D, C) / math.sqrt(C))

    def forward(self, x, cache=None):
        raise NotImplementedError()


class LatentNaive(StubLatentAttention):
    """Every head's keys (content and rotary parts) and values up-projected at each call, as
    DeepSeek's "naive" code does; the cache holds the latent and the rotary key only."""

    def forward(self, x, cache=None):
        B, T, _ = x.shape
        P = 0 if cache is None else cache[0].shape[1]
        pos = torch.arange(P, P + T)
        c = x @ self.w_dkv
        k_rope = rotate_pairs(x @ self.w_kr, pos, base=self.base)
        if cache is not None:
            c = torch.cat([cache[0], c], 1)
            k_rope = torch.cat([cache[1], k_rope], 1)
        S = c.shape[1]
        keys = torch.cat([c[:, None] @ self.w_uk,
                          k_rope[:, None].expand(B, self.n_heads, S, self.d_rope)], -1)
        values = c[:, None] @ self.w_uv
        queries = torch.cat([x[:, None] @ self.w_q,
                             rotate_pairs(x[:, None] @ self.w_qr, pos, base=self.base)], -1)
        scores = queries @ keys.transpose(-2, -1) / math.sqrt(self.d_head + self.d_rope)
        weights = scores.masked_fill(future(T, S), NEG_INF).softmax(-1)
        out = torch.einsum("bhtd,hdc->btc", weights @ values, self.w_o)
        return out, (c, k_rope)


class LatentAbsorbedByEinsum(StubLatentAttention):
    """The absorbed matrices precomputed (w_q w_uk^T and w_uv w_o), float64 inside, the
    rotation by lesson 06's angles, a cache given as a list."""

    def forward(self, x, cache=None):
        P = 0 if cache is None else cache[0].shape[-2]
        T = x.shape[-2]
        x64 = x.double()
        angles = rotary_angles(torch.arange(P, P + T), self.d_rope, base=self.base,
                               dtype=torch.float64)
        q_absorbed = torch.einsum("hcd,hld->hcl", self.w_q.double(), self.w_uk.double())
        o_absorbed = torch.einsum("hld,hdc->hlc", self.w_uv.double(), self.w_o.double())
        c_new = x @ self.w_dkv
        r_new = apply_rotary(x @ self.w_kr, angles.to(x.dtype))
        c = c_new if cache is None else torch.cat([cache[0], c_new], -2)
        r = r_new if cache is None else torch.cat([cache[1], r_new], -2)
        q_c = torch.einsum("btc,hcl->bhtl", x64, q_absorbed)
        q_r = apply_rotary(torch.einsum("btc,hcr->bhtr", x64, self.w_qr.double()), angles)
        scores = (torch.einsum("bhtl,bsl->bhts", q_c, c.double())
                  + torch.einsum("bhtr,bsr->bhts", q_r, r.double()))
        scores = scores / (self.d_head + self.d_rope) ** 0.5
        weights = torch.softmax(scores.masked_fill(future(T, c.shape[-2]), NEG_INF), -1)
        mixed = torch.einsum("bhts,bsl->bhtl", weights, c.double())
        return torch.einsum("bhtl,hlc->btc", mixed, o_absorbed).to(x.dtype), [c, r]


class LatentHeadByHead(StubLatentAttention):
    """A loop over the heads, each one absorbed, with lesson 03's attention on the
    concatenated [content | rotary] query and key."""

    def forward(self, x, cache=None):
        P = 0 if cache is None else cache[0].shape[-2]
        pos = torch.arange(P, P + x.shape[-2])
        c = x @ self.w_dkv
        r = rotate_pairs(x @ self.w_kr, pos, base=self.base)
        if cache is not None:
            c, r = torch.cat([cache[0], c], -2), torch.cat([cache[1], r], -2)
        T, S = x.shape[-2], c.shape[-2]
        key = torch.cat([c, r], -1)  # (B, S, d_c + d_R)
        out = 0
        for h in range(self.n_heads):
            q = torch.cat([x @ self.w_q[h] @ self.w_uk[h].T,
                           rotate_pairs(x @ self.w_qr[h], pos, base=self.base)], -1)
            o, _ = attention.scaled_dot_product_attention(
                q, key, c, attn_mask=~future(T, S),
                scale=1 / math.sqrt(self.d_head + self.d_rope))
            out = out + o @ self.w_uv[h] @ self.w_o[h]
        return out, (c, r)


# ---------------------------------------------------------------- cache bytes

def bytes_by_table(kind, config):
    numbers = {"MHA": 2 * config["n_heads"] * config["d_head"],
               "GQA": 2 * config["n_kv_heads"] * config["d_head"],
               "MQA": 2 * config["d_head"],
               "MLA": config["d_latent"] + config["d_rope"]}
    return numbers[kind] * config["bytes_per_number"]


def bytes_by_branches(kind, config):
    if kind == "MLA":
        return (config["d_latent"] + config["d_rope"]) * config["bytes_per_number"]
    if kind == "MHA":
        heads = config["n_heads"]
    elif kind == "GQA":
        heads = config["n_kv_heads"]
    else:
        heads = 1
    key = value = heads * config["d_head"] * config["bytes_per_number"]
    return key + value


def bytes_by_meta_tensors(kind, config):
    """The cache of one token built on the meta device (shapes, no data), in the dtype of
    that many bytes, and its bytes read from the tensors."""
    dtype = {2: torch.bfloat16, 4: torch.float32, 8: torch.float64}[config["bytes_per_number"]]
    D = config["d_head"]
    shapes = {"MHA": [(config["n_heads"], D)] * 2, "GQA": [(config["n_kv_heads"], D)] * 2,
              "MQA": [(1, D)] * 2, "MLA": [(config["d_latent"],), (config["d_rope"],)]}[kind]
    return sum(torch.empty(shape, dtype=dtype, device="meta").nbytes for shape in shapes)


CORRECT = {
    "naive_latent_attention": [naive_by_matrices, naive_by_einsum_in_float64,
                               naive_head_by_head],
    "absorbed_latent_attention": [absorbed_by_matrices, absorbed_by_einsum_in_float64,
                                  absorbed_as_multi_query, absorbed_head_by_head],
    "latent_attention": [LatentNaive, LatentAbsorbedByEinsum, LatentHeadByHead],
    "cache_bytes_per_token": [bytes_by_table, bytes_by_branches, bytes_by_meta_tensors],
}
REFERENCES = {
    "naive_latent_attention": latent.naive_latent_attention,
    "absorbed_latent_attention": latent.absorbed_latent_attention,
    "latent_attention": latent.LatentAttention,
    "cache_bytes_per_token": latent.cache_bytes_per_token,
}
PRINTED_NAME = {"latent_attention": "LatentAttention"}
STUBS = {"latent_attention": StubLatentAttention}


class LatentCallingTheReference(StubLatentAttention):
    def forward(self, x, cache=None):
        return latent.LatentAttention.forward(self, x, cache)


CALLING_THE_REFERENCE = {"latent_attention": LatentCallingTheReference}


# ---------------------------------------------------------------- shortcuts

def naive_by_torch(query, latent, w_uk, w_uv, scale=None):
    T, S = query.shape[-2], latent.shape[-2]
    c = latent.unsqueeze(-3)
    return F.scaled_dot_product_attention(query, c @ w_uk, c @ w_uv, attn_mask=~future(T, S),
                                          scale=scale)


def absorbed_by_torch(query, latent, w_uk, w_uv, scale=None):
    T, S = query.shape[-2], latent.shape[-2]
    c = latent.unsqueeze(-3).expand(*query.shape[:-2], S, latent.shape[-1])
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    return F.scaled_dot_product_attention(query @ w_uk.mT, c, c, attn_mask=~future(T, S),
                                          scale=scale) @ w_uv


def absorbed_by_the_naive_reference(query, latent_, w_uk, w_uv, scale=None):
    return latent.naive_latent_attention(query, latent_, w_uk, w_uv, scale)


class LatentByTorch(StubLatentAttention):
    def forward(self, x, cache=None):
        P = 0 if cache is None else cache[0].shape[-2]
        pos = torch.arange(P, P + x.shape[-2])
        c = x @ self.w_dkv
        r = rotate_pairs(x @ self.w_kr, pos, base=self.base)
        if cache is not None:
            c, r = torch.cat([cache[0], c], -2), torch.cat([cache[1], r], -2)
        q = torch.cat([x[:, None] @ self.w_q @ self.w_uk.mT,
                       rotate_pairs(x[:, None] @ self.w_qr, pos, base=self.base)], -1)
        k = torch.cat([c, r], -1)[:, None].expand(-1, self.n_heads, -1, -1)
        v = c[:, None].expand(-1, self.n_heads, -1, -1)
        T, S = x.shape[-2], c.shape[-2]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=~future(T, S),
                                             scale=(self.d_head + self.d_rope) ** -0.5)
        return (out @ self.w_uv @ self.w_o).sum(1), (c, r)


def bytes_by_the_course(kind, config):
    return latent.cache_bytes_per_token(kind, config)


BUILT_INS = {
    "naive_latent_attention": {"F.scaled_dot_product_attention": naive_by_torch},
    "absorbed_latent_attention": {"F.scaled_dot_product_attention": absorbed_by_torch,
                                  "latent.naive_latent_attention":
                                      absorbed_by_the_naive_reference},
    "latent_attention": {"F.scaled_dot_product_attention": LatentByTorch},
    "cache_bytes_per_token": {"latent.cache_bytes_per_token": bytes_by_the_course},
}


# ---------------------------------------------------------------- catalogued mistakes

def naive_student(name, *, scale_from="head", swap=False, mask="bottom_right",
                  use_scale=True):
    """A student's naive form, called ``name``, with one of the slips the lesson names."""
    def naive_latent_attention(query, latent, w_uk, w_uv, scale=None):
        if swap:
            w_uk, w_uv = w_uv, w_uk
        keys, values = latent.unsqueeze(1) @ w_uk, latent.unsqueeze(1) @ w_uv
        if latent.ndim == 2:  # no batch axis
            keys, values = latent @ w_uk, latent @ w_uv
        width = {"head": query.shape[-1], "latent": latent.shape[-1], "none": 1}[scale_from]
        factor = scale if scale is not None and use_scale else 1 / math.sqrt(width)
        scores = query @ keys.transpose(-2, -1) * factor
        T, S = scores.shape[-2:]
        hidden = {"bottom_right": future(T, S),
                  "top_left": torch.ones(T, S, dtype=torch.bool).triu(1),
                  "diagonal": torch.ones(T, S, dtype=torch.bool).triu(S - T),
                  "none": torch.zeros(T, S, dtype=torch.bool)}[mask]
        return torch.softmax(scores.masked_fill(hidden, NEG_INF), -1) @ values
    naive_latent_attention.__name__ = name
    return naive_latent_attention


def absorbed_student(name, *, scale_from="head", swap=False, mask="bottom_right",
                     use_scale=True, up_project_values=True):
    """A student's absorbed form, called ``name``, with one of the slips the lesson names."""
    def absorbed_latent_attention(query, latent, w_uk, w_uv, scale=None):
        if swap:
            w_uk, w_uv = w_uv, w_uk
        q_latent = torch.einsum("...htd,hcd->...htc", query, w_uk)
        scores = torch.einsum("...htc,...sc->...hts", q_latent, latent)
        width = {"head": query.shape[-1], "latent": latent.shape[-1], "none": 1}[scale_from]
        scores = scores * (scale if scale is not None and use_scale else width ** -0.5)
        T, S = scores.shape[-2:]
        if mask != "none":
            first = {"top_left": 1, "diagonal": S - T}.get(mask, S - T + 1)
            scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(first), NEG_INF)
        mixed = torch.einsum("...hts,...sc->...htc", scores.softmax(-1), latent)
        return torch.einsum("...htc,hcv->...htv", mixed, w_uv) if up_project_values else mixed
    absorbed_latent_attention.__name__ = name
    return absorbed_latent_attention


def absorbed_by_the_course_attention_unscaled(query, latent, w_uk, w_uv, scale=None):
    """Lesson 03's attention on the absorbed query and the latent, its default scale left:
    1/sqrt(d_c), the latent's width."""
    c = latent.unsqueeze(-3)
    T, S = query.shape[-2], latent.shape[-2]
    out, _ = attention.scaled_dot_product_attention(query @ w_uk.mT, c, c,
                                                    attn_mask=~future(T, S), scale=scale)
    return out @ w_uv


def layer_student(name, *, scale="both", rotate_latent=False, rope=True, from_zero=False,
                  top_left=False, swap=False, project=True, cache_keys=False,
                  rope_per_head=False, shift=0, rope_cached_raw=False):
    """A student's LatentAttention class, called ``name``, with one of the slips the lesson
    names (absorbed, as the lesson's hints describe it)."""
    class Student(StubLatentAttention):
        def forward(self, x, cache=None):
            H, D, R = self.n_heads, self.d_head, self.d_rope
            P = 0 if cache is None else cache[-1].shape[-2]
            T = x.shape[-2]
            pos = torch.arange(T) if from_zero else torch.arange(P + shift, P + shift + T)
            w_k, w_v = (self.w_uv, self.w_uk) if swap else (self.w_uk, self.w_uv)
            c = x @ self.w_dkv
            if rotate_latent:
                c = rotate_pairs(c, pos, base=self.base)
            r = x @ self.w_kr if rope_cached_raw else rotate_pairs(x @ self.w_kr, pos,
                                                                   base=self.base)
            q = x[:, None] @ self.w_q
            q_r = rotate_pairs(x[:, None] @ self.w_qr, pos, base=self.base)
            if cache_keys:  # the naive cache: every head's keys and values
                k_new = torch.cat([c[:, None] @ w_k, r[:, None].expand(-1, H, -1, -1)], -1)
                v_new = c[:, None] @ w_v
                k = k_new if cache is None else torch.cat([cache[0], k_new], -2)
                v = v_new if cache is None else torch.cat([cache[1], v_new], -2)
                scores = torch.cat([q, q_r], -1) @ k.mT
                new_cache = (k, v)
            else:
                if rope_per_head:
                    r = r[:, None].expand(-1, H, -1, -1).contiguous()
                if cache is not None:
                    c, r = torch.cat([cache[0], c], -2), torch.cat([cache[1], r], -2)
                new_cache = (c, r)
                if rope_cached_raw:  # every key rotated at its position, at every call
                    r = rotate_pairs(r, base=self.base)
                scores = q @ w_k.mT @ c[:, None].mT
                if rope:
                    scores = scores + q_r @ (r if rope_per_head else r[:, None]).mT
                v = c[:, None] @ w_v
            width = {"both": D + R, "head": D, "latent": self.d_latent}[scale]
            S = scores.shape[-1]
            hidden = torch.ones(T, S, dtype=torch.bool).triu(1 if top_left else S - T + 1)
            out = scores.div(math.sqrt(width)).masked_fill(hidden, NEG_INF).softmax(-1) @ v
            out = (out @ self.w_o).sum(1) if project else out.transpose(1, 2).flatten(2)
            return out, new_cache
    Student.__name__ = Student.__qualname__ = name
    return Student


def bytes_student(name, *, kv=2, gqa_heads="n_kv_heads", mla="both", times_bytes=True):
    """A student's cache_bytes_per_token, called ``name``, with one of the slips."""
    def cache_bytes_per_token(kind, config):
        H, D = config["n_heads"], config["d_head"]
        if kind == "MLA":
            numbers = {"both": config["d_latent"] + config["d_rope"],
                       "twice": 2 * config["d_latent"] + config["d_rope"],
                       "per_head": config["d_latent"] + H * config["d_rope"],
                       "no_rope": config["d_latent"],
                       "up_projected": H * (D + config["d_rope"]) + H * D}[mla]
        else:
            heads = {"MHA": H, "GQA": config[gqa_heads], "MQA": 1 if gqa_heads != "n_heads"
                     else H}[kind]
            numbers = kv * heads * D
        return numbers * config["bytes_per_number"] if times_bytes else numbers
    cache_bytes_per_token.__name__ = name
    return cache_bytes_per_token


L10 = lesson10
MISTAKES = {  # student's answer: (exercise, the mistakes the check must name)
    naive_student("naive_latent_scale", scale_from="latent"):
        ("naive_latent_attention", [L10.SCALE_FROM_LATENT.name]),
    naive_student("naive_unscaled", scale_from="none"):
        ("naive_latent_attention", [L10.SCALE_MISSING.name]),
    naive_student("naive_swapped", swap=True):
        ("naive_latent_attention", [L10.UP_PROJECTIONS_SWAPPED.name]),
    naive_student("naive_top_left", mask="top_left"):
        ("naive_latent_attention", [L10.MASK_TOP_LEFT.name]),
    naive_student("naive_unmasked", mask="none"):
        ("naive_latent_attention", [L10.NO_MASK.name]),
    naive_student("naive_diagonal_hidden", mask="diagonal"):
        ("naive_latent_attention", [L10.DIAGONAL_HIDDEN.name]),
    naive_student("naive_ignoring_scale", use_scale=False):
        ("naive_latent_attention", [L10.IGNORES_SCALE.name]),
    absorbed_student("absorbed_latent_scale", scale_from="latent"):
        ("absorbed_latent_attention", [L10.SCALE_FROM_LATENT.name]),
    absorbed_by_the_course_attention_unscaled:
        ("absorbed_latent_attention", [L10.SCALE_FROM_LATENT.name]),
    absorbed_student("absorbed_unscaled", scale_from="none"):
        ("absorbed_latent_attention", [L10.SCALE_MISSING.name]),
    absorbed_student("absorbed_swapped", swap=True):
        ("absorbed_latent_attention", [L10.UP_PROJECTIONS_SWAPPED.name]),
    absorbed_student("absorbed_top_left", mask="top_left"):
        ("absorbed_latent_attention", [L10.MASK_TOP_LEFT.name]),
    absorbed_student("absorbed_unmasked", mask="none"):
        ("absorbed_latent_attention", [L10.NO_MASK.name]),
    absorbed_student("absorbed_diagonal_hidden", mask="diagonal"):
        ("absorbed_latent_attention", [L10.DIAGONAL_HIDDEN.name]),
    absorbed_student("absorbed_in_latent_space", up_project_values=False):
        ("absorbed_latent_attention", [L10.VALUES_NOT_UP_PROJECTED.name]),
    absorbed_student("absorbed_ignoring_scale", use_scale=False):
        ("absorbed_latent_attention", [L10.IGNORES_SCALE.name]),
    **{layer_student(f"Latent_{i}", **slips): ("latent_attention", [mistake.name])
       for i, (slips, mistake) in enumerate([
           ({"cache_keys": True}, L10.LAYER_MISTAKES[0]),
           ({"rope_per_head": True}, L10.LAYER_MISTAKES[1]),
           ({"scale": "head"}, L10.LAYER_MISTAKES[2]),
           ({"scale": "latent"}, L10.LAYER_MISTAKES[3]),
           ({"rotate_latent": True}, L10.LAYER_MISTAKES[4]),
           ({"rope": False}, L10.LAYER_MISTAKES[5]),
           ({"from_zero": True}, L10.LAYER_MISTAKES[6]),
           ({"top_left": True}, L10.LAYER_MISTAKES[7]),
           ({"swap": True}, L10.LAYER_MISTAKES[8]),
           ({"project": False}, L10.LAYER_MISTAKES[9]),
           ({"shift": 1}, L10.LAYER_MISTAKES[10]),  # positions counted from 1
           ({"shift": 7}, L10.LAYER_MISTAKES[10]),  # any constant: only the sign sees it
           ({"rope_cached_raw": True}, L10.LAYER_MISTAKES[11]),
       ])},
    **{bytes_student(f"bytes_{i}", **slips): ("cache_bytes_per_token", [mistake.name])
       for i, (slips, mistake) in enumerate([
           ({"kv": 1}, L10.BYTES_MISTAKES[0]),
           ({"gqa_heads": "n_heads"}, L10.BYTES_MISTAKES[1]),
           ({"mla": "twice"}, L10.BYTES_MISTAKES[2]),
           ({"mla": "per_head"}, L10.BYTES_MISTAKES[3]),
           ({"mla": "no_rope"}, L10.BYTES_MISTAKES[4]),
           ({"mla": "up_projected"}, L10.BYTES_MISTAKES[5]),
           ({"times_bytes": False}, L10.BYTES_MISTAKES[6]),
       ])},
}


# ---------------------------------------------------------------- slips that raise

def absorbed_by_up_projecting(query, latent, w_uk, w_uv, scale=None):
    """Right numbers, but the naive form: every head's keys and values built."""
    return naive_by_matrices(query, latent, w_uk, w_uv, scale)


def absorbed_without_the_transpose(query, latent, w_uk, w_uv, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    c = latent.unsqueeze(-3)
    scores = (query @ w_uk) @ c.transpose(-2, -1) * scale
    weights = scores.masked_fill(future(*scores.shape[-2:]), NEG_INF).softmax(-1)
    return weights @ c @ w_uv


def absorbed_token_by_token(query, latent, w_uk, w_uv, scale=None):
    """The naive form one token at a time: no tensor holds the keys of all S tokens, but
    every token's keys and values are built."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    T, S = query.shape[-2], latent.shape[-2]
    scores, values = [], []
    for s in range(S):
        c = latent[..., s:s + 1, :].unsqueeze(-3)  # (B, 1, 1, d_c)
        scores.append(query @ (c @ w_uk).transpose(-2, -1))
        values.append(c @ w_uv)
    weights = (torch.cat(scores, -1) * scale).masked_fill(future(T, S), NEG_INF).softmax(-1)
    return sum(weights[..., s:s + 1] * values[s] for s in range(S))


def absorbed_in_two_chunks(query, latent, w_uk, w_uv, scale=None):
    """The naive form over two chunks of the tokens, by einsum in float64."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    S = latent.shape[-2]
    parts = (latent[..., :S // 2, :].double(), latent[..., S // 2:, :].double())
    keys = torch.cat([torch.einsum("...sc,hcd->...hsd", p, w_uk.double()) for p in parts], -2)
    values = torch.cat([torch.einsum("...sc,hcv->...hsv", p, w_uv.double()) for p in parts], -2)
    scores = query.double() @ keys.transpose(-2, -1) * scale
    weights = scores.masked_fill(future(*scores.shape[-2:]), NEG_INF).softmax(-1)
    return (weights @ values).to(query.dtype)


class LatentWithoutCache(LatentNaive):
    def forward(self, x, cache=None):
        return super().forward(x, cache)[0]


class LatentRememberingOnItsCache(LatentNaive):
    """Never reads its cache: keeps every token so far as an attribute of the latent it
    returns and attends over them all again, uncached (right outputs and a right cache)."""

    def forward(self, x, cache=None):
        seen = x if cache is None else torch.cat([cache[0].tokens, x], dim=-2)
        out, (latent, rope_key) = super().forward(seen, None)
        latent.tokens = seen
        return out[..., -x.shape[-2]:, :], (latent, rope_key)


SLIPS = [  # (exercise, slip, the mistake explain_error names from the error the slip raises)
    ("absorbed_latent_attention", absorbed_by_up_projecting,
     "per-head keys or values built (the naive form)"),
    ("absorbed_latent_attention", absorbed_token_by_token,
     "per-head keys or values built (the naive form)"),
    ("absorbed_latent_attention", absorbed_in_two_chunks,
     "per-head keys or values built (the naive form)"),
    ("absorbed_latent_attention", absorbed_without_the_transpose,
     "the absorbed matrices multiplied in the wrong order (or w_uk not transposed)"),
    ("latent_attention", LatentWithoutCache, "forward returns no cache"),
]
