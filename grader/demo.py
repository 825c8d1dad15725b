"""A demo class: synthetic students whose submissions show every path through the grader.

``build_demo_class(workspace, n)`` writes one LMS-style zip per lesson (files named
``<student>_<lesson>.ipynb``, as ``make collect`` expects) holding, across the class:
correct answers, answers with catalogued mistakes (every entry of ``MISTAKES`` appears), blank
and partly answered notebooks, broken files (malformed JSON, empty, renamed, not a notebook,
unknown nbgrader metadata version), a kernel that dies, a cell that ignores interrupts, and two
tampering attempts: one replaces ``torch.allclose``, ``torch.testing.assert_close`` and the
checks with functions that always pass, one installs an IPython input transformer that erases
every later cell. Every student's notebooks are the released ones, filled in the way the
student's profile says.
"""

import copy
import functools
import json
import re
import textwrap
import zipfile
from pathlib import Path

import nbformat

from .course import (
    BEGIN,
    END,
    RELEASE,
    SOLUTIONS,
    lesson_names,
    nbgrader_metadata,
    solution_sources,
)
from .workspace import Workspace

# One realistic mistake per exercise, written as a student would: (body, the mistake's name).
MISTAKES = {
    "sinusoidal_positional_encoding": ("""
        position = torch.arange(seq_len, dtype=torch.float32)[:, None]
        two_i = torch.arange(0, d_model, 2, dtype=torch.float32)
        angles = position / 10000 ** (two_i / d_model)
        pe = torch.zeros(seq_len, d_model)
        pe[:, 0::2] = torch.cos(angles)
        pe[:, 1::2] = torch.sin(angles)
        return pe
        """, "sin and cos swapped"),
    "offset_matrix": ("""
        two_i = torch.arange(0, d_model, 2)
        angle = k / 10000 ** (two_i / d_model)
        m = torch.zeros(d_model, d_model)
        m[two_i, two_i] = m[two_i + 1, two_i + 1] = torch.cos(angle)
        m[two_i, two_i + 1], m[two_i + 1, two_i] = torch.sin(angle), -torch.sin(angle)
        return m
        """, "rotation transposed: it moves the encoding k places back"),
    "embedding_layer": ("""
        self.token = nn.Embedding(vocab_size, d_model)
        self.max_len, self.scale_tokens = max_len, scale_tokens
        self.learned_positions = learned_positions and positions
        if self.learned_positions or not positions:
            table = torch.randn(max_len, d_model) if positions else torch.zeros(max_len, d_model)
        else:
            table = sinusoidal_positional_encoding(max_len, d_model)
        self.position = nn.Parameter(table)
        """, "sinusoidal table saved as a Parameter, not a buffer"),
    "softmax": ("""
        return x.exp() / x.exp().sum(dim=dim, keepdim=True)
        """, "no max-subtraction"),
    "scaled_dot_product_attention": ("""
        d_k = query.size(-1)
        scores = torch.matmul(query, key.transpose(-2, -1)) / d_k
        weights = torch.exp(scores) / torch.exp(scores).sum(-1, keepdim=True)
        return torch.matmul(scores, value), weights
        """, "scores multiplied by V instead of the weights"),
    "causal_mask": ("""
        S = T if S is None else S
        return torch.ones(T, S, dtype=torch.bool, device=device).triu()
        """, "causal mask transposed"),
    "padding_mask": ("""
        return (torch.arange(S)[None, :] < lengths[:, None])[:, None, :, None]
        """, "padding mask on the query axis"),
    "apply_mask": ("""
        if attn_mask is None:
            return scores
        if attn_mask.dtype == torch.bool:
            return scores.masked_fill(attn_mask, float("-inf"))
        return scores + attn_mask
        """, "mask polarity inverted"),
    "masked_attention": ("""
        scale = query.shape[-1] ** -0.5 if scale is None else scale
        scores = query @ key.transpose(-2, -1) * scale
        T, S = scores.shape[-2:]
        if is_causal:
            scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), float("-inf"))
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        elif attn_mask is not None:
            scores = scores + attn_mask
        weights = torch.softmax(scores, dim=-1)
        return weights @ value, weights
        """, "fully masked rows give NaN"),
    "packed_attention": ("""
        B, L = len(lengths), int(lengths.max())
        real = torch.arange(L) < lengths[:, None]
        q, k, v = (x.new_zeros(B, L, x.shape[-1]).index_put((real,), x)
                   for x in (query, key, value))
        out, _ = masked_attention(q, k, v, is_causal=is_causal)
        return out[real]
        """, "pad keys not hidden (no padding mask, or one on the queries' axis)"),
    "to_mha_mask": ("""
        return attn_mask
        """, "bool mask not inverted"),
    "split_heads": ("""
        B, T, C = x.shape
        return x.view(B, n_heads, T, C // n_heads)
        """, "heads split with view and no transpose"),
    "merge_heads": ("""
        B, H, T, D = x.shape
        return x.reshape(B, T, H * D)
        """, "heads merged without the inverse transpose"),
    "multi_head_attention": ("""
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, self.d_head, bias=bias)
        self.k_proj = nn.Linear(d_model, self.d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, self.d_head, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        """, "a projection of the wrong size"),
    "mlp": ("""
        self.gated = gated
        if gated:
            self.gate = nn.Linear(d_model, 4 * d_model, bias=False)
            self.up = nn.Linear(d_model, 4 * d_model, bias=False)
            self.down = nn.Linear(4 * d_model, d_model, bias=False)
        else:
            self.fc = nn.Linear(d_model, 4 * d_model)
            self.proj = nn.Linear(4 * d_model, d_model)
        self.dropout = dropout
        """, "hidden width 4 * d_model instead of d_ff"),
    "decoder_block": ("""
        self.attn_norm = self.mlp_norm = norm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.mlp = mlp(d_model, d_ff, dropout)
        self.dropout = dropout
        """, "one norm object shared by both sublayers"),
    "copy_task_loss": ("""
        logits = model(sequences[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1), sequences[:, 1:].flatten())
        """, "loss over the prompt half too"),
    "decoder_only_transformer": ("""
        self.embed = TokenAndPositionEmbedding(
            vocab_size, d_model, max_len, learned_positions=positions == "learned",
            positions=positions != "none", scale_tokens=scale_tokens)
        layer = block(d_model, n_heads, d_ff or 4 * d_model, dropout)
        self.blocks = nn.ModuleList([layer] * n_layers)
        self.norm = norm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        """, "one block used for every layer"),
    "train_step": ("""
        model.train()
        loss = loss_fn(model, sequences, n)
        loss.backward()
        if max_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        return loss.item()
        """, "gradients never zeroed"),
    "rms_norm": ("""
        self.eps = 1e-6
        self.weight = nn.Parameter(torch.ones(d_model))
        """, "the eps argument ignored"),
    "rotate_pairs": ("""
        if positions is None:
            positions = torch.arange(x.shape[-2])
        D = x.shape[-1]
        angles = positions.to(x.dtype)[:, None] / base ** (torch.arange(0, D, 2) / D)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        cos, sin = torch.cos(angles), torch.sin(angles)
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
        """, "interleaved pairs (2i, 2i+1) instead of half-split pairs"),
    "rotary_multi_head_attention": ("""
        D = self.d_head
        q, k, v = (split_heads(p(x), self.n_heads) for p, x in
                   ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))

        def turn(x):
            two_i = torch.arange(0, D, 2, dtype=x.dtype)
            angles = torch.arange(x.shape[-2], dtype=x.dtype)[:, None] / self.base ** (two_i / D)
            x1, x2 = x[..., :D // 2], x[..., D // 2:]
            return torch.cat([x1 * angles.cos() - x2 * angles.sin(),
                              x1 * angles.sin() + x2 * angles.cos()], dim=-1)

        out, weights = scaled_dot_product_attention(turn(q), turn(k), turn(v), attn_mask,
                                                    is_causal=is_causal)
        return self.out_proj(merge_heads(out)), weights
        """, "rotation applied to the values too"),
    "cached_attention": ("""
        if past_key is not None:
            key = torch.cat([past_key, key], dim=-2)
            value = torch.cat([past_value, value], dim=-2)
        out, _ = scaled_dot_product_attention(query, key, value, is_causal=True)
        return out, key, value
        """, "causal mask aligned top-left"),
    "cached_rotary_attention": ("""
        P = 0 if past_key is None else past_key.shape[-2]
        q = split_heads(self.q_proj(x), self.n_heads)
        k = split_heads(self.k_proj(x), self.n_heads)
        v = split_heads(self.v_proj(x), self.n_heads)
        angles = rotary_angles(x.shape[-2], self.d_head, base=self.base)
        q, k = apply_rotary(q, angles), apply_rotary(k, angles)
        out, keys, values = cached_attention(q, k, v, past_key, past_value)
        return self.out_proj(merge_heads(out)), keys, values
        """, "new tokens rotated at positions 0 .. T-1"),
    "grouped_query_attention_layer": ("""
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        """, "a projection of the wrong size"),
    "tiled_attention": ("""
        scale = query.shape[-1] ** -0.5 if scale is None else scale
        T, S = query.shape[-2], key.shape[-2]
        m, l, acc = torch.full_like(query[..., :1], float("-inf")), 0.0, 0.0
        for start in range(0, S, block_size):
            k, v = key[..., start:start + block_size, :], value[..., start:start + block_size, :]
            scores = query @ k.transpose(-2, -1) * scale
            if is_causal:
                future = torch.arange(start, start + k.shape[-2]) > torch.arange(S - T, S)[:, None]
                scores = scores.masked_fill(future, float("-inf"))
            m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
            p = torch.exp(scores - m_new)
            l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True)
            acc = acc + p @ v
            m = m_new
        return acc / l, (m + torch.log(l)).squeeze(-1)
        """, "running max not used to rescale the accumulated output"),
    "merge_attention": ("""
        return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)
        """, "outputs averaged instead of weighted"),
    "attention_backward": ("""
        scale = query.shape[-1] ** -0.5 if scale is None else scale
        weights = torch.softmax(query @ key.transpose(-2, -1) * scale, dim=-1)
        dscores = weights * (dout @ value.transpose(-2, -1))
        dq = dscores @ key * scale
        dk = dscores.transpose(-2, -1) @ query * scale
        return dq, dk, weights.transpose(-2, -1) @ dout
        """, "the D term missing from the softmax's backward"),
    "flash_backward": ("""
        T, S = query.shape[-2], key.shape[-2]
        scale = query.shape[-1] ** -0.5 if scale is None else scale
        dq, dks, dvs = 0, [], []
        for k0 in range(0, S, block_size):
            k, v = key[..., k0:k0 + block_size, :], value[..., k0:k0 + block_size, :]
            p = torch.exp(query @ k.transpose(-2, -1) * scale - lse[..., None])
            if is_causal:
                hidden = torch.arange(k0, k0 + k.shape[-2]) > torch.arange(S - T, S)[:, None]
                p = p.masked_fill(hidden, 0.0)
            dp = dout @ v.transpose(-2, -1)
            ds = p * (dp - (p * dp).sum(-1, keepdim=True))
            dq = dq + ds @ k * scale
            dks.append(ds.transpose(-2, -1) @ query * scale)
            dvs.append(p.transpose(-2, -1) @ dout)
        return dq, torch.cat(dks, dim=-2), torch.cat(dvs, dim=-2)
        """, "D taken from each block's P and dP"),
    "flash_attention": ("""
        T, S = query.shape[-2], key.shape[-2]
        factor = query.shape[-1] ** -0.5 if scale is None else scale
        m = torch.full_like(query[..., :1], float("-inf"))
        l, total = torch.zeros_like(m), torch.zeros_like(m)
        acc = query.new_zeros(*query.shape[:-1], value.shape[-1])
        for k0 in range(0, S, block_size):
            k, v = key[..., k0:k0 + block_size, :], value[..., k0:k0 + block_size, :]
            scores = query @ k.transpose(-2, -1) * factor
            if is_causal:
                hidden = torch.arange(k0, k0 + k.shape[-2]) > torch.arange(S - T, S)[:, None]
                scores = scores.masked_fill(hidden, float("-inf"))
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
            p = torch.exp(scores - m_new)
            l = l * torch.exp(m - m_new) + p.sum(dim=-1, keepdim=True)
            acc = acc * torch.exp(m - m_new) + p @ v
            total = total + torch.exp(scores).sum(dim=-1, keepdim=True)
            m = m_new
        out, lse = acc / l, torch.log(total)[..., 0]
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.settings = (is_causal, scale, block_size)
        ctx.mark_non_differentiable(lse)
        return out, lse
        """, "logsumexp without the maximum"),
    "sliding_window_mask": ("""
        query_at = torch.arange(S - T, S, device=device)[:, None]
        key_at = torch.arange(S, device=device)[None, :]
        recent = (key_at <= query_at) & (key_at >= query_at - window)
        return recent | ((key_at < n_sinks) & (key_at <= query_at))
        """, "window off by one: W keys besides the query itself"),
    "rolling_cache_attention": ("""
        if past_key is not None:
            key = torch.cat([past_key, key], dim=-2)
            value = torch.cat([past_value, value], dim=-2)
        T, S = query.shape[-2], key.shape[-2]
        allowed = sliding_window_mask(T, S, window, n_sinks, device=query.device)
        out, _ = scaled_dot_product_attention(query, key, value, attn_mask=allowed)
        keep = n_sinks + window - 1
        return out, key[..., -keep:, :], value[..., -keep:, :]
        """, "sinks evicted"),
    "rolling_rotary_attention": ("""
        P = 0 if past_key is None else past_key.shape[-2]
        positions = torch.arange(P, P + query.shape[-2])
        angles = rotary_angles(positions, query.shape[-1], base=base, dtype=query.dtype)
        return rolling_cache_attention(apply_rotary(query, angles), apply_rotary(key, angles),
                                       value, past_key, past_value, window=window,
                                       n_sinks=n_sinks)
        """, "positions renumbered after eviction"),
    "streaming_llm_attention": ("""
        if past_key is not None:
            key = torch.cat([past_key, key], dim=-2)
            value = torch.cat([past_value, value], dim=-2)
        T, S = query.shape[-2], key.shape[-2]
        angles = rotary_angles(S, query.shape[-1], base=base, dtype=query.dtype)
        key = apply_rotary(key, angles)
        return rolling_cache_attention(apply_rotary(query, angles[S - T:]), key[..., S - T:, :],
                                       value[..., S - T:, :], key[..., :S - T, :],
                                       value[..., :S - T, :], window=window, n_sinks=n_sinks)
        """, "rotated keys cached"),
    "sink_attention": ("""
        scale = query.shape[-1] ** -0.5 if scale is None else scale
        scores = query @ key.transpose(-2, -1) * scale + sink[:, None, None]
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return weights @ value, weights
        """, "sink logit added to the scores instead of the denominator"),
    "naive_latent_attention": ("""
        shared = latent.unsqueeze(-3)
        keys, values = shared @ w_uk, shared @ w_uv
        scale = latent.shape[-1] ** -0.5 if scale is None else scale
        scores = query @ keys.transpose(-2, -1) * scale
        T, S = scores.shape[-2:]
        hidden = torch.ones(T, S, dtype=torch.bool).triu(S - T + 1)
        return torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1) @ values
        """, "the scale taken from the latent width instead of the head width"),
    "absorbed_latent_attention": ("""
        scale = query.shape[-1] ** -0.5 if scale is None else scale
        shared = latent.unsqueeze(-3)
        scores = query @ w_uk.transpose(-2, -1) @ shared.transpose(-2, -1) * scale
        T, S = scores.shape[-2:]
        hidden = torch.ones(T, S, dtype=torch.bool).triu(1)
        weights = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
        return weights @ shared @ w_uv
        """, "causal mask aligned top-left"),
    "latent_attention": ("""
        P = 0 if cache is None else cache[0].shape[-2]
        positions = torch.arange(P, P + x.shape[-2])
        latent = x @ self.w_dkv
        rope_key = rotate_pairs(x @ self.w_kr, positions, base=self.base)
        if cache is not None:
            latent = torch.cat([cache[0], latent], dim=-2)
            rope_key = torch.cat([cache[1], rope_key], dim=-2)
        heads = x.unsqueeze(-3)
        q_latent = heads @ self.w_q @ self.w_uk.transpose(-2, -1)
        q_rope = rotate_pairs(heads @ self.w_qr, positions, base=self.base)
        scores = (q_latent @ latent.unsqueeze(-3).transpose(-2, -1)
                  + q_rope @ rope_key.unsqueeze(-3).transpose(-2, -1)) / math.sqrt(self.d_head)
        T, S = scores.shape[-2:]
        hidden = torch.ones(T, S, dtype=torch.bool).triu(S - T + 1)
        weights = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
        out = weights @ latent.unsqueeze(-3) @ self.w_uv @ self.w_o
        return out.sum(dim=-3), (latent, rope_key)
        """, "the softmax scale missing the rotary part of the width"),
    "cache_bytes_per_token": ("""
        if kind == "MLA":
            numbers = config["d_latent"] + config["n_heads"] * config["d_rope"]
        else:
            heads = {"MHA": config["n_heads"], "GQA": config["n_kv_heads"], "MQA": 1}[kind]
            numbers = 2 * heads * config["d_head"]
        return numbers * config["bytes_per_number"]
        """, "the rotary key not shared across heads"),
}

