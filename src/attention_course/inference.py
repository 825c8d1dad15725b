"""Attention at inference time: a key/value cache for decoding, and grouped-query attention.

Lesson: 07_inference_and_scale

A decoder writes one token at a time. Without a cache every step runs the whole sequence again;
with one, every layer keeps the keys and values of the tokens so far, and a step computes those
of the newest token only and appends them. Grouped-query attention lets several query heads
share one key/value head, so the cache holds G heads instead of H. With rotary positions
(lesson 06) the keys are rotated once, at their own positions, before they enter the cache.
"""

import torch
from torch import Tensor, nn

from .attention import compute_dtype, scaled_dot_product_attention
from .multihead import merge_heads, split_heads
from .rope import RotaryMultiHeadAttention, apply_rotary, rotary_angles


def cached_attention(query: Tensor, key: Tensor, value: Tensor, past_key: Tensor | None = None,
                     past_value: Tensor | None = None):
    """Causal attention of T new tokens that follow the P tokens held in a key/value cache.

    Args:
        query: (B, H, T, D) queries of the new tokens (any leading dims that broadcast).
        key: (B, H, T, D) keys of the new tokens.
        value: (B, H, T, Dv) values of the new tokens.
        past_key: (B, H, P, D) keys of the P earlier tokens, or None for an empty cache.
        past_value: (B, H, P, Dv) values of the earlier tokens, or None.
    Returns:
        out: (B, H, T, Dv). New token t sits at position P + t: it attends to positions
            0 .. P + t, the whole cache and the new tokens up to itself (the causal mask is
            aligned at the bottom-right corner of the (T, S) scores, S = P + T).
        keys: (B, H, S, D) the cache after appending: the earlier keys, then the new ones.
        values: (B, H, S, Dv) the same for the values.
    Lesson: 07_inference_and_scale
    """
    if past_key is not None:
        key = torch.cat([past_key, key], dim=-2)  # (B,H,P,D) + (B,H,T,D) -> (B,H,S,D)
        value = torch.cat([past_value, value], dim=-2)  # (B,H,P,Dv) + (B,H,T,Dv) -> (B,H,S,Dv)
    T, S = query.shape[-2], key.shape[-2]
    # query t is token P + t = S - T + t: it may see keys s <= S - T + t (bottom-right)
    allowed = torch.ones(T, S, dtype=torch.bool, device=query.device).tril(diagonal=S - T)
    out, _ = scaled_dot_product_attention(query, key, value, attn_mask=allowed)
    return out, key, value


