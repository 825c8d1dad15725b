"""Answers that look alike: pairs of students of one lesson whose answers are the same code up
to renaming, and the clusters they form (a section of the class report; every pair goes to
alike.csv beside it).

In a large class the pairs are many (thirty students sharing one answer make 435 pairs), so the
report shows clusters: the students linked by alike pairs in one lesson, the answers they share
and one of those answers, the largest first.

Each answer is compared as tokens that renaming does not change (``inspection.answer_tokens``).
Alike answers are not proof of copying: short exercises have few good solutions, so only
answers long enough to tell are compared, and a pair needs two at least.
"""

import difflib
import itertools
from collections import defaultdict
from typing import NamedTuple

from ..grading.results import Result
from .order import natural, naturally

SIMILAR = 0.95  # token similarity from which two answers count as near-identical
SHORTEST_COMPARED = 12  # tokens (as inspection's): shorter answers look alike whenever right
FUZZY_UP_TO = 200  # submissions of a lesson compared pairwise; above, only identical answers
ANSWER_CHARS = 400  # of the answer a cluster shows


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


class AlikeCluster(NamedTuple):
    lesson: str
    students: tuple[str, ...]  # in natural order
    exercises: tuple[str, ...]  # the answers every one of them has alike
    similarity: float  # the lowest of its pairs
    answer: str  # one of the shared answers, as compared (renaming aside), cut short


def alike_clusters(pairs: list[AlikePair], results: list[Result]) -> list[AlikeCluster]:
    """The students that alike pairs link, per lesson (connected by any chain of pairs), the
    largest cluster first."""
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def root(node):
        while parent.setdefault(node, node) != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for pair in pairs:
        first, second = ((pair.lesson, s) for s in pair.students)
        parent[root(first)] = root(second)
    members: dict[tuple[str, str], list[str]] = defaultdict(list)
    for node in parent:
        members[root(node)].append(node[1])
    lowest: dict[tuple[str, str], float] = {}
    for pair in pairs:
        key = root((pair.lesson, pair.students[0]))
        lowest[key] = min(lowest.get(key, 1.0), pair.similarity)
    answers = {(r.lesson, r.student): _compared(r.answers) for r in results}
    clusters = [_cluster(key[0], naturally(students), lowest[key], answers)
                for key, students in members.items()]
    return sorted(clusters, key=lambda c: (-len(c.students), -c.similarity, c.lesson,
                                           [natural(s) for s in c.students]))


def _cluster(lesson: str, students: list[str], similarity: float,
             answers: dict[tuple[str, str], dict[str, str]]) -> AlikeCluster:
    shared = set.intersection(*(set(answers.get((lesson, s), {})) for s in students))
    exercises = tuple(sorted(shared))
    answer = answers.get((lesson, students[0]), {}).get(exercises[0], "") if exercises else ""
    if len(answer) > ANSWER_CHARS:
        answer = answer[:ANSWER_CHARS].rsplit(" ", 1)[0] + " ..."
    return AlikeCluster(lesson, tuple(students), exercises, similarity, answer)


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
