"""The results.json Gradescope reads, from a graded notebook (the fields of its specification:
``docs/specs.md`` of ``gradescope/autograder_samples``).

One test per exercise for the check in the notebook, its output the diagnosis the student's
own check cell gives; where the exercise has hidden tests, one more test for them, which carries
the exercise's points (the visible one then carries none). Visibilities come from the zip's
settings. The top-level score is the sum, as ``python -m grader grade`` scores it; the top-level
output says which file was graded and, when nothing could be, why, in words a student can act
on. What the source shows a human should look at goes in ``extra_data``, which students never
see.
"""

from ..grading.results import Outcome, exercise_name, printable
from .finding import Found
from .grading import Exercise, Graded
from .settings import Settings

PASSED_HIDDEN = "ok: the hidden tests passed"


def results(found: Found, graded: Graded | None, settings: Settings, lesson_points,
            seconds: float) -> dict:
    """results.json for a submission; ``graded`` is None when no notebook was found
    (``found.problem`` says why). ``lesson_points``: (grade_id, points) of every graded cell."""
    if graded is not None and graded.outcome is Outcome.GRADED:
        tests = [test for exercise in graded.exercises
                 for test in exercise_tests(exercise, settings)]
        score, extra = graded.score, {"outcome": graded.outcome.value,
                                      "flags": list(graded.flags)}
    else:
        reason = found.problem if graded is None else f"{graded.outcome.value}: {graded.reason}"
        tests = [test_entry(exercise_name(grade_id), 0.0, points, f"not graded: {reason}",
                            settings.visible_checks) for grade_id, points in lesson_points]
        score, extra = 0.0, {"outcome": "no notebook" if graded is None
                             else graded.outcome.value, "flags": []}
    return {"score": score, "execution_time": max(1, round(seconds)),
            "output": printable(summary(found, graded)), "tests": tests, "extra_data": extra}


def exercise_tests(exercise: Exercise, settings: Settings) -> list[dict]:
    name = exercise_name(exercise.grade_id)
    if exercise.hidden is None:
        return [test_entry(name, exercise.score, exercise.points, exercise.visible.message,
                           settings.visible_checks)]
    hidden_output = PASSED_HIDDEN if exercise.hidden.passed else exercise.hidden.message
    return [test_entry(f"{name}: the check in the notebook", 0.0, 0.0,
                       exercise.visible.message, settings.visible_checks),
            test_entry(f"{name}: hidden tests", exercise.score, exercise.points, hidden_output,
                       settings.hidden_tests)]


def test_entry(name: str, score: float, max_score: float, output: str, visibility: str) -> dict:
    return {"name": name, "score": score, "max_score": max_score,
            "output": printable(output), "visibility": visibility}


def summary(found: Found, graded: Graded | None) -> str:
    if graded is None:
        return f"Nothing was graded: {found.problem}."
    lines = [found.note] if found.note else []
    if graded.outcome is Outcome.GRADED:
        lines.append(f"Graded {found.name}.")
    else:
        lines.append(f"{found.name} could not be graded ({graded.outcome.value}): "
                     f"{graded.reason}")
    return "\n".join(lines)
