"""The table collect prints: one row per file of the download, and what became of it."""

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

OUTCOMES = ("collected", "renamed", "merged", "unchanged", "superseded", "unpacked", "ignored",
            "skipped")


@dataclass
class Row:
    """One line of the table: a file of the download and what became of it (for a student)."""

    file: str
    student: str = "-"
    lesson: str = "-"
    outcome: str = "skipped"
    details: list[str] = field(default_factory=list)
    submitted: str = ""

    def skip(self, reason: str) -> "Row":
        self.outcome = "skipped"
        self.details.insert(0, reason)
        return self

    def ignore(self, *reasons: str) -> "Row":
        self.outcome, self.details = "ignored", list(reasons)
        return self


@dataclass
class Collection:
    """What one collect did."""

    source: str
    format: str  # the format's label
    rows: list[Row]
    already: str | None = None  # when the download was collected before
    dry_run: bool = False

    @property
    def skipped(self) -> list[Row]:
        return [r for r in self.rows if r.outcome == "skipped"]

    def table(self) -> str:
        header = ("file", "student", "lesson", "outcome", "submitted", "details")
        lines = [(r.file, r.student, r.lesson, r.outcome, r.submitted, "; ".join(r.details))
                 for r in self.rows]
        widths = [max(len(str(x)) for x in column) for column in zip(header, *lines, strict=True)]
        widths[-1] = 0

        def line(cells) -> str:
            return "  ".join(str(x).ljust(w) for x, w in zip(cells, widths, strict=False)).rstrip()

        return "\n".join([line(header), line([*("-" * w for w in widths[:-1]), "-------"])]
                         + [line(cells) for cells in lines])

    def summary(self) -> str:
        if self.already:
            return f"{self.source} was collected before ({self.already}): nothing to do"
        counts = Counter(r.outcome for r in self.rows)
        students = {r.student for r in self.rows
                    if r.outcome in ("collected", "renamed", "merged")}
        parts = [f"{counts[o]} {o}" for o in OUTCOMES if counts[o]]
        text = (f"{self.source} ({self.format}): {', '.join(parts) or 'no files'}; "
                f"{len(students)} students' notebooks {'would be ' if self.dry_run else ''}"
                f"written")
        if self.skipped:
            text += (f"\n{len(self.skipped)} skipped: those students are NOT collected; see "
                     f"the reasons above")
        return text


def short(time: datetime | None) -> str:
    """A time as the table shows it."""
    return time.strftime("%Y-%m-%d %H:%M UTC") if time else ""
