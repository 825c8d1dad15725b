"""Lesson 07's inference (attention_course.inference): cached decoding writes the tokens of
uncached decoding, a prompt cached in chunks gives the logits of one pass, the cache shrinks
with fewer key/value heads, and grouped-query attention is PyTorch's enable_gqa."""

import pytest
import torch
import torch.nn.functional as F

from attention_course import inference
from attention_course.rope import RotaryMultiHeadAttention
from helpers.inputs import qkv

# ---------------------------------------------------------------- the key/value cache

@pytest.mark.parametrize(("P", "T"), [(0, 6), (5, 1), (3, 3), (1, 5)])
def test_cached_attention_gives_the_last_rows_of_causal_attention(P, T):
    q, k, v = qkv(2, 3, P + T, 4, Dv=5)
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (2, 3, P + T, 5)
    cache = (k[..., :P, :], v[..., :P, :]) if P else (None, None)
    out, keys, values = inference.cached_attention(q[..., P:, :], k[..., P:, :], v[..., P:, :],
                                                   *cache)
    assert torch.allclose(out, full[..., P:, :])
    assert torch.equal(keys, k) and torch.equal(values, v)


def full_attention(query, key, value, past_key=None, past_value=None):
    """No cache: causal attention over the tokens given, with G <= H key/value heads."""
    group = query.shape[1] // key.shape[1]
    out = F.scaled_dot_product_attention(query, key.repeat_interleave(group, 1),
                                         value.repeat_interleave(group, 1), is_causal=True)
    return out, key, value


def grouped(attend):
    """As in the lesson: a group axis for the query heads, one key/value head per group."""
    def attend_in_groups(query, key, value, past_key=None, past_value=None):
        G = key.shape[1]
        out, keys, values = attend(query.unflatten(1, (G, -1)), key.unsqueeze(2),
                                   value.unsqueeze(2), past_key, past_value)
        return out.flatten(1, 2), keys, values
    return attend_in_groups


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_cached_decoding_writes_the_tokens_of_uncached_decoding(n_kv_heads):
    torch.manual_seed(0)
    model = inference.TinyDecoder(n_heads=4, n_kv_heads=n_kv_heads).eval()
    prompt = torch.randint(0, 64, (3, 5))
    attend = inference.cached_attention if n_kv_heads == 4 else grouped(
        inference.cached_attention)
    uncached, logits_uncached = inference.generate(model, prompt, 20, full_attention,
                                                   use_cache=False)
    cached, logits_cached = inference.generate(model, prompt, 20, attend)
    assert torch.equal(uncached, cached)
    assert torch.allclose(logits_uncached, logits_cached, atol=1e-5)
    assert len(set(cached[0].tolist())) > 3  # a sequence worth comparing, not one token


def test_a_prompt_cached_in_chunks_gives_the_logits_of_one_pass():
    torch.manual_seed(0)
    model = inference.TinyDecoder().eval()
    tokens = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        whole, _ = model(tokens, full_attention)
        first, caches = model(tokens[:, :5], inference.cached_attention)
        second, caches = model(tokens[:, 5:], inference.cached_attention, caches, start=5)
    assert torch.allclose(torch.cat([first, second], dim=1), whole, atol=1e-5)
    assert caches[0][0].shape == (2, 4, 12, 16)


@pytest.mark.parametrize("G", [8, 2, 1])
def test_the_cache_shrinks_by_h_over_g(G):
    torch.manual_seed(0)
    model = inference.TinyDecoder(d_model=64, n_heads=8, n_kv_heads=G, n_layers=3).eval()
    with torch.no_grad():
        _, caches = model(torch.randint(0, 64, (2, 10)), grouped(inference.cached_attention))
    assert inference.cache_bytes(caches) == 2 * 3 * 2 * 10 * G * 8 * 4  # 2 L B S G D, float32


def test_the_decoder_says_what_does_not_fit():
    with pytest.raises(ValueError, match="n_kv_heads"):
        inference.TinyDecoder(n_heads=4, n_kv_heads=3)
    with pytest.raises(ValueError, match="max_len"):
        inference.TinyDecoder(max_len=8)(torch.zeros(1, 9, dtype=torch.long), full_attention)


# ---------------------------------------------------------------- grouped-query attention

