"""Lesson 06's checks: the catalogue names what the lesson promises, counting positions from
another start is no mistake, PyTorch's own rotary embedding is refused as a shortcut, and the
grader gives the lesson's correct notebook full points, a blank one none, and names the demo
class's mistakes. (Its mistakes written as students write them are named in
checks/test_catalogue.py, with every lesson's.)"""

import json
import subprocess
import sys

import pytest
import torch

from attention_course import rope
from attention_course.checks import lesson06
from attention_course.checks.student.observing import Case, observe
from grader.demo import MISTAKES as DEMO_MISTAKES
from grader.demo import practice_names, student_notebook
from grader.grading.inspection import inspect_submission
from helpers.checking import check_of
from helpers.gradebook import read_course

LESSON = "06_rotary_positions"
CATALOGUES = {"rotate_pairs": lesson06.ROTATE_PAIRS.mistakes,
              "rotary_multi_head_attention": lesson06.ROTARY_MHA_MISTAKES}


def test_the_catalogue_names_what_the_lesson_promises():
    names = {m.name for mistakes in CATALOGUES.values() for m in mistakes}
    for promised in ("rotation applied to the values too",
                     "rotation applied to the scores instead of the queries and keys",
                     "rotation applied to the weights after the softmax",
                     "interleaved pairs (2i, 2i+1) instead of half-split pairs (i, i + D/2)",
                     "angles laid out for interleaved pairs while the pairs are half-split",
                     "exponent uses i instead of 2i (base^(i/D))", "positions counted from 1",
                     "angles from the model width instead of the head width"):
        assert promised in names


def test_shifting_every_position_in_the_layer_is_no_mistake():
    """Scores depend on offsets only: a layer that counts queries and keys from 1 is right."""
    class CountingFromOne(rope.RotaryMultiHeadAttention):
        def forward(self, query, key, value, attn_mask=None, is_causal=False,
                    query_positions=None, key_positions=None):
            q, k, v = (rope.split_heads(p(x), self.n_heads) for p, x in
                       ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
            T, S = q.shape[-2], k.shape[-2]
            q_at = torch.arange(T) if query_positions is None else query_positions
            k_at = torch.arange(S) if key_positions is None else key_positions
            kw = {"base": self.base, "dtype": q.dtype}
            q = rope.apply_rotary(q, rope.rotary_angles(q_at + 1, self.d_head, **kw))
            k = rope.apply_rotary(k, rope.rotary_angles(k_at + 1, self.d_head, **kw))
            out, weights = rope.scaled_dot_product_attention(q, k, v, attn_mask, 0.0, is_causal)
            return self.out_proj(rope.merge_heads(out)), weights

    check_of("rotary_multi_head_attention")(CountingFromOne)


# ---------------------------------------------------------------- shortcuts

def test_pytorchs_rotary_embedding_is_a_shortcut_caught_in_the_students_process():
    onnx = pytest.importorskip("torch.onnx.ops")

    def rotate_pairs(x, positions=None, *, base=10000.0):
        D = x.shape[-1]
        angles = torch.arange(x.shape[-2])[:, None] / base ** (torch.arange(0, D, 2) / D)
        positions = torch.arange(x.shape[-2]).expand(x.shape[0], -1)
        return onnx.rotary_embedding(x, angles.cos(), angles.sin(), positions)

    x = torch.randn(2, 3, 5, 8)
    seen = observe(("x",), lesson06.ROTATE_PAIRS.forbidden, rotate_pairs,
                   Case("a (2, 3, 5, 8) x", (x,)))
    assert seen.shortcuts == [lesson06.ONNX_ROTARY]
    # the grader gets the rule by name, with no import of torch.onnx
    assert lesson06.ONNX_ROTARY in lesson06.ROTATE_PAIRS.forbidden.qualified_names
    assert "torch.onnx" not in subprocess.run(
        [sys.executable, "-c", "import sys, attention_course.checks\n"
                               "print(sorted(m for m in sys.modules if m.startswith('torch.')))"],
        capture_output=True, text=True, check=True).stdout


def test_pytorchs_rotary_embedding_in_a_submission_is_flagged():
    notebook = student_notebook(LESSON, dict.fromkeys(practice_names(LESSON)))
    practice = next(c for c in notebook.cells
                    if c.metadata.get("nbgrader", {}).get("grade_id") == "rotate_pairs")
    practice.source = ("import torch.onnx.ops\n\ndef rotate_pairs(x, positions=None, *, "
                       "base=10000.0):\n"
                       "    angles = rotary_angles(x.shape[-2], x.shape[-1], base=base)\n"
                       "    positions = torch.arange(x.shape[-2]).expand(x.shape[0], -1)\n"
                       "    return torch.onnx.ops.rotary_embedding(x, angles.cos(), "
                       "angles.sin(), positions)\n")
    flags = inspect_submission(notebook, read_course()[LESSON])
    assert any("torch.onnx.ops.rotary_embedding" in flag for flag in flags), flags


# ---------------------------------------------------------------- the real grader

@pytest.mark.slow
def test_the_grader_gives_full_points_none_and_names_the_mistakes(graded_class):
    names = practice_names(LESSON)
    notebooks = {"correct": student_notebook(LESSON, dict.fromkeys(names)),
                 "blank": student_notebook(LESSON, {}),
                 "mistaken": student_notebook(
                     LESSON, {name: DEMO_MISTAKES[name][0] for name in names})}
    workspace = graded_class("lesson06", submitted={
        (student, LESSON): (notebook, None) for student, notebook in notebooks.items()},
        grade=("--lesson", LESSON, "--workers", "1", "--cell-timeout", "10"), command_line=True)
    results = {student: json.loads(workspace.result_file(student, LESSON).read_text())
               for student in notebooks}
    full = read_course()[LESSON].max_score
    assert read_course()[LESSON].points == [("check_rotate_pairs", 5),
                                            ("check_rotary_multi_head_attention", 3)]
    assert (results["correct"]["outcome"], results["correct"]["score"]) == ("graded", full), \
        results["correct"]
    assert (results["blank"]["outcome"], results["blank"]["score"]) == ("graded", 0.0)
    assert all("not implemented yet" in e["message"] for e in results["blank"]["exercises"])
    assert results["mistaken"]["score"] == 0.0
    for exercise in results["mistaken"]["exercises"]:
        name = exercise["grade_id"].removeprefix("check_")
        assert DEMO_MISTAKES[name][1] in exercise["mistake"], exercise
