"""A synthetic class of any size as the gradebook would hold it, for the report: results and
standings built in memory (nothing graded), with the shapes a real class of hundreds has many
of: clusters of students sharing one answer (one large, several small), late submissions, held
and crashed ones, a student who handed in only a link, and a lesson nobody was assigned."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from grader.grading.results import ExerciseResult, Outcome, Result
from grader.records.lateness import Lateness
from grader.records.standings import CellGrade, Standing

LESSONS = {
    "01_first": [("check_a", 2.0), ("check_b", 3.0)],
    "02_second": [("check_c", 1.0), ("check_d", 1.5)],
    "03_unassigned": [("check_e", 1.0)],
}
ASSIGNED = ("01_first", "02_second")
DUE = datetime(2024, 3, 1, 12, tzinfo=UTC)
LINK_ONLY = "s0"  # handed in a link, no notebook


def answer(tag: str) -> str:
    """An answer long enough to be compared, different for every tag."""
    return " ".join(f"Name v{i % 5} Attribute {tag} Call" for i in range(6))


def answers_of(index: int, lesson: str) -> dict[str, str]:
    """Student ``index``'s answers: students 1-60 share one in 01_first, then clusters of 2 to 5
    every 20 students, everyone else their own."""
    if lesson == "01_first" and index <= 60:
        tag = "shared"
    elif index % 20 < (index // 20) % 4 + 2:
        tag = f"group{index // 20}"
    else:
        tag = f"own{index}"
    return {"a": answer(tag + lesson), "b": answer(tag + lesson + "b")}


def result(index: int, lesson: str) -> Result:
    student = f"s{index}"
    if index % 97 == 0:
        return Result(student, lesson, Outcome.CRASHED, "the kernel died", (), 5.0)
    exercises = tuple(ExerciseResult(grade_id, points * (index % 3 != 0), points,
                                     index % 3 != 0, "ok" if index % 3 else "wrong",
                                     None if index % 3 else "off by one")
                      for grade_id, points in LESSONS[lesson])
    flags = ("replaces torch.allclose",) if index % 50 == 0 else ()
    return Result(student, lesson, Outcome.GRADED, "", exercises,
                  sum(p for _, p in LESSONS[lesson]), flags, answers=answers_of(index, lesson))


def standing(result: Result, index: int) -> Standing:
    cells = {e.grade_id: CellGrade(e.points, None, None, e.points, e.max_points)
             for e in result.exercises}
    days = index % 4
    late = Lateness(DUE, DUE + timedelta(days=days, hours=-1 if days == 0 else 1), days=days,
                    share=0.1 * days)
    return Standing(result.student, result.lesson, result.counted_score, result.max_score,
                    cells, result.needs_human, late, late.penalty(result.counted_score,
                                                                  result.max_score))


@dataclass
class LargeClass:
    results: list[Result]
    standings: dict[tuple[str, str], Standing]
    no_notebook: dict[tuple[str, str], str]


def large_class(students: int = 300) -> LargeClass:
    """``students`` students (s1 ...), each with both assigned lessons, and s0 with a link."""
    results = [result(index, lesson) for index in range(1, students + 1) for lesson in ASSIGNED]
    standings = {(r.student, r.lesson): standing(r, int(r.student[1:])) for r in results}
    no_notebook = {(LINK_ONLY, "02_second"): "no notebook submitted: a link (Canvas website "
                                             "URL submission)"}
    return LargeClass(results, standings, no_notebook)
