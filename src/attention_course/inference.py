"""Attention at inference time: a key/value cache for decoding, and grouped-query attention.

Lesson: 07_inference_and_scale

A decoder writes one token at a time. Without a cache every step runs the whole sequence again;
with one, every layer keeps the keys and values of the tokens so far, and a step computes those
of the newest token only and appends them. Grouped-query attention lets several query heads
share one key/value head, so the cache holds G heads instead of H.
"""

import torch
from torch import Tensor, nn

from .attention import scaled_dot_product_attention


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
