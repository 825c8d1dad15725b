"""The class report: grades.csv for the LMS and one self-contained report.html with plots.

Both are read from the gradebook, the one source of truth: the standings (``records.standings``:
what each submission counts with, a score a human set winning, the late penalty taken off) and the
newest result of each submission (its exercises, diagnoses and flags). The CSV has a row per
student the gradebook holds and, for each lesson with a due date or a late submission, how late
each student was and the penalty; the page adds the statistics a teacher acts on (scores per
lesson, pass rate per exercise, the most frequent named mistakes), what needs a human, answers that
look alike, scores set by hand and lateness. Students are listed in natural order (s2 before s10),
with those who handed in no notebook (collect's manifest) shown missing; only the lessons that were
assigned (a submission, a due date) have columns and plots. Answers that look alike are shown as
clusters, the largest first and ``SHOWN_CLUSTERS`` at most, every pair in alike.csv; every section
is linked from the top of the page. The page is laid out by templates/report.html.j2; it embeds its
plots as PNG data URIs and loads nothing from anywhere.

Every CSV the grader writes goes through ``write_csv``, which keeps a spreadsheet from running
any cell as a formula (OWASP's rule against CSV injection): a student's name or id from an LMS
that starts with ``=``, ``+``, ``-``, ``@``, a tab, a carriage return or a NUL (after spaces,
too, and in their full-width forms) gets a single quote before it, so it is shown as the text
it is. A number the grader writes, a negative penalty included, is left a number.
"""

import csv
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from ..grading.results import Outcome, Result
from ..records.standings import Standing, Standings
from .alike import alike_clusters, alike_pairs
from .order import natural, naturally
from .plots import mistakes_figure, pass_rate_figure, png_data_uri, score_distribution_figure
from .render import format_points, render

Lessons = Mapping[str, Sequence[tuple[str, float]]]  # lesson -> [(grade_id, points)], in order
NoNotebook = Mapping[tuple[str, str], str]  # (student, lesson or "") -> what they handed in

TOP_MISTAKES = 15
SHOWN_CLUSTERS = 25  # clusters of alike answers the page shows; alike.csv has every pair


def lesson_order(lessons: Lessons, grades: Standings, assigned=()) -> list[str]:
    """The lessons that were assigned, in the course's order: those the gradebook holds a
    submission of and those in ``assigned`` (due dates, students without a notebook); then any
    other lesson the gradebook holds, sorted. A lesson nobody was assigned is left out."""
    held = {lesson for _, lesson in grades} | set(assigned)
    return [*(n for n in lessons if n in held), *sorted(held - set(lessons) - {""})]


def class_list(grades: Standings, no_notebook: NoNotebook | None = None) -> list[str]:
    """Every student the gradebook holds or who handed in no notebook, in natural order."""
    return naturally({student for student, _ in grades}
                     | {student for student, _ in no_notebook or {}})


# -- grades ----------------------------------------------------------------------------------------

def grade_rows(lessons: Lessons, grades: Standings, no_notebook: NoNotebook | None = None,
               assigned=()) -> list[list[str]]:
    """The grade table as text: a header, then student, one score per assigned lesson, total,
    for every student the gradebook holds or who handed in no notebook; then, for each lesson
    with a due date or a late submission, how late each student was and the penalty."""
    names = lesson_order(lessons, grades, assigned)
    timed = [n for n in names if any(lesson == n and (g.lateness.due or g.lateness.late)
                                     for (_, lesson), g in grades.items())]
    rows = [["student", *names, "total",
             *(f"{n} {what}" for n in timed for what in ("late", "penalty"))]]
    for student in class_list(grades, no_notebook):
        scores = [g.final if (g := grades.get((student, lesson))) else 0.0 for lesson in names]
        late = []
        for lesson in timed:
            g = grades.get((student, lesson))
            late += [g.lateness.text(), format_points(g.penalty)] if g else ["", ""]
        rows.append([student, *map(format_points, scores), format_points(sum(scores)), *late])
    return rows


FORMULA_STARTS = frozenset("=+-@\t\r\0＝＋－＠")  # what makes a cell a formula
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")  # as format_points writes one


def spreadsheet_text(cell: object) -> str:
    """A CSV cell that a spreadsheet shows and never runs (see the module docstring)."""
    text = str(cell)
    if NUMBER.fullmatch(text):
        return text
    starts = text[:1] + text.lstrip(" \n")[:1]
    return "'" + text if FORMULA_STARTS.intersection(starts) else text


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as file:
        csv.writer(file).writerows([spreadsheet_text(cell) for cell in row] for row in rows)
    return path


# -- statistics ------------------------------------------------------------------------------------

