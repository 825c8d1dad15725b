"""Per-student feedback: one small self-contained HTML page per graded submission.

Pages go to feedback/<student>/<lesson>/<lesson>.html, nbgrader's feedback layout, with the
``timestamp.txt`` and ``submission_secret.txt`` that `nbgrader release_feedback` reads beside
each page, so that it hands them out through the exchange and the student's
`nbgrader fetch_feedback` finds them: both are the submission's own (from the exchange, as
collect kept them) where known; otherwise the time is the submission's time in the gradebook
(else the time the page was written) and the secret a new random one, kept from then on.

A page, laid out by templates/feedback.html.j2, shows the score, the outcome and, for each
exercise, its points and the checker's diagnosis; it holds nothing but what the result and the
gradebook say: the points are the gradebook's (a score the instructor set wins), a held
submission says its grade is set by the instructor, and a late one shows its penalty.
"""

import uuid
from datetime import UTC, datetime
from pathlib import Path

from ..grading.results import ExerciseResult, Outcome, Result
from ..records.standings import Standing, Standings
from ..timestamps import nbgrader_time
from ..workspace import EXCHANGE_FILES
from .render import format_points, render

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


def grade_notes(standing: Standing) -> list[str]:
    """What the gradebook adds to the automatic result, as sentences for the student."""
    notes = []
    if standing.overridden:
        notes.append("Your instructor set the score of this lesson.")
    elif standing.needs_manual_grade:
        notes.append("Your instructor will set the grade of this lesson; it counts 0 until then.")
    if standing.lateness.late:
        penalty = (f": {format_points(standing.penalty)} point(s) taken off"
                   if standing.penalty else "")
        notes.append(f"Submitted {standing.lateness.text()}{penalty}.")
    return notes


def feedback_html(result: Result, standing: Standing) -> str:
    """The feedback page for one student's submission of one lesson, as the gradebook holds it
    (``standing``)."""
    points = {e.grade_id: (standing.cells[e.grade_id].score if e.grade_id in standing.cells
                           else e.points) for e in result.exercises}
    return render(
        "feedback.html.j2", result=result, graded=result.outcome is Outcome.GRADED,
        explanation=OUTCOME_EXPLANATIONS.get(result.outcome, ""), score=standing.final,
        notes=grade_notes(standing),
        exercises=[(exercise, diagnosis(exercise, result), points[exercise.grade_id])
                   for exercise in result.exercises])


def path_part(name: str) -> str:
    """`name` if it is safe as a single folder or file name, else ValueError."""
    if name in ("", ".", "..") or "/" in name or "\\" in name:
        raise ValueError(f"not usable as a folder name: {name!r}")
    return name


def write_feedback(results: list[Result], feedback_dir: Path, standings: Standings,
                   submitted: Path | None = None) -> list[Path]:
    """Write feedback_dir/<student>/<lesson>/<lesson>.html for every result the gradebook
    holds (``standings``), with the files `nbgrader release_feedback` needs (from
    ``submitted``/<student>/<lesson>/ when there). Return the pages' paths."""
    paths = []
    for result in results:
        standing = standings.get((result.student, result.lesson))
        if standing is None:
            continue
        student, lesson = path_part(result.student), path_part(result.lesson)
        path = Path(feedback_dir) / student / lesson / f"{lesson}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(feedback_html(result, standing).encode("utf-8"))
        source = Path(submitted) / student / lesson if submitted is not None else None
        _exchange_files(path.parent, source, standing)
        paths.append(path)
    return paths


def _exchange_files(folder: Path, source: Path | None, standing: Standing) -> None:
    """timestamp.txt and submission_secret.txt beside a page (nbgrader's feedback layout)."""
    for name in EXCHANGE_FILES:
        if source is not None and (source / name).is_file() and not (source / name).is_symlink():
            (folder / name).write_bytes((source / name).read_bytes())
    if not (folder / "timestamp.txt").is_file():
        when = standing.timestamp or datetime.now(UTC)
        (folder / "timestamp.txt").write_text(nbgrader_time(when))
    if not (folder / "submission_secret.txt").is_file():
        (folder / "submission_secret.txt").write_text(uuid.uuid4().hex)
