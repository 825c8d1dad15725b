"""Per-student feedback: one small self-contained HTML page per graded submission.

Pages go to feedback/<student>/<lesson>/<lesson>.html, nbgrader's feedback layout, so that
`nbgrader release_feedback` can hand them out. A page, laid out by templates/feedback.html.j2,
shows the score, the outcome and, for each exercise, its points and the checker's diagnosis; it
holds nothing but what the result says.
"""

from pathlib import Path

from .report import render
from .results import ExerciseResult, Outcome, Result

OUTCOME_EXPLANATIONS = {
    Outcome.UNGRADABLE: "Your notebook could not be graded.",
    Outcome.TIMED_OUT: "Your notebook took too long to run, so it could not be graded.",
    Outcome.CRASHED: "Your notebook could not be run to the end, so it could not be graded.",
}


def diagnosis(exercise: ExerciseResult, result: Result) -> str:
    """The message to show under a failed exercise: "" if none, or if the submission was not
    graded (the page says why once, above the exercises)."""
    if exercise.passed or result.outcome is not Outcome.GRADED:
        return ""
    return exercise.message


def feedback_html(result: Result) -> str:
    """The feedback page for one student's submission of one lesson."""
    return render(
        "feedback.html.j2", result=result, graded=result.outcome is Outcome.GRADED,
        explanation=OUTCOME_EXPLANATIONS.get(result.outcome, ""),
        exercises=[(exercise, diagnosis(exercise, result)) for exercise in result.exercises])


def path_part(name: str) -> str:
    """`name` if it is safe as a single folder or file name, else ValueError."""
    if name in ("", ".", "..") or "/" in name or "\\" in name:
        raise ValueError(f"not usable as a folder name: {name!r}")
    return name


def write_feedback(results: list[Result], feedback_dir: Path) -> list[Path]:
    """Write feedback_dir/<student>/<lesson>/<lesson>.html for every result; return the paths."""
    paths = []
    for result in results:
        student, lesson = path_part(result.student), path_part(result.lesson)
        path = Path(feedback_dir) / student / lesson / f"{lesson}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(feedback_html(result).encode("utf-8"))
        paths.append(path)
    return paths