def exercise_ids(lesson: str, lessons: Lessons, lesson_results: list[Result]) -> list[str]:
    """A lesson's grade ids in notebook order, then any others its results name, sorted."""
    known = [grade_id for grade_id, _ in lessons.get(lesson, ())]
    seen = {e.grade_id for result in lesson_results for e in result.exercises}
    return [*known, *sorted(seen - set(known))]


def pass_rates(results: list[Result], names: list[str],
               lessons: Lessons) -> list[tuple[str, str, int, int]]:
    """(lesson, grade_id, passed, graded) for every exercise of a lesson with graded results."""
    rates = []
    for lesson in names:
        graded = [r for r in results if r.lesson == lesson and r.outcome is Outcome.GRADED]
        if not graded:
            continue
        for grade_id in exercise_ids(lesson, lessons, graded):
            passed = sum(any(e.grade_id == grade_id and e.passed for e in r.exercises)
                         for r in graded)
            rates.append((lesson, grade_id, passed, len(graded)))
    return rates


def split_mistakes(mistake: str | None) -> list[str]:
    """The mistakes one diagnosis names: "A + B" is A and B."""
    return [part.strip() for part in (mistake or "").split(" + ") if part.strip()]


def mistake_counts(results: list[Result]) -> list[tuple[str, int, Counter]]:
    """(mistake, times, {"lesson: exercise": times}), most frequent first."""
    where: dict[str, Counter] = defaultdict(Counter)
    for result in results:
        for exercise in result.exercises:
            for mistake in split_mistakes(exercise.mistake):
                where[mistake][f"{result.lesson}: {exercise.name}"] += 1
    counted = [(mistake, sum(places.values()), places) for mistake, places in where.items()]
    return sorted(counted, key=lambda item: (-item[1], item[0]))


def score_percents(grades: Standings, names: list[str]) -> dict[str, list[float]]:
    """Lesson -> every submission's score as a percentage of the lesson's maximum."""
    return {lesson: [100 * g.final / g.max_score if g.max_score else 0.0
                     for (_, name), g in sorted(grades.items()) if name == lesson]
            for lesson in names}


# -- page ------------------------------------------------------------------------------------------

class LessonCell(NamedTuple):
    """A student's score on a lesson as the students table shows it."""

    text: str
    missing: bool = False


def summary_counts(results: list[Result],
                   no_notebook: NoNotebook | None = None) -> list[tuple[str, int]]:
    """(title, count) for the summary table: students, submissions, each outcome, flagged, and
    those who handed in no notebook, if any."""
    outcomes = Counter(result.outcome for result in results)
    without = {student for student, _ in no_notebook or {}}
    return [("students", len({result.student for result in results} | without)),
            ("submissions", len(results)),
            *((outcome.value, outcomes[outcome]) for outcome in Outcome),
            ("flagged for a human (points held)", sum(result.held for result in results)),
            *([("no notebook submitted", len(no_notebook))] if no_notebook else [])]


def places_text(places: Counter) -> str:
    """Where a mistake was made: "lesson: exercise", with counts when there are several."""
    ranked = sorted(places.items(), key=lambda item: (-item[1], item[0]))
    if len(ranked) == 1:
        return ranked[0][0]
    return ", ".join(f"{place} ({times})" for place, times in ranked)


def needs_a_human_details(result: Result) -> str:
    """Why a human should look: the reason it was not graded, then what its source shows."""
    lines = [result.reason] if result.outcome is not Outcome.GRADED else []
    lines += [f"Flagged: {flag}" for flag in result.flags]
    return "\n".join(line for line in lines if line)


def flagged(results: list[Result]) -> list[tuple[Result, str]]:
    """(result, details) for every result that needs a human, by student and lesson."""
    chosen = sorted((r for r in results if r.needs_human),
                    key=lambda r: (natural(r.student), r.lesson))
    return [(result, needs_a_human_details(result)) for result in chosen]


def lesson_cell(result: Result | None, standing: Standing | None,
                instead: str | None = None) -> LessonCell:
    """A lesson as the gradebook holds it: what counts, and why it is not the automatic score
    (set by hand, not graded, held, late); ``instead``: why a student has no notebook."""
    if standing is None:
        return LessonCell(f"missing ({instead})" if instead else "missing", missing=True)
    why = []
    if standing.overridden:
        why.append("set by hand")
    elif result is not None and result.outcome is not Outcome.GRADED:
        why.append(result.outcome.value)
    elif result is not None and result.held:
        why.append(f"held: {format_points(result.score)}")
    if standing.lateness.late:
        why.append(standing.lateness.text() + (f": -{format_points(standing.penalty)}"
                                               if standing.penalty else ""))
    return LessonCell(format_points(standing.final) + (f" ({'; '.join(why)})" if why else ""))