# Code a student adds in a new cell right after the imports.
TAMPERING = {
    "patches the comparisons and the checks": """
import sys
import torch
torch.allclose = lambda *args, **kwargs: True
torch.testing.assert_close = lambda *args, **kwargs: None
for module in [m for name, m in sys.modules.items() if name.startswith("attention_course.checks")]:
    for name in [n for n in dir(module) if n.startswith("check_")]:
        setattr(module, name, lambda *args, **kwargs: print("ok: passed"))
""",
    "erases every later cell": """
get_ipython().input_transformers_cleanup.append(lambda lines: [])
""",
}
KERNEL_DEATH = "import os\nos._exit(1)"
IGNORES_INTERRUPTS = """
import signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    time.sleep(0.1)
"""


def with_body(source: str, body: str) -> str:
    """Replace the solution region of a practice cell with ``body``, indented to fit."""
    pattern = re.compile(rf"^( *){re.escape(BEGIN)}\n.*?^ *{re.escape(END)}\n?", re.M | re.S)
    match = pattern.search(source)
    if not match:
        raise ValueError("no solution region")
    indented = textwrap.indent(textwrap.dedent(body).strip("\n"), match.group(1)) + "\n"
    return source[:match.start()] + indented + source[match.end():]


def student_notebook(lesson: str, answers: dict[str, str | None],
                     extra_cell: str | None = None) -> nbformat.NotebookNode:
    """The released notebook with practice cells answered: name -> None for the instructor's
    answer, or a mistaken body (see MISTAKES); unnamed cells stay blank."""
    notebook = nbformat.read(RELEASE / lesson / f"{lesson}.ipynb", as_version=4)
    solutions = solution_sources(lesson)
    for cell in notebook.cells:
        name = nbgrader_metadata(cell).get("grade_id")
        if nbgrader_metadata(cell).get("solution") and name in answers:
            body = answers[name]
            cell.source = solutions[name] if body is None else with_body(
                _original(lesson, name), body)
    if extra_cell:
        imports = next(i for i, c in enumerate(notebook.cells)
                       if c.cell_type == "code" and "import" in c.source and i > 2)
        notebook.cells.insert(imports + 1, nbformat.v4.new_code_cell(extra_cell.strip()))
    return notebook


