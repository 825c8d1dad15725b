"""One notebook graded with the same checks as ``python -m grader grade``, each exercise's
visible check judged apart from its hidden tests.

The notebook is planned and run exactly as ``grading.batch`` runs it (``submissions.plan``, a
warm runner, the checks judged here in the trusted process), and an exercise scores its points
when every check call of its graded cell passes, as there. The only difference is the split: the
calls the student sees in the released notebook and the hidden ones are judged as two groups, so
that Gradescope can show the first at once and the second after the due date.
"""

from dataclasses import dataclass, replace

from attention_course import lessons as registry

from ..course import GradedCell, Lesson, check_calls
from ..grading.inspection import inspect_submission
from ..grading.results import ExerciseResult, Outcome
from ..grading.submissions import Ungradable, parse_notebook, plan
from ..grading.verdicts import Unreadable, judge_cell
from ..sandbox import package
from ..sandbox.client import Exchange, Runner, RunnerDied


@dataclass(frozen=True)
class Exercise:
    """One graded cell: the verdict on the check the student sees, and on the hidden tests
    (None when the cell has none)."""

    grade_id: str
    points: float
    visible: ExerciseResult
    hidden: ExerciseResult | None

    @property
    def passed(self) -> bool:
        return self.visible.passed and (self.hidden is None or self.hidden.passed)

    @property
    def score(self) -> float:
        return self.points if self.passed else 0.0


@dataclass(frozen=True)
class Graded:
    """The notebook's outcome (``reason`` says why when it was not graded), its exercises, and
    what its source shows a human should look at."""

    outcome: Outcome
    reason: str
    exercises: tuple[Exercise, ...] = ()
    flags: tuple[str, ...] = ()

    @property
    def score(self) -> float:
        return sum(exercise.score for exercise in self.exercises)


def grade_notebook(data: bytes, name: str, lesson: Lesson, runner: Runner) -> Graded:
    """Grade the notebook ``data`` (the file ``name``) of ``lesson`` on ``runner``; never
    raises for the student's sake."""
    try:
        notebook = parse_notebook(data, name)
        steps = plan(notebook, lesson)
    except Ungradable as err:
        return Graded(Outcome.UNGRADABLE, str(err))
    expected = [step["grade_id"] for step in steps if step["kind"] == "graded"]
    cells = {cell.grade_id: cell for cell in lesson.cells}
    judged: dict[str, Exercise] = {}

    def on_graded(grade_id: str, exchange: Exchange) -> None:
        if len(judged) == len(expected) or grade_id != expected[len(judged)]:
            raise RunnerDied(f"the kernel stopped at {grade_id[:60]!r}, not at the next graded "
                             f"cell")
        judged[grade_id] = judge_exercise(cells[grade_id], exchange)

    try:
        job = runner.limits.job(steps, package.modules(registry.lesson(lesson.name)))
        answer, _ = runner.run(job, on_graded)
    except Unreadable as err:
        runner.stop()
        return Graded(Outcome.UNGRADABLE, f"ungradable record: {err}")
    if answer["status"] != "finished":
        return Graded(Outcome(answer["status"]), answer["reason"])
    return Graded(Outcome.GRADED, "", tuple(judged[cell.grade_id] for cell in lesson.cells),
                  tuple(inspect_submission(notebook, lesson)))


def judge_exercise(cell: GradedCell, exchange: Exchange) -> Exercise:
    """The cell's visible calls (those of its released source), then its hidden ones."""
    shown = set(check_calls(cell.source, cell.grade_id))
    visible = tuple(call for call in cell.calls if call in shown)
    hidden = tuple(call for call in cell.calls if call not in shown)
    verdicts = [judge_cell(replace(cell, calls=calls), exchange) if calls else None
                for calls in (visible, hidden)]
    if verdicts[0] is None:  # every call hidden: the hidden verdict stands for both
        verdicts[0] = verdicts[1]
    return Exercise(cell.grade_id, cell.points, verdicts[0], verdicts[1])
