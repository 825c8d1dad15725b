"""What one autograder zip is built for: its lesson and when students see which test.

Saved in the zip as ``gradescope.json`` and read by ``run``. Each exercise gives one test for
the check a student runs in the notebook (``visible`` by default: its output is the same
diagnosis the notebook gives) and, where the exercise has hidden tests, one for them
(``after_due_date`` by default), which carries the exercise's points. Gradescope's values:
``visible``, ``after_due_date``, ``after_published``, ``hidden``.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

VISIBILITIES = ("visible", "after_due_date", "after_published", "hidden")
FILE_NAME = "gradescope.json"


class SettingsError(ValueError):
    """Settings that Gradescope or this course would not accept; the message says which."""


@dataclass(frozen=True)
class Settings:
    lesson: str
    visible_checks: str = "visible"  # the check in the notebook, as the student ran it
    hidden_tests: str = "after_due_date"  # the hidden tests, and the points
    cell_timeout: float = 120.0  # seconds one cell may run
    budget: float = 480.0  # seconds the whole submission may run (Gradescope stops at 600)

    def __post_init__(self):
        for name in ("visible_checks", "hidden_tests"):
            if getattr(self, name) not in VISIBILITIES:
                raise SettingsError(f"{name}: {getattr(self, name)!r} is not one of Gradescope's "
                                    f"visibilities ({', '.join(VISIBILITIES)})")
        if not 0 < self.cell_timeout <= self.budget:
            raise SettingsError("the cell timeout must be positive and within the budget")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"

    @classmethod
    def read(cls, folder: Path) -> "Settings":
        try:
            return cls(**json.loads((folder / FILE_NAME).read_text()))
        except (OSError, ValueError, TypeError) as err:
            raise SettingsError(f"{folder / FILE_NAME}: {err}") from None
