"""Due dates, extensions and the late policy of one run of the course, and how late a submission
is.

They live in the workspace's course file, ``course.toml`` (absent: no due dates, no penalty);
its reference, every key with its default, is ``docs/instructors/due-dates.md``. ``grade`` and
``refresh`` write its due dates and extensions into nbgrader's gradebook (the assignment's
``duedate``, the submission's ``extension``), where the formgrader shows them; a lesson or a
student the file does not name keeps what the gradebook has (a due date set in the formgrader).
How late a submission is comes from the gradebook: nbgrader's due date of the submission (its
extension included) and its time, the ``timestamp.txt`` collect wrote; where no time is known,
the LMS's own verdict, the LATE marker collect kept. A penalty never takes more than the points
a submission has.
"""

import math
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from ..timestamps import as_utc, parse_time
from ..workspace import Workspace

COURSE_FILE = "course.toml"
DAY = timedelta(days=1)


class CourseFileError(ValueError):
    """course.toml cannot be read; the message says where and why."""


@dataclass(frozen=True)
class LatePolicy:
    penalty_per_day: float = 0.0
    max_penalty: float = 1.0
    grace: timedelta = timedelta(0)
    days_when_time_unknown: int = 1


@dataclass(frozen=True)
class CourseFile:
    """What course.toml says (everything optional)."""

    due: dict[str, datetime] = field(default_factory=dict)  # lesson -> due date, UTC
    extensions: dict[tuple[str, str], timedelta] = field(default_factory=dict)  # (student, lesson)
    late: LatePolicy = LatePolicy()
    canvas: dict[str, str] = field(default_factory=dict)  # lesson -> Canvas column title

    @classmethod
    def read(cls, workspace: Workspace) -> "CourseFile":
        path = workspace.course_file
        if not path.is_file():
            return cls()
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            raise CourseFileError(f"{path}: {err}") from None
        return cls.parse(data, str(path))

    @classmethod
    def parse(cls, data: dict, where: str = COURSE_FILE) -> "CourseFile":
        unknown = set(data) - {"due", "extensions", "late", "canvas"}
        if unknown:
            raise CourseFileError(f"{where}: unknown section(s) {sorted(unknown)}; known: due, "
                                  f"extensions, late, canvas")
        due = {str(lesson): _utc(value, f"{where} [due] {lesson}")
               for lesson, value in _table(data, "due", where).items()}
        extensions = {}
        for student, lessons in _table(data, "extensions", where).items():
            if not isinstance(lessons, dict):
                raise CourseFileError(f"{where} [extensions] {student}: expected "
                                      f"{{ lesson = days, ... }}")
            for lesson, days in lessons.items():
                extensions[str(student), str(lesson)] = timedelta(
                    days=_number(days, f"{where} [extensions] {student}.{lesson}"))
        late = _table(data, "late", where)
        unknown = set(late) - {"penalty_per_day", "max_penalty", "grace_minutes",
                               "days_when_time_unknown"}
        if unknown:
            raise CourseFileError(f"{where} [late]: unknown key(s) {sorted(unknown)}")
        policy = LatePolicy(
            penalty_per_day=_number(late.get("penalty_per_day", 0.0), f"{where} penalty_per_day"),
            max_penalty=_number(late.get("max_penalty", 1.0), f"{where} max_penalty"),
            grace=timedelta(minutes=_number(late.get("grace_minutes", 0), f"{where} grace")),
            days_when_time_unknown=int(_number(late.get("days_when_time_unknown", 1),
                                               f"{where} days_when_time_unknown")))
        canvas = {str(k): str(v) for k, v in _table(data, "canvas", where).items()}
        return cls(due, extensions, policy, canvas)


def _table(data: dict, name: str, where: str) -> dict:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise CourseFileError(f"{where}: [{name}] must be a table")
    return value


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise CourseFileError(f"{where}: expected a number >= 0, got {value!r}")
    return float(value)


def _utc(value, where: str) -> datetime:
    """A TOML date-time, date or string as an aware UTC datetime (no zone: UTC; a bare date:
    the end of that day)."""
    if isinstance(value, str):
        parsed = parse_time(value)
        if parsed is None:
            raise CourseFileError(f"{where}: not a date and time: {value!r}")
        return parsed
    if isinstance(value, datetime):
        return as_utc(value)
    if isinstance(value, date):
        return datetime.combine(value, time(23, 59, 59), UTC)
    raise CourseFileError(f"{where}: not a date and time: {value!r}")


# -- how late ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Lateness:
    """How late one submission is, and what that costs under the course's policy."""

    due: datetime | None  # the student's due date, extension included
    submitted: datetime | None
    marker: bool = False  # the LMS said late and gave no time
    days: int = 0  # the days counted for the penalty (every started day)
    share: float = 0.0  # of the lesson's points

    @property
    def late(self) -> bool:
        return self.days > 0

    def penalty(self, score: float, max_score: float) -> float:
        """Points taken: the share of the lesson's points, never more than the score."""
        return round(min(max(score, 0.0), self.share * max_score), 4)

    def text(self) -> str:
        """"on time", "2 days late", "late (time unknown)", or "" when nothing is known."""
        if self.marker and self.late:
            return "late (LMS; time unknown)"
        if self.late:
            return f"{self.days} day{'s' if self.days != 1 else ''} late"
        if self.due is not None and self.submitted is not None:
            return "on time"
        return ""


def lateness(due: datetime | None, submitted: datetime | None, marker: bool,
             policy: LatePolicy) -> Lateness:
    """How late a submission made at ``submitted`` is against ``due``, the student's own due
    date (nbgrader's ``SubmittedAssignment.duedate``: the lesson's, plus the extension); the
    LMS's LATE marker counts only where the time or the due date is unknown."""
    due, submitted = as_utc(due), as_utc(submitted)
    if due is not None and submitted is not None:
        over = submitted - due
        days = math.ceil(over / DAY) if over > policy.grace else 0
        return Lateness(due, submitted, False, days, _share(days, policy))
    if marker:
        days = max(1, policy.days_when_time_unknown)
        return Lateness(due, submitted, True, days, _share(days, policy))
    return Lateness(due, submitted)


def _share(days: int, policy: LatePolicy) -> float:
    return min(policy.max_penalty, days * policy.penalty_per_day) if days > 0 else 0.0


def course_policy(workspace: Workspace) -> CourseFile:
    """The course file, or SystemExit saying what is wrong with it."""
    try:
        return CourseFile.read(workspace)
    except CourseFileError as err:
        raise SystemExit(f"course file: {err}") from None