@pytest.mark.parametrize(("H", "G"), [(8, 2), (6, 3), (4, 1), (3, 3)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_grouped_query_attention_is_pytorchs_enable_gqa(H, G, is_causal):
    q, _, _ = qkv(2, H, 6, 4)
    _, k, v = qkv(2, G, 6, 4, Dv=3, seed=1)
    out, weights = inference.grouped_query_attention(q, k, v, is_causal=is_causal)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
    assert torch.allclose(out, expected)
    assert weights.shape == (2, H, 6, 6) and torch.allclose(weights.sum(-1), torch.ones(1).double())


def test_grouped_query_attention_refuses_groups_that_do_not_divide():
    q, _, _ = qkv(2, 6, 5, 4)
    _, k, v = qkv(2, 4, 5, 4)
    with pytest.raises(ValueError, match="G must divide H"):
        inference.grouped_query_attention(q, k, v)


# ---------------------------------------------------------------- edges

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_grouped_query_attention_with_no_keys_gives_zeros_as_in_pytorch(dtype):
    q, _, _ = qkv(2, 6, 5, 4, dtype=dtype)
    _, k, v = qkv(2, 2, 0, 4, Dv=3, dtype=dtype)
    out, weights = inference.grouped_query_attention(q, k, v)
    expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert out.dtype == dtype and torch.equal(out, expected) and (out == 0).all()
    assert weights.shape == (2, 6, 5, 0)


@pytest.mark.parametrize("P", [0, 4])
def test_cached_attention_of_no_new_tokens_is_empty_and_keeps_the_cache(P):
    q, k, v = qkv(2, 3, P, 4, Dv=5)
    cache = (k, v) if P else (None, None)
    out, keys, values = inference.cached_attention(q[..., :0, :], k[..., :0, :], v[..., :0, :],
                                                   *cache)
    assert out.shape == (2, 3, 0, 5)
    assert torch.equal(keys, k) and torch.equal(values, v)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16_bit_cached_attention_stays_16_bit(dtype):
    q, k, v = qkv(2, 3, 6, 4, Dv=5, dtype=dtype)
    out, keys, values = inference.cached_attention(q[..., 4:, :], k[..., 4:, :], v[..., 4:, :],
                                                   k[..., :4, :], v[..., :4, :])
    assert out.dtype == keys.dtype == values.dtype == dtype


# ---------------------------------------------------------------- rotary positions in the cache

def _rotary_layer(d_model=16, n_heads=2, seed=0):
    torch.manual_seed(seed)
    return inference.CachedRotaryAttention(d_model, n_heads).double().eval()


@pytest.mark.parametrize("prefill", [0, 1, 4])
def test_rotary_decoding_with_a_cache_equals_one_causal_pass(prefill):
    layer = _rotary_layer()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    whole, _ = RotaryMultiHeadAttention.forward(layer, x, x, x, is_causal=True)  # uncached
    outs, keys, values = [], None, None
    chunks = ([x[:, :prefill]] if prefill else []) + list(x[:, prefill:].split(1, dim=1))
    for chunk in chunks:
        out, keys, values = layer(chunk, keys, values)
        outs.append(out)
    assert torch.allclose(torch.cat(outs, dim=1), whole, atol=1e-12)
    assert keys.shape == values.shape == (2, 2, 9, 8)


def test_the_rotary_cache_holds_keys_rotated_once_at_their_positions_and_plain_values():
    from attention_course.multihead import split_heads
    from attention_course.rope import apply_rotary, rotary_angles
    layer = _rotary_layer()
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    _, keys, values = layer(x[:, :4])
    _, keys, values = layer(x[:, 4:], keys, values)
    raw_keys = split_heads(layer.k_proj(x), 2)
    rotated = apply_rotary(raw_keys, rotary_angles(6, 8, dtype=torch.float64))
    assert torch.allclose(keys, rotated) and torch.allclose(values, split_heads(layer.v_proj(x), 2))


def test_unrotated_keys_cached_and_rotated_at_use_decode_the_same_but_break_the_contract():
    """Caching raw keys and rotating the whole cache at its own positions at every step gives
    the same outputs (the course's contract still asks for rotated keys: rotating once is what
    saves the work, and a cache handed over holds rotated keys)."""
    from attention_course.multihead import merge_heads, split_heads
    from attention_course.rope import apply_rotary, rotary_angles
    layer = _rotary_layer()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    expected, _, _ = layer(x)
    outs, raw_k, raw_v = [], None, None
    for t in range(7):
        k = split_heads(layer.k_proj(x[:, t:t + 1]), 2)
        v = split_heads(layer.v_proj(x[:, t:t + 1]), 2)
        raw_k = k if raw_k is None else torch.cat([raw_k, k], -2)
        raw_v = v if raw_v is None else torch.cat([raw_v, v], -2)
        angles = rotary_angles(t + 1, 8, dtype=torch.float64)
        q = apply_rotary(split_heads(layer.q_proj(x[:, t:t + 1]), 2), angles[t:])
        out, _ = inference.scaled_dot_product_attention(q, apply_rotary(raw_k, angles), raw_v)
        outs.append(layer.out_proj(merge_heads(out)))
    assert torch.allclose(torch.cat(outs, 1), expected, atol=1e-12)


# ---------------------------------------------------------------- the grouped-query layer

@pytest.mark.parametrize(("H", "G"), [(6, 2), (6, 6), (6, 1)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_the_grouped_query_layer_is_pytorchs_enable_gqa_between_its_projections(H, G, is_causal):
    torch.manual_seed(0)
    layer = inference.GroupedQueryAttention(24, H, G).double()
    assert layer.k_proj.weight.shape == layer.v_proj.weight.shape == (G * 4, 24)
    x = torch.randn(2, 5, 24, dtype=torch.float64)
    memory = x if is_causal else torch.randn(2, 7, 24, dtype=torch.float64)
    out, weights = layer(x, memory, memory, is_causal=is_causal)
    q = layer.q_proj(x).unflatten(-1, (H, 4)).transpose(1, 2)
    k = layer.k_proj(memory).unflatten(-1, (G, 4)).transpose(1, 2)
    v = layer.v_proj(memory).unflatten(-1, (G, 4)).transpose(1, 2)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
    assert torch.allclose(out, layer.out_proj(expected.transpose(1, 2).flatten(-2)))
    assert weights.shape == (2, H, 5, memory.shape[1])


def test_the_grouped_query_layer_with_g_equal_h_is_multi_head_attention():
    from attention_course.multihead import MultiHeadAttention
    torch.manual_seed(0)
    layer = inference.GroupedQueryAttention(12, 3, 3, bias=False)
    mha = MultiHeadAttention(12, 3, bias=False)
    mha.load_state_dict(layer.state_dict())
    x = torch.randn(2, 5, 12)
    assert torch.allclose(layer(x, x, x, is_causal=True)[0], mha(x, x, x, is_causal=True)[0],
                          atol=1e-6)
    with pytest.raises(ValueError, match="n_kv_heads"):
        inference.GroupedQueryAttention(12, 3, 2)
