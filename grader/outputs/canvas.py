"""canvas.csv: the grades as Canvas's gradebook import reads them (Grades > Import)."""

from collections.abc import Mapping
from pathlib import Path

from ..intake.manifest import Collected
from ..records.standings import Standings
from .order import naturally
from .render import format_points
from .report import Lessons, lesson_order, write_csv

CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


def canvas_rows(grades: Standings, lessons: Lessons, collected: Collected,
                titles: Mapping[str, str] | None = None, assigned=()) -> list[list[str]]:
    """Canvas's gradebook import: Student, ID (the Canvas user id collect recorded), SIS User ID
    (the course's student id, where it is not the Canvas id), SIS Login ID, Section, then one
    column per assigned lesson (titled as ``titles`` says, else by its name), a "Points Possible"
    row, and a row per student. A lesson not submitted, or held for a human who has not set its
    grade yet, is left blank: Canvas then keeps what it has."""
    titles = titles or {}
    names = lesson_order(lessons, grades, assigned)
    rows = [[*CANVAS_COLUMNS, *(titles.get(n, n) for n in names)],
            ["Points Possible", "", "", "", "",
             *(format_points(sum(p for _, p in lessons.get(n, ()))) for n in names)]]
    for student in naturally({student for student, _ in grades}):
        canvas_id = collected.canvas_ids.get(student, "")
        cells = []
        for lesson in names:
            g = grades.get((student, lesson))
            pending = g is not None and g.needs_manual_grade and not g.overridden
            cells.append("" if g is None or pending else format_points(g.final))
        rows.append([collected.names.get(student, student), canvas_id,
                     student if student != canvas_id else "", "", "", *cells])
    return rows


def write_canvas_csv(path: Path, grades: Standings, lessons: Lessons, collected: Collected,
                     titles: Mapping[str, str] | None = None, assigned=()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_csv(path, canvas_rows(grades, lessons, collected, titles, assigned))
