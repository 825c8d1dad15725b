"""Answers that look alike: pairs of students of one lesson whose answers are the same code up
to renaming (a section of the class report).

Each answer is compared as tokens that renaming does not change (``inspection.answer_tokens``).
Alike answers are not proof of copying: short exercises have few good solutions, so only
answers long enough to tell are compared, and a pair needs two at least.
"""

import difflib
import itertools
from collections import defaultdict
from typing import NamedTuple

from ..grading.results import Result

SIMILAR = 0.95  # token similarity from which two answers count as near-identical
SHORTEST_COMPARED = 12  # tokens (as inspection's): shorter answers look alike whenever right
FUZZY_UP_TO = 200  # submissions of a lesson compared pairwise; above, only identical answers


class AlikePair(NamedTuple):
    lesson: str
    students: tuple[str, str]
    alike: int  # exercises whose answers are near-identical (all compared ones)
    similarity: float  # the lowest among them


def alike_pairs(results: list[Result]) -> list[AlikePair]:
    """Pairs of students of one lesson whose every answer (two at least, each long enough to
    tell) is the other's up to renaming: identical token sequences, or at least ``SIMILAR``
    alike where the lesson has at most ``FUZZY_UP_TO`` submissions."""
    pairs = []
    for lesson, group in itertools.groupby(sorted(results, key=lambda r: (r.lesson, r.student)),
                                           key=lambda r: r.lesson):
        answered = [r for r in group if len(_compared(r.answers)) >= 2]
        fuzzy = len(answered) <= FUZZY_UP_TO
        for first, second in _candidates(answered, fuzzy):
            shared = _compared(first.answers).keys() & _compared(second.answers).keys()
            ratios = [_similarity(first.answers[n], second.answers[n], fuzzy) for n in shared]
            if len(shared) >= 2 and min(ratios) >= SIMILAR:
                pairs.append(AlikePair(lesson, (first.student, second.student), len(shared),
                                       min(ratios)))
    return sorted(pairs, key=lambda p: (-p.alike, -p.similarity, p.lesson, p.students))


def _compared(answers: dict[str, str]) -> dict[str, str]:
    return {n: a for n, a in answers.items() if len(a.split()) >= SHORTEST_COMPARED}


def _candidates(answered: list[Result], fuzzy: bool):
    if fuzzy:
        return itertools.combinations(answered, 2)
    same = defaultdict(list)  # identical answers only: one pass, not every pair
    for result in answered:
        same[tuple(sorted(_compared(result.answers).items()))].append(result)
    return (pair for group in same.values() for pair in itertools.combinations(group, 2))


def _similarity(a: str, b: str, fuzzy: bool) -> float:
    if a == b or not fuzzy:
        return float(a == b)
    return difflib.SequenceMatcher(None, a.split(), b.split(), autojunk=False).ratio()
