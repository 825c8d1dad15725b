"""The student notebooks as a student meets them: a stub stops the run at the first check, the
solutions pass every check, and planted mistakes are named by the checks."""

import pytest
from notebook_tools import (
    NOTEBOOKS,
    SOLUTIONS,
    check_cells,
    errors,
    execute,
    lessons,
    practice_cells,
    read,
    with_body,
)

pytestmark = pytest.mark.slow
LESSONS = lessons()

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
    "token_and_position_embedding": ("""
        return weight[token_ids] + pe[: token_ids.shape[-1]]
        """, "embedding not scaled by sqrt(d_model)"),
    "softmax": ("""
        return x.exp() / x.exp().sum(dim=dim, keepdim=True)
        """, "no max-subtraction"),
    "attention_scores": ("""
        return query @ key.transpose(-2, -1) / query.shape[-1]
        """, "1/D instead of 1/sqrt(D)"),
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
        q, k, v = (p(x).unflatten(-1, (self.n_heads, -1)).transpose(1, 2)
                   for p, x in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
        out, weights = scaled_dot_product_attention(q, k, v, attn_mask, is_causal=is_causal)
        return out.transpose(1, 2).flatten(-2), weights
        """, "missing output projection"),
    "copy_task_loss": ("""
        per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        return per_token.mean()
        """, "loss over the prompt half too"),
    "train_step": ("""
        loss = copy_task_loss(model(batch.inputs), batch.targets, batch.loss_mask)
        loss.backward()
        optimizer.step()
        return loss.item()
        """, "gradients never reset"),
    "greedy_decode": ("""
        tokens = prompt
        for _ in range(n_new):
            tokens = torch.cat([tokens, model(tokens)[:, 0].argmax(-1, keepdim=True)], dim=1)
        return tokens[:, prompt.shape[1]:]
        """, "decoding from the first position's logits"),
    "sequence_accuracy": ("""
        return (predicted == expected).float().mean().item()
        """, "token accuracy instead of sequence accuracy"),
}


@pytest.mark.parametrize("lesson", LESSONS)
def test_student_notebook_runs_until_its_first_check(lesson):
    nb = read(NOTEBOOKS, lesson)
    first_check = min(check_cells(nb).values())
    execute(nb, NOTEBOOKS / lesson, allow_errors=True)
    failing = [i for i, cell in enumerate(nb.cells) if errors(cell)]
    assert failing[0] == first_check, f"first error in cell {failing[0]}: " \
                                      f"{errors(nb.cells[failing[0]])}"
    assert "not implemented yet" in errors(nb.cells[first_check])[0]


@pytest.mark.parametrize("lesson", LESSONS)
def test_student_notebook_with_the_solutions_passes_every_check(lesson):
    student, solution = read(NOTEBOOKS, lesson), read(SOLUTIONS, lesson)
    answers = practice_cells(solution)
    for name, index in practice_cells(student).items():
        student.cells[index].source = solution.cells[answers[name]].source
    execute(student, NOTEBOOKS / lesson)
    for name, index in check_cells(student).items():
        printed = "".join(o.get("text", "") for o in student.cells[index].outputs)
        assert printed.startswith("ok: "), f"check_{name} printed {printed!r}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_student_notebook_with_mistakes_is_told_which_mistake(lesson):
    student, solution = read(NOTEBOOKS, lesson), read(SOLUTIONS, lesson)
    answers = practice_cells(solution)
    planted = {name: MISTAKES[name] for name in practice_cells(student) if name in MISTAKES}
    assert planted, f"no mistake planted in {lesson}"
    for name, (body, _) in planted.items():
        practice = practice_cells(student)[name]
        student.cells[practice].source = with_body(solution.cells[answers[name]].source, body)
    execute(student, NOTEBOOKS / lesson, allow_errors=True)
    for name, (_, mistake) in planted.items():
        told = errors(student.cells[check_cells(student)[name]])
        assert told and mistake in told[0], f"check_{name}: expected {mistake!r}, got {told}"