def lateness_rows(grades: Standings) -> list[tuple[str, str, str, str, str, str]]:
    """(student, lesson, due, submitted, how late, penalty) of every submission with a due date
    or that was late, by student and lesson."""
    rows = []
    for (student, lesson), g in naturally(grades.items(), key=lambda item: item[0][0]):
        late = g.lateness
        if late.due is None and not late.late:
            continue
        rows.append((student, lesson, _when(late.due), _when(late.submitted),
                     late.text() or "time unknown", format_points(g.penalty)))
    return rows


def _when(value) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC") if value is not None else ""


def override_rows(results: list[Result], grades: Standings) -> list[tuple[str, str, str, str]]:
    """(student, lesson, automatic score, score set by hand) where a human set a score."""
    automatic = {(r.student, r.lesson): r for r in results}
    rows = []
    for (student, lesson), g in naturally(grades.items(), key=lambda item: item[0][0]):
        if g.overridden:
            result = automatic.get((student, lesson))
            auto = format_points(result.counted_score) if result is not None else ""
            if result is not None and result.held:
                auto += f" (held: {format_points(result.score)})"
            rows.append((student, lesson, auto, format_points(g.score)))
    return rows


def student_rows(results: list[Result], names: list[str], grades: Standings,
                 no_notebook: NoNotebook | None = None
                 ) -> list[tuple[str, list[LessonCell], str]]:
    """(student, a LessonCell per lesson, total) for every student the gradebook holds or who
    handed in no notebook (missing, with what they handed in instead)."""
    by_key = {(r.student, r.lesson): r for r in results}
    without = no_notebook or {}
    rows = []
    for student in class_list(grades, without):
        standing = [grades.get((student, lesson)) for lesson in names]
        cells = [lesson_cell(by_key.get((student, lesson)), g,
                             without.get((student, lesson)) or without.get((student, "")))
                 for lesson, g in zip(names, standing, strict=True)]
        total = sum(g.final for g in standing if g is not None)
        rows.append((student, cells, format_points(total)))
    return rows


def sections(results: list[Result], lessons: Lessons, grades: Standings,
             no_notebook: NoNotebook | None = None, assigned=()) -> dict:
    """What the report's sections show, plots as PNG data URIs; none when nothing was graded."""
    if not results:
        return {}
    names = lesson_order(lessons, grades, assigned)
    clusters = alike_clusters(alike_pairs(results), results)
    rates = pass_rates(results, names, lessons)
    mistakes = mistake_counts(results)[:TOP_MISTAKES]
    return {
        "lateness": lateness_rows(grades),
        "overrides": override_rows(results, grades),
        "distribution_plot": png_data_uri(score_distribution_figure(
            score_percents(grades, names))),
        "pass_rate_plot": png_data_uri(pass_rate_figure(rates)) if rates else None,
        "mistakes_plot": png_data_uri(mistakes_figure(mistakes)) if mistakes else None,
        "mistakes": [(mistake, times, places_text(places)) for mistake, times, places in mistakes],
        "flagged": flagged(results),
        "alike": clusters[:SHOWN_CLUSTERS],
        "alike_clusters": len(clusters),
        "lessons": names,
        "students": student_rows(results, names, grades, no_notebook),
    }


def report_html(results: list[Result], lessons: Lessons, grades: Standings,
                no_notebook: NoNotebook | None = None, assigned=()) -> str:
    """The whole report page."""
    return render("report.html.j2", summary=summary_counts(results, no_notebook),
                  sections=sections(results, lessons, grades, no_notebook, assigned))


def alike_rows(results: list[Result]) -> list[list[str]]:
    """alike.csv: every pair of students whose answers look alike, by lesson."""
    return [["lesson", "student", "other student", "exercises alike", "similarity"],
            *([p.lesson, *p.students, str(p.alike), f"{p.similarity:.2f}"]
              for p in alike_pairs(results))]


def write_report(results: list[Result], lessons: Lessons, out_dir: Path, grades: Standings,
                 no_notebook: NoNotebook | None = None, assigned=()) -> tuple[Path, Path]:
    """Write out_dir/grades.csv, out_dir/alike.csv and out_dir/report.html; return the first
    and the last. Only the results the gradebook holds count, with the scores it holds
    (``grades``); ``no_notebook``: students who handed in none (collect's manifest);
    ``assigned``: lessons assigned though nobody may have submitted them (due dates)."""
    keys = Counter((r.student, r.lesson) for r in results)
    if twice := [key for key, times in keys.items() if times > 1]:
        raise ValueError(f"two results for {', '.join(twice[0])}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = [r for r in results if (r.student, r.lesson) in grades]
    csv_path = write_csv(out_dir / "grades.csv", grade_rows(lessons, grades, no_notebook,
                                                            assigned))
    write_csv(out_dir / "alike.csv", alike_rows(results))
    html_path = out_dir / "report.html"
    html_path.write_bytes(report_html(results, lessons, grades, no_notebook, assigned)
                          .encode("utf-8"))
    return csv_path, html_path