@functools.cache
def _original(lesson: str, name: str) -> str:
    source = nbformat.read(SOLUTIONS / lesson / f"{lesson}.ipynb", as_version=4)
    return next(c.source for c in source.cells if nbgrader_metadata(c).get("grade_id") == name)


def practice_names(lesson: str) -> list[str]:
    return list(solution_sources(lesson))


# ---------------------------------------------------------------- the class

def profile(index: int, lesson: str) -> tuple[str, dict, str | None]:
    """(description, answers, extra cell) of student ``index`` in ``lesson``."""
    names = practice_names(lesson)
    everything = dict.fromkeys(names)
    mistaken = [n for n in names if n in MISTAKES]
    kind = index % 6
    if kind in (0, 3):
        return "correct", everything, None
    if kind in (1, 4) and mistaken:
        chosen = mistaken[(index // 6 + kind) % len(mistaken)]
        return f"mistake: {MISTAKES[chosen][1]}", everything | {chosen: MISTAKES[chosen][0]}, None
    if kind == 2:
        return "partly answered", dict.fromkeys(names[:len(names) // 2 + 1]), None
    if kind == 5 and index % 12 == 5:
        return "blank", {}, None
    return "correct", everything, None


SPECIAL = {  # (student number, lesson number) -> what that submission is instead
    (1, 1): "malformed JSON", (2, 2): "empty file", (3, 3): "renamed notebook",
    (4, 4): "unknown nbgrader metadata version", (5, 1): "not a notebook",
    (6, 2): "patches the comparisons and the checks", (7, 3): "erases every later cell",
    (8, 4): "kernel dies", (9, 1): "ignores interrupts",
}


def submission_file(index: int, lesson: str, lesson_number: int) -> tuple[str, bytes, str]:
    """(file name in the zip, its bytes, what it is) for one student and lesson."""
    student = student_id(index)
    name = f"{student}_{lesson}.ipynb"
    special = SPECIAL.get((index, lesson_number))
    if special in TAMPERING:
        return name, _dumps(student_notebook(lesson, {}, TAMPERING[special])), special
    if special == "kernel dies":
        return name, _dumps(student_notebook(lesson, {}, KERNEL_DEATH)), special
    if special == "ignores interrupts":
        return name, _dumps(student_notebook(lesson, {}, IGNORES_INTERRUPTS)), special
    description, answers, extra = profile(index, lesson)
    text = _dumps(student_notebook(lesson, answers, extra))
    if special == "malformed JSON":
        return name, text[: len(text) // 2], special
    if special == "empty file":
        return name, b"", special
    if special == "renamed notebook":
        return f"{student}_{lesson} (1).ipynb", text, special
    if special == "not a notebook":
        return name, b'["this", "is", "not", "a", "notebook"]', special
    if special == "unknown nbgrader metadata version":
        data = json.loads(text)
        for cell in data["cells"]:
            if "nbgrader" in cell["metadata"]:
                cell["metadata"]["nbgrader"]["schema_version"] = 99
        return name, json.dumps(data).encode(), special
    return name, text, description


def student_id(index: int) -> str:
    return f"s{index:02d}"


def _dumps(notebook: nbformat.NotebookNode) -> bytes:
    return nbformat.writes(copy.deepcopy(notebook)).encode()


def build_demo_class(workspace: Workspace, n_students: int = 30) -> list[Path]:
    """Write the class's zips (one per lesson) and a roster of who submitted what."""
    if n_students < len(SPECIAL):
        raise ValueError(f"the demo class needs at least {len(SPECIAL)} students")
    out = workspace.root / "demo"
    out.mkdir(parents=True, exist_ok=True)
    roster, zips = {}, []
    for number, lesson in enumerate(lesson_names(), start=1):
        path = out / f"{lesson}.zip"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for index in range(1, n_students + 1):
                name, data, description = submission_file(index, lesson, number)
                archive.writestr(f"submissions/{name}", data)
                roster.setdefault(student_id(index), {})[lesson] = description
        zips.append(path)
    (out / "roster.json").write_text(json.dumps(roster, indent=1))
    return zips
