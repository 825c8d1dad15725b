"""What students see before a lesson's due date, and how often they may be graded: the
workspace's ``watch.toml`` (absent: the defaults).

    [default]
    before_due = "visible"   # "visible": the checks of the notebook only;
                             # "hidden": also whether the hidden tests passed
    per_hour = 4             # graded per student and lesson and hour, before the due date

    [lessons.02_scaled_dot_product]
    before_due = "hidden"
    per_hour = 2

Never shown before the due date: the score, the hidden tests' code, inputs or diagnosis. After
the due date (course.toml's, with the student's extension) every page is the full feedback of
``make feedback``.
"""

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

FILE_NAME = "watch.toml"
VIEWS = ("visible", "hidden")
KEYS = {"before_due", "per_hour"}


class SettingsError(ValueError):
    """watch.toml cannot be used; the message says where and why."""


@dataclass(frozen=True)
class LessonSettings:
    before_due: str = "visible"
    per_hour: int = 4


@dataclass(frozen=True)
class WatchSettings:
    default: LessonSettings = LessonSettings()
    lessons: dict[str, LessonSettings] = field(default_factory=dict)

    def of(self, lesson: str) -> LessonSettings:
        return self.lessons.get(lesson, self.default)

    @classmethod
    def read(cls, workspace_root: Path, known_lessons: list[str]) -> "WatchSettings":
        path = Path(workspace_root) / FILE_NAME
        if not path.is_file():
            return cls()
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            raise SettingsError(f"{path}: {err}") from None
        return cls.parse(data, known_lessons, str(path))

    @classmethod
    def parse(cls, data: dict, known_lessons: list[str], where: str = FILE_NAME
              ) -> "WatchSettings":
        unknown = set(data) - {"default", "lessons"}
        if unknown:
            raise SettingsError(f"{where}: unknown section(s) {sorted(unknown)}; known: "
                                f"default, lessons")
        default = _lesson(LessonSettings(), data.get("default", {}), f"{where} [default]")
        lessons = {}
        for lesson, table in _table(data.get("lessons", {}), f"{where} [lessons]").items():
            if lesson not in known_lessons:
                raise SettingsError(f"{where} [lessons.{lesson}]: not a lesson of the course "
                                    f"({', '.join(known_lessons)})")
            lessons[lesson] = _lesson(default, table, f"{where} [lessons.{lesson}]")
        return cls(default, lessons)


def _table(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise SettingsError(f"{where}: must be a table")
    return value


def _lesson(base: LessonSettings, table, where: str) -> LessonSettings:
    table = _table(table, where)
    if unknown := set(table) - KEYS:
        raise SettingsError(f"{where}: unknown key(s) {sorted(unknown)}; known: "
                            f"{', '.join(sorted(KEYS))}")
    view = table.get("before_due", base.before_due)
    if view not in VIEWS:
        raise SettingsError(f"{where}: before_due must be one of {', '.join(VIEWS)}, got "
                            f"{view!r}")
    per_hour = table.get("per_hour", base.per_hour)
    if isinstance(per_hour, bool) or not isinstance(per_hour, int) or per_hour < 1:
        raise SettingsError(f"{where}: per_hour must be a whole number >= 1, got {per_hour!r}")
    return replace(base, before_due=view, per_hour=per_hour)
