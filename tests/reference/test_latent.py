"""Lesson 10's reference: multi-head latent attention, naive and absorbed, its layer with the
decoupled rotary key decoding with its cache, and the cache bytes of MHA, GQA, MQA and MLA."""

import pytest
import torch

from attention_course import inference, latent, lengths
from attention_course.attention import scaled_dot_product_attention
from attention_course.rope import RotaryMultiHeadAttention, rotate_pairs


def inputs(*batch, T, S, H=3, D=4, Dv=5, d_c=6, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*batch, H, T, D, generator=g, dtype=dtype),
            torch.randn(*batch, S, d_c, generator=g, dtype=dtype),
            torch.randn(H, d_c, D, generator=g, dtype=dtype),
            torch.randn(H, d_c, Dv, generator=g, dtype=dtype))


@pytest.mark.parametrize(("batch", "T", "S"), [((2,), 3, 8), ((2,), 1, 9), ((2,), 5, 5),
                                               ((), 2, 7), ((2, 2), 4, 6)])
def test_naive_and_absorbed_forms_are_equal_in_float64(batch, T, S):
    args = inputs(*batch, T=T, S=S)
    naive = latent.naive_latent_attention(*args)
    absorbed = latent.absorbed_latent_attention(*args)
    assert naive.shape == (*batch, 3, T, 5)
    torch.testing.assert_close(absorbed, naive, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(latent.absorbed_latent_attention(*args, scale=0.3),
                               latent.naive_latent_attention(*args, scale=0.3),
                               rtol=1e-12, atol=1e-12)


def test_naive_form_is_attention_over_the_up_projected_keys_and_values():
    query, c, w_uk, w_uv = inputs(2, T=3, S=8)
    keys = torch.stack([c @ w_uk[h] for h in range(3)], dim=1)  # (B, H, S, D)
    values = torch.stack([c @ w_uv[h] for h in range(3)], dim=1)
    allowed = torch.ones(3, 8, dtype=torch.bool).tril(5)  # the last 3 of 8 positions
    expected, _ = scaled_dot_product_attention(query, keys, values, attn_mask=allowed)
    torch.testing.assert_close(latent.naive_latent_attention(query, c, w_uk, w_uv), expected)


def layer(dtype=torch.float64, seed=0, **sizes):
    torch.manual_seed(seed)
    config = {"d_model": 16, "n_heads": 2, "d_latent": 6, "d_rope": 4} | sizes
    return latent.LatentAttention(**config).to(dtype).eval()


def decode(module, x, chunks):
    outputs, cache, start = [], None, 0
    for size in chunks:
        out, cache = module(x[:, start:start + size], cache)
        outputs.append(out)
        start += size
    return torch.cat(outputs, dim=1), cache


@pytest.mark.parametrize("chunks", [(1,) * 9, (3, 1, 1, 1, 1, 1, 1), (2, 3, 4)])
def test_decoding_with_the_latent_cache_equals_uncached_decoding(chunks):
    module = layer()
    x = torch.randn(3, 9, 16, dtype=torch.float64)
    with torch.no_grad():
        uncached, _ = module(x)
        decoded, (c, rope_key) = decode(module, x, chunks)
    torch.testing.assert_close(decoded, uncached, rtol=1e-12, atol=1e-12)
    assert c.shape == (3, 9, 6) and rope_key.shape == (3, 9, 4)  # d_c + d_R per token


def test_the_layer_is_deepseek_v2s_formula_with_per_head_keys():
    """Scores (q_C . k_C + q_R . k_R) / sqrt(D + d_R), keys k_C = c W_UK[h], a rotary key
    shared by the heads, values c W_UV[h], outputs through W_O: written the naive way."""
    module = layer()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    positions = torch.arange(7)
    c = x @ module.w_dkv
    k_content = c[:, None] @ module.w_uk  # (B, H, S, D)
    k_rope = rotate_pairs(x @ module.w_kr, positions)[:, None].expand(2, 2, 7, 4)
    q_content = x[:, None] @ module.w_q
    q_rope = rotate_pairs(x[:, None] @ module.w_qr, positions)
    scores = (torch.cat([q_content, q_rope], -1) @ torch.cat([k_content, k_rope], -1).mT
              / (8 + 4) ** 0.5)
    scores = scores.masked_fill(torch.ones(7, 7, dtype=torch.bool).triu(1), float("-inf"))
    expected = (scores.softmax(-1) @ (c[:, None] @ module.w_uv) @ module.w_o).sum(1)
    with torch.no_grad():
        torch.testing.assert_close(module(x)[0], expected, rtol=1e-12, atol=1e-12)


def test_rotating_the_latent_keys_breaks_the_absorbed_form():
    """With the rotation on the up-projected keys (as plain rotary attention does), the score
    of query t and key s is q R_t . R_s c W_UK: it equals the absorbed (q W_UK^T) . c only
    where t = s, and the matrix between q and c depends on the offset."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(6, 4, generator=g, dtype=torch.float64)  # one head, T = S = 6, D = 4
    c = torch.randn(6, 8, generator=g, dtype=torch.float64)
    w_uk = torch.randn(8, 4, generator=g, dtype=torch.float64)
    rotated = rotate_pairs(q) @ rotate_pairs(c @ w_uk).T  # (T, S)
    absorbed = (q @ w_uk.T) @ c.T
    diagonal = torch.eye(6, dtype=torch.bool)
    torch.testing.assert_close(rotated[diagonal], absorbed[diagonal])
    assert ((rotated - absorbed)[~diagonal].abs() > 1e-6).all()


def test_cache_bytes_per_token_of_the_four_kinds():
    lite = {"n_heads": 16, "d_head": 128, "n_kv_heads": 4, "d_latent": 512, "d_rope": 64,
            "bytes_per_number": 2}
    assert [latent.cache_bytes_per_token(kind, lite) for kind in latent.KINDS] == [
        2 * 16 * 128 * 2, 2 * 4 * 128 * 2, 2 * 128 * 2, 576 * 2]
    with pytest.raises(ValueError, match="kind must be one of"):
        latent.cache_bytes_per_token("MLQ", lite)


@pytest.mark.parametrize(("kind", "n_kv_heads"), [("MHA", 4), ("GQA", 2), ("MQA", 1)])
def test_cache_bytes_per_token_match_the_bytes_of_lesson_07s_caches(kind, n_kv_heads):
    config = {"n_heads": 4, "d_head": 16, "n_kv_heads": n_kv_heads, "bytes_per_number": 4}
    model = inference.TinyDecoder(d_model=64, n_heads=4, n_kv_heads=n_kv_heads, n_layers=2)
    tokens = torch.randint(64, (3, 11))

    def attend(q, k, v, past_key, past_value):  # the prompt alone: nothing cached before
        groups = q.shape[1] // k.shape[1]  # query heads per key/value head
        out, _ = scaled_dot_product_attention(q, k.repeat_interleave(groups, 1),
                                              v.repeat_interleave(groups, 1), is_causal=True)
        return out, k, v  # the cache holds the G key/value heads

    with torch.no_grad():
        _, caches = model(tokens, attend)
    measured = inference.cache_bytes(caches) / (3 * 11 * 2)  # per token, sequence and layer
    assert measured == latent.cache_bytes_per_token(kind, config)


def test_cache_bytes_per_token_match_the_bytes_of_the_latent_cache():
    module = layer(torch.float32, d_latent=12, d_rope=6)
    with torch.no_grad():
        _, cache = module(torch.randn(2, 5, 16))
    config = {"n_heads": 2, "d_head": 8, "d_latent": 12, "d_rope": 6, "bytes_per_number": 4}
    assert latent.cache_bytes(cache) == 2 * 5 * latent.cache_bytes_per_token("MLA", config)
    assert latent.cache_bytes({"a": [cache[0]], "b": cache[1], "c": None}) == \
        latent.cache_bytes(cache)


def test_the_rotary_gqa_layer_with_every_head_is_rotary_multi_head_attention():
    torch.manual_seed(0)
    gqa = latent.RotaryGroupedQueryAttention(16, 4, 4)
    mha = RotaryMultiHeadAttention(16, 4)
    mha.load_state_dict(gqa.state_dict())
    x = torch.randn(2, 6, 16)
    torch.testing.assert_close(gqa(x, x, x, is_causal=True)[0],
                               mha(x, x, x, is_causal=True)[0])


def test_the_latent_layer_trains_in_the_echo_model():
    config = lengths.EchoConfig(steps=5, n_heads=4)
    torch.manual_seed(0)
    model = lengths.EchoModel(config.vocab_size, config.d_model, config.n_heads,
                              config.test_len, "rotary",
                              lambda d, h: latent.SelfAttention(latent.LatentAttention(d, h, 8, 8)))
    losses = lengths.train_echo(model, config)
    assert losses[-1] < losses[0]


def test_layer_rejects_sizes_that_do_not_fit():
    with pytest.raises(ValueError, match="must divide"):
        latent.LatentAttention(16, 3, 6, 4)
    with pytest.raises(ValueError, match="even"):
        latent.LatentAttention(16, 2, 6, 3)