def grouped_query_attention(query: Tensor, key: Tensor, value: Tensor, is_causal: bool = False,
                            scale: float | None = None):
    """Attention of H query heads that share G key/value heads (G divides H).

    Query head h reads key/value head h // (H / G): heads 0 .. H/G - 1 share the first one, and
    so on, as in ``F.scaled_dot_product_attention(..., enable_gqa=True)``. G = 1 is multi-query
    attention, G = H plain multi-head attention.

    Args:
        query: (B, H, T, D) queries (any leading dims before the head axis).
        key: (B, G, S, D) keys.
        value: (B, G, S, Dv) values.
        is_causal: query t sees keys s <= t only (T = S).
        scale: factor for the scores; None means 1/sqrt(D).
    Returns:
        out: (B, H, T, Dv) weighted sums of the values.
        weights: (B, H, T, S) attention weights of every query head.
    Lesson: 07_inference_and_scale
    """
    H, G = query.shape[-3], key.shape[-3]
    if H % G != 0:
        raise ValueError(f"{H} query heads cannot share {G} key/value heads: G must divide H")
    key = key.repeat_interleave(H // G, dim=-3)  # (B, G, S, D) -> (B, H, S, D)
    value = value.repeat_interleave(H // G, dim=-3)  # (B, G, S, Dv) -> (B, H, S, Dv)
    return scaled_dot_product_attention(query, key, value, is_causal=is_causal, scale=scale)


class CachedRotaryAttention(RotaryMultiHeadAttention):
    """Lesson 06's rotary self-attention layer, run as a decoder runs it: T new tokens at a
    time after the P tokens of a key/value cache (in eval mode: no dropout).

    The cache holds the keys already rotated, each at its own position, and the values (never
    rotated). Decoding token by token with it gives the outputs of one causal pass of
    ``RotaryMultiHeadAttention`` over the whole sequence.
    Lesson: 07_inference_and_scale
    """

    def forward(self, x: Tensor, past_key: Tensor | None = None,
                past_value: Tensor | None = None):
        """Attend from T new tokens to the cache and to the new tokens up to each one.

        Args:
            x: (B, T, C) the new tokens, at positions P .. P+T-1.
            past_key: (B, H, P, D) the cached keys, rotated at positions 0 .. P-1, or None for
                an empty cache (P = 0).
            past_value: (B, H, P, D) the cached values, or None.
        Returns:
            out: (B, T, C) the new tokens' outputs, after the output projection.
            keys: (B, H, P + T, D) the cache after appending the new keys, rotated at their
                positions P .. P+T-1.
            values: (B, H, P + T, D) the cache after appending the new values.
        """
        P = 0 if past_key is None else past_key.shape[-2]
        q = split_heads(self.q_proj(x), self.n_heads)  # (B, T, C) -> (B, H, T, D)
        k = split_heads(self.k_proj(x), self.n_heads)
        v = split_heads(self.v_proj(x), self.n_heads)
        positions = torch.arange(P, P + x.shape[-2], device=x.device)  # (T,): after the cache
        angles = rotary_angles(positions, self.d_head, base=self.base,
                               dtype=compute_dtype(q.dtype))  # (T, D/2)
        q, k = apply_rotary(q, angles), apply_rotary(k, angles)  # rotated once, here
        out, keys, values = cached_attention(q, k, v, past_key, past_value)  # (B, H, T, D)
        return self.out_proj(merge_heads(out)), keys, values  # (B, T, C)


class GroupedQueryAttention(nn.Module):
    """Grouped-query attention as a layer: H query heads and G key/value heads of the same
    width D = C / H, each key/value head shared by H / G consecutive query heads.

    Attributes: d_model, n_heads, n_kv_heads, d_head; q_proj (C -> C), k_proj and v_proj
    (C -> G * D), out_proj (C -> C), four nn.Linear layers with a bias exactly when ``bias``.
    Lesson: 07_inference_and_scale
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, bias: bool = True):
        super().__init__()
        if d_model % n_heads or n_heads % n_kv_heads:
            raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}, and "
                             f"n_kv_heads={n_kv_heads} must divide n_heads")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)  # H query heads
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)  # G key heads
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)  # G value heads
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, is_causal: bool = False):
        """Attend from (B, T, C) queries to (B, S, C) keys and values.

        Returns:
            out: (B, T, C) attended values after the output projection.
            weights: (B, H, T, S) attention weights of every query head.
        """
        q = split_heads(self.q_proj(query), self.n_heads)  # (B, T, C) -> (B, H, T, D)
        k = split_heads(self.k_proj(key), self.n_kv_heads)  # (B, S, G*D) -> (B, G, S, D)
        v = split_heads(self.v_proj(value), self.n_kv_heads)  # (B, S, G*D) -> (B, G, S, D)
        out, weights = grouped_query_attention(q, k, v, is_causal=is_causal)  # (B, H, T, D)
        return self.out_proj(merge_heads(out)), weights  # (B, T, C)


# ---------------------------------------------------------------- a small decoder to run

class TinyDecoder(nn.Module):
    """An attention-only decoder: token and position embeddings, ``n_layers`` pre-norm layers
    of causal self-attention with residual connections, and a projection to the vocabulary.

    It is small and untrained: it exists to be run token by token, with and without a cache.
    Its attention is a function passed to ``forward``, so the same weights run with any
    implementation: ``attend(query, key, value, past_key, past_value) -> (out, keys, values)``
    with (B, H, T, D) queries and (B, G, T, D) keys and values (G = ``n_kv_heads``).
    Lesson: 07_inference_and_scale
    """

    def __init__(self, vocab_size: int = 64, d_model: int = 64, n_heads: int = 4,
                 n_kv_heads: int | None = None, n_layers: int = 2, max_len: int = 1024):
        super().__init__()
        n_kv_heads = n_kv_heads or n_heads
        if d_model % n_heads or n_heads % n_kv_heads:
            raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}, and "
                             f"n_kv_heads={n_kv_heads} must divide n_heads")
        self.n_heads, self.n_kv_heads, self.d_head = n_heads, n_kv_heads, d_model // n_heads
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList(_Layer(d_model, n_heads, n_kv_heads) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.unembed = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, tokens: Tensor, attend, caches: list | None = None, start: int = 0):
        """Logits for ``tokens`` (B, T) at positions start .. start + T - 1.

        ``caches`` holds one (keys, values) pair per layer for the ``start`` tokens before
        (None: nothing cached). Returns the (B, T, V) logits and the new caches.
        """
        T = tokens.shape[-1]
        if start + T > self.max_len:
            raise ValueError(f"positions up to {start + T - 1}, but max_len={self.max_len}")
        positions = torch.arange(start, start + T, device=tokens.device)  # (T,)
        x = self.embed(tokens) + self.position(positions)  # (B, T, C)
        caches = caches or [(None, None)] * len(self.layers)
        new_caches = []
        for layer, (past_key, past_value) in zip(self.layers, caches, strict=True):
            out, keys, values = layer(x, attend, past_key, past_value)
            x = x + out
            new_caches.append((keys, values))
        return self.unembed(self.norm(x)), new_caches


class _Layer(nn.Module):
    """One pre-norm attention layer of ``TinyDecoder``: H query heads, G key/value heads."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int):
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        d_kv = d_model // n_heads * n_kv_heads  # G heads of width D
        self.norm = nn.LayerNorm(d_model)
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_kv, bias=False)
        self.v_proj = nn.Linear(d_model, d_kv, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: Tensor, attend, past_key: Tensor | None, past_value: Tensor | None):
        h = self.norm(x)  # (B, T, C)
        q = self.q_proj(h).unflatten(-1, (self.n_heads, -1)).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(h).unflatten(-1, (self.n_kv_heads, -1)).transpose(1, 2)  # (B, G, T, D)
        v = self.v_proj(h).unflatten(-1, (self.n_kv_heads, -1)).transpose(1, 2)  # (B, G, T, D)
        out, keys, values = attend(q, k, v, past_key, past_value)  # (B, H, T, D)
        return self.out_proj(out.transpose(1, 2).flatten(-2)), keys, values  # (B, T, C)


@torch.no_grad()
def generate(model: TinyDecoder, prompt: Tensor, n_new: int, attend, use_cache: bool = True):
    """Greedy decoding: append the most likely next token ``n_new`` times.

    With ``use_cache`` the prompt runs once, and then each step runs the newest token alone, at
    its position, with the caches of the steps before. Without, each step runs the whole
    sequence again from an empty cache.
    Returns:
        tokens: (B, n_new) the generated tokens.
        logits: (B, n_new, V) the logits each of them was chosen from.
    Lesson: 07_inference_and_scale
    """
    logits, caches = model(prompt, attend)  # the prompt's positions 0 .. P-1
    tokens, chosen_from = prompt, []
    for step in range(n_new):
        chosen_from.append(logits[:, -1])  # (B, V)
        next_token = logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, next_token], dim=1)
        if step == n_new - 1:
            break
        if use_cache:
            logits, caches = model(next_token, attend, caches, start=tokens.shape[1] - 1)
        else:
            logits, _ = model(tokens, attend)
    return tokens[:, prompt.shape[1]:], torch.stack(chosen_from, dim=1)


def cache_bytes(caches: list) -> int:
    """Bytes held by a decoder's caches: every layer's keys and values.

    Lesson: 07_inference_and_scale
    """
    return sum(t.nbytes for pair in caches for t in pair if t is not None)
