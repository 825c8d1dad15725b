"""What grading says about one submission: its outcome, and points per graded cell.

A ``Result`` is written to results/<student>/<lesson>.json, put in the gradebook, and read back
by feedback, the report and the tests. ``needs_human`` is the one rule for what an instructor
must look at: a submission that could not be graded, or one whose kernel showed tampering.
"""

import json
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum


def printable(text: str) -> str:
    """``text`` as any file, page or database takes it: what cannot be written as UTF-8 (a lone
    surrogate in a student's exception message or file name, say) becomes "?"."""
    return text.encode("utf-8", "replace").decode("utf-8")


def exercise_name(grade_id: str) -> str:
    """The exercise a graded cell checks: ``check_softmax`` -> ``softmax``."""
    return grade_id.removeprefix("check_")


class Outcome(StrEnum):
    GRADED = "graded"  # every graded cell judged (points may be 0)
    UNGRADABLE = "ungradable"  # the file could not be read as this lesson's notebook
    TIMED_OUT = "timed out"  # a cell would not stop, or the submission ran past its budget
    CRASHED = "crashed"  # the kernel died, or its record could not be read


@dataclass(frozen=True)
class ExerciseResult:
    """One graded cell: its points and what the check said."""

    grade_id: str
    points: float
    max_points: float
    passed: bool
    message: str
    mistake: str | None = None  # the catalogued mistake(s) named, joined by " + "

    @property
    def name(self) -> str:
        return exercise_name(self.grade_id)


@dataclass(frozen=True)
class Result:
    """One student's submission of one lesson, graded."""

    student: str
    lesson: str
    outcome: Outcome
    reason: str  # why it was not graded; empty when graded
    exercises: tuple[ExerciseResult, ...]
    max_score: float
    flags: tuple[str, ...] = ()  # what its source shows a human should look at
    seconds: float = 0.0
    answers: dict[str, str] = field(default_factory=dict)  # exercise -> its code as tokens

    @property
    def score(self) -> float:
        return sum(e.points for e in self.exercises)

    @property
    def needs_human(self) -> bool:
        return self.outcome is not Outcome.GRADED or bool(self.flags)

    @property
    def held(self) -> bool:
        """Flagged: its points wait for a human, who sets the grade in the gradebook."""
        return bool(self.flags)

    @property
    def counted_score(self) -> float:
        """The score the lesson counts with: 0 unless it was graded and nothing is flagged."""
        return self.score if self.outcome is Outcome.GRADED and not self.held else 0.0

    def to_json(self) -> str:
        data = asdict(self) | {"outcome": self.outcome.value, "score": self.score,
                               "needs_human": self.needs_human}
        return json.dumps(data, indent=1)

    def printable(self) -> "Result":
        """This result with every text in it writable (see ``printable``)."""
        exercises = tuple(replace(e, message=printable(e.message),
                                  mistake=e.mistake and printable(e.mistake))
                          for e in self.exercises)
        return replace(self, reason=printable(self.reason), exercises=exercises,
                       flags=tuple(printable(f) for f in self.flags),
                       answers={printable(k): printable(v) for k, v in self.answers.items()})

    @classmethod
    def from_dict(cls, data: dict) -> "Result":
        return cls(
            student=str(data["student"]), lesson=str(data["lesson"]),
            outcome=Outcome(data["outcome"]), reason=str(data.get("reason") or ""),
            exercises=tuple(ExerciseResult(**e) for e in data["exercises"]),
            max_score=float(data["max_score"]), flags=tuple(data.get("flags", ())),
            seconds=float(data.get("seconds", 0.0)),
            answers={str(k): str(v) for k, v in dict(data.get("answers", {})).items()})

    @classmethod
    def from_json(cls, text: str) -> "Result":
        return cls.from_dict(json.loads(text))


def not_graded(student: str, lesson: str, cells: list[tuple[str, float]], outcome: Outcome,
               reason: str, seconds: float = 0.0) -> Result:
    """The result of a submission that could not be graded: 0 points per cell, and why."""
    exercises = tuple(ExerciseResult(grade_id, 0.0, points, False, f"not graded: {reason}")
                      for grade_id, points in cells)
    return Result(student, lesson, outcome, reason, exercises,
                  sum(points for _, points in cells), seconds=round(seconds, 2))

