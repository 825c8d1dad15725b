"""Each exercise's visible check judged apart, while ``grading.batch`` grades the submission.

The batch's ``grade_one`` decides the points (the gradebook's grade is exactly ``make grade``'s).
What a student may see before the due date is the check of the released notebook alone: so at
each graded cell, before the batch judges the whole cell, ``Observed`` judges the cell's visible
calls (those in its released source) on the same waiting process, under the same judging lock.
Whether the hidden tests passed then follows: the whole cell passed.
"""

import threading
from dataclasses import replace

from ..course import Lesson, check_calls
from ..grading.results import ExerciseResult
from ..grading.verdicts import judge_cell
from ..sandbox.client import Exchange, OnGraded, Runner


def visible_cell(cell):
    shown = set(check_calls(cell.source, cell.grade_id))
    return replace(cell, calls=tuple(call for call in cell.calls if call in shown))


class Observed:
    """A runner as ``grade_one`` uses it, which also keeps each graded cell's visible verdict
    (``visible``: grade_id -> ExerciseResult) for the submission it runs."""

    def __init__(self, runner: Runner, lesson: Lesson, judging: threading.Lock):
        self.runner, self.judging = runner, judging
        self.cells = {cell.grade_id: visible_cell(cell) for cell in lesson.cells}
        self.visible: dict[str, ExerciseResult] = {}

    @property
    def limits(self):
        return self.runner.limits

    def stop(self) -> None:
        self.runner.stop()

    def run(self, job: dict, on_graded: OnGraded):
        def observed(grade_id: str, exchange: Exchange) -> None:
            cell = self.cells.get(grade_id)
            if cell is not None and cell.calls and grade_id not in self.visible:
                with self.judging:
                    self.visible[grade_id] = judge_cell(cell, self._waiting(exchange))
            on_graded(grade_id, exchange)

        return self.runner.run(job, observed)

    def _waiting(self, exchange: Exchange) -> Exchange:
        """``exchange``, letting other workers judge while this student's code computes."""
        def waiting(request: bytes) -> list[bytes]:
            self.judging.release()
            try:
                return exchange(request)
            finally:
                self.judging.acquire()
        return waiting
