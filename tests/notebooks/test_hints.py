"""Every exercise looks the same to a student: right above its practice cell a header line gives
the difficulty and the minutes from the registry; right below it three collapsed hints open one
at a time (a nudge, the idea, nearly the answer); its docstrings state the contract and give no
code away. Checked in the solution notebooks and in the released ones."""

import ast
import re

import pytest

from attention_course.lessons import lesson
from helpers.notebooks import LESSONS_WITH_STAGED_HINTS, NOTEBOOKS, SOLUTIONS, grading, read

STAGES = (("Hint 1", "a nudge"), ("Hint 2", "the idea"), ("Hint 3", "nearly the answer"))
HINTS = re.compile("\n\n".join(
    rf"<details><summary><b>{label}</b> · {stage}</summary>\n\n(?P<s{n}>\S.*?\S)\n\n</details>"
    for n, (label, stage) in enumerate(STAGES)), re.S)

PRACTICES = [(lesson_id, practice) for lesson_id in LESSONS_WITH_STAGED_HINTS
             for practice in lesson(lesson_id).practice if practice.written]
FOLDERS = {"solutions": SOLUTIONS, "notebooks": NOTEBOOKS}


def ids(case):
    return case.name if hasattr(case, "name") else None


def practice_index(cells, name: str) -> int:
    found = [i for i, cell in enumerate(cells)
             if grading(cell).get("solution") and grading(cell).get("grade_id") == name]
    assert len(found) == 1, f"{len(found)} practice cells {name!r}"
    return found[0]


def test_the_covered_lessons_are_registered_and_rated():
    for lesson_id in LESSONS_WITH_STAGED_HINTS:
        assert lesson(lesson_id).practice
    for lesson_id, practice in PRACTICES:
        assert practice.difficulty in (1, 2, 3), f"{lesson_id}: {practice.name} is not rated"
        assert 0 < practice.minutes <= 60, f"{lesson_id}: {practice.name} has no minutes"


def test_the_header_line_shows_difficulty_and_minutes():
    practice = next(p for p in lesson("02_scaled_dot_product").practice if p.name == "softmax")
    assert re.fullmatch(r"\*\*Exercise · softmax\*\* · difficulty [●○]{3} · about \d+ minutes",
                        practice.header)
    assert practice.header.count("●") == practice.difficulty


@pytest.mark.parametrize("folder", FOLDERS)
@pytest.mark.parametrize(("lesson_id", "practice"), PRACTICES, ids=ids)
def test_header_above_and_staged_hints_below_every_practice_cell(folder, lesson_id, practice):
    cells = read(FOLDERS[folder], lesson_id).cells
    at = practice_index(cells, practice.name)
    above, below, check = cells[at - 1], cells[at + 1], cells[at + 2]
    assert above.cell_type == "markdown" and above.source.splitlines()[0] == practice.header, \
        f"{folder}/{lesson_id}: the cell above {practice.name} must start with " \
        f"{practice.header!r}"
    assert below.cell_type == "markdown" and below.get("id") == f"hints-{practice.name}", \
        f"{folder}/{lesson_id}: no hints cell right below {practice.name}"
    assert not grading(below), "a hints cell is plain markdown, without nbgrader metadata"
    staged = HINTS.fullmatch(below.source)
    assert staged, f"{folder}/{lesson_id}: hints-{practice.name} is not three staged " \
                   f"<details> blocks in the course's form"
    for text in staged.groups():
        assert "<details>" not in text and "```" not in text
    assert grading(check).get("grade_id") == practice.check


def giveaways(docstring: str) -> list[str]:
    """What in a docstring goes beyond the contract: a hint list, or code to copy.

    The contract may name things (`dim`, F.scaled_dot_product_attention) and write formulas
    (softmax(QK^T / sqrt(D)) V, causal_mask(T, S)); it may not show how to compute them:
    - a "Hint(s):" line (hints live in the staged cell below the practice cell);
    - a backticked span that is more than a name (`x.amax(dim=dim)`, `scale is None`);
    - a method call on something (x.amax(, torch.arange(, .isneginf().all();
    - a method named on its own (".view", ".transpose");
    - an index that adds an axis with None ([:, None]).
    """
    found = re.findall(r"^[ \t]*Hints?\b.*$", docstring, re.M | re.I)
    found += [span for span in re.findall(r"`([^`]*)`", docstring)
              if not re.fullmatch(r"[A-Za-z_][\w.]*", span)]
    found += re.findall(r"[\w\])]\.\w+\(", docstring)
    found += re.findall(r"(?<![\w.)\]])\.[A-Za-z_]\w*", docstring)  # not 0..T-1
    found += re.findall(r"\[[^\]]*\bNone\b[^\]]*\]", docstring)
    return found


def docstrings(source: str) -> list[tuple[str, str]]:
    """(name, docstring) of every function and class a practice cell defines, methods too."""
    return [(node.name, ast.get_docstring(node) or "") for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef | ast.ClassDef)]


@pytest.mark.parametrize("folder", FOLDERS)
@pytest.mark.parametrize(("lesson_id", "practice"), PRACTICES, ids=ids)
def test_practice_docstrings_state_the_contract_only(folder, lesson_id, practice):
    cells = read(FOLDERS[folder], lesson_id).cells
    source = cells[practice_index(cells, practice.name)].source
    defined = [node for node in ast.parse(source).body
               if isinstance(node, ast.FunctionDef | ast.ClassDef)]
    assert defined and all(ast.get_docstring(node) for node in defined), \
        f"{practice.name}: what the student writes has a docstring, its contract"
    found = docstrings(source)
    for name, text in found:
        assert not giveaways(text), f"{folder}/{lesson_id}: the docstring of {name} gives " \
                                    f"away {giveaways(text)}; hints go in hints-{practice.name}"


@pytest.mark.parametrize(("lesson_id", "practice"), PRACTICES, ids=ids)
def test_hints_never_show_a_line_of_the_solution(lesson_id, practice):
    cells = read(SOLUTIONS, lesson_id).cells
    at = practice_index(cells, practice.name)
    region = re.search(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cells[at].source, re.S)
    code = [line.split("  #")[0].strip() for line in region.group(1).splitlines()]
    shown = [line for line in code if len(line) > 15 and line in cells[at + 1].source]
    assert not shown, f"hints-{practice.name} shows solution code: {shown}"


def test_the_rule_catches_hint_lists_and_lets_contracts_through():
    assert giveaways("""Softmax.

    Hints:
    - subtract the maximum""")
    for code in ["`x.amax(dim=dim, keepdim=True)` is the maximum",
                 "test `scale is None` first",
                 "find such rows with .isneginf().all(dim=-1, keepdim=True)",
                 "positions: torch.arange(seq_len) as a column",
                 "then swap the T and H axes with .transpose",
                 "add the two axes with indexing: mask[:, None, None, :]",
                 "q = split_heads(self.q_proj(query), self.n_heads)"]:
        assert giveaways(code), code
    contract = """Numerically stable softmax along `dim`: exp(x - max) / sum(exp(x - max)).

    Args:
        x: tensor of any shape (may contain -inf), e.g. scores.
        attn_mask: None, a bool mask (True = may attend) or a float mask; like
            F.scaled_dot_product_attention with is_causal=True, as causal_mask(T, S);
            ids in 0..V-1, keys 0..t.
    Returns:
        (B, T, C) with merged[b, t, h*D:(h+1)*D] == x[b, h, t]; the dropout is self.dropout.
    """
    assert giveaways(contract) == []
