"""The class report: grades.csv for the LMS and one self-contained report.html with plots.

Both are built from the graded results (one per student and lesson) and the course's lessons,
{lesson: [(grade_id, max_points), ...]} in notebook order. A lesson counts with its score only
when its submission was graded; a student scores 0 on a lesson that is missing or was not graded.

Given the gradebook's standings (``grader.gradebook.standings``: the gradebook is the one source
of truth), a lesson counts with what the gradebook holds instead: a score a human set in the
formgrader wins (it also releases a held submission), and the late penalty is taken off; the CSV
then also says how late each lesson was, and the page lists lateness and the grades set by hand.
``write_canvas_csv`` writes the same grades in Canvas's gradebook import format.
The page is laid out by templates/report.html.j2; it embeds its plots as PNG data URIs and loads
nothing from anywhere.
"""

import base64
import csv
import difflib
import io
import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from ..grading.results import Outcome, Result

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Lessons = Mapping[str, Sequence[tuple[str, float]]]
# (student, lesson) -> the gradebook's view of it (grader.gradebook.Standing: score, final,
# overridden, needs_manual_grade, lateness, penalty)
Grades = Mapping[tuple[str, str], "Standing"]  # noqa: F821

TOP_MISTAKES = 15
MAX_TEXT_CHARS = 2000
MAX_LABEL_CHARS = 60
TRUNCATION_MARK = "… (truncated)"


# -- grades ----------------------------------------------------------------------------------------

def format_points(value: float) -> str:
    """Points without needless decimals: 2.0 -> "2", 2.5 -> "2.5", 1/3 -> "0.33"."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def lesson_names(results: list[Result], lessons: Lessons) -> list[str]:
    """The course's lessons in order, then any other lesson the results name, sorted."""
    extra = {result.lesson for result in results} - set(lessons)
    return [*lessons, *sorted(extra)]


def results_by_student(results: list[Result]) -> dict[str, dict[str, Result]]:
    """{student: {lesson: result}}, students sorted; two results for one pair are an error."""
    table: dict[str, dict[str, Result]] = {}
    for result in sorted(results, key=lambda r: r.student):
        submitted = table.setdefault(result.student, {})
        if result.lesson in submitted:
            raise ValueError(f"two results for {result.student}, {result.lesson}")
        submitted[result.lesson] = result
    return table


def exercise_name(grade_id: str) -> str:
    return grade_id.removeprefix("check_")


def lesson_score(result: Result | None, grades: Grades | None = None) -> float:
    """The score a lesson counts with: 0 when missing or not graded; with the gradebook's
    grades, what the gradebook holds less the late penalty."""
    if result is None:
        return 0.0
    if grades is not None:
        standing = grades.get((result.student, result.lesson))
        return standing.final if standing is not None else 0.0
    return result.counted_score


def grade_rows(results: list[Result], lessons: Lessons,
               grades: Grades | None = None) -> list[list[str]]:
    """The grade table as text: a header, then student, one score per lesson, total; with the
    gradebook's grades, every student it holds, and then, for each lesson with a due date or a
    late submission, how late each student was and the penalty."""
    if grades is None:
        names = lesson_names(results, lessons)
        rows = [["student", *names, "total"]]
        for student, submitted in results_by_student(results).items():
            scores = [lesson_score(submitted.get(lesson)) for lesson in names]
            rows.append([student, *map(format_points, scores), format_points(sum(scores))])
        return rows
    names = [*lessons, *sorted({lesson for _, lesson in grades} - set(lessons))]
    timed = [n for n in names if any(lesson == n and (g.lateness.due or g.lateness.late)
                                     for (_, lesson), g in grades.items())]
    rows = [["student", *names, "total",
             *(f"{n} {what}" for n in timed for what in ("late", "penalty"))]]
    for student in sorted({student for student, _ in grades}):
        mine = [grades.get((student, lesson)) for lesson in names]
        scores = [g.final if g is not None else 0.0 for g in mine]
        late = []
        for lesson in timed:
            g = grades.get((student, lesson))
            late += [g.lateness.text(), format_points(g.penalty)] if g else ["", ""]
        rows.append([student, *map(format_points, scores), format_points(sum(scores)), *late])
    return rows


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as file:
        csv.writer(file).writerows(rows)
    return path


# -- statistics ------------------------------------------------------------------------------------

def lesson_max(lesson: str, lessons: Lessons, results: list[Result]) -> float:
    """The most points a lesson gives, from the course or else from its results."""
    if lesson in lessons:
        return sum(max_points for _, max_points in lessons[lesson])
    return max((r.max_score for r in results if r.lesson == lesson), default=0.0)


def exercise_ids(lesson: str, lessons: Lessons, lesson_results: list[Result]) -> list[str]:
    """A lesson's grade ids in notebook order, then any others its results name, sorted."""
    known = [grade_id for grade_id, _ in lessons.get(lesson, ())]
    seen = {e.grade_id for result in lesson_results for e in result.exercises}
    return [*known, *sorted(seen - set(known))]


def pass_rates(results: list[Result], lessons: Lessons) -> list[tuple[str, str, int, int]]:
    """(lesson, grade_id, passed, graded) for every exercise of a lesson with graded results."""
    rates = []
    for lesson in lesson_names(results, lessons):
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


# -- plots -----------------------------------------------------------------------------------------

def plot_label(text: str) -> str:
    """Text safe for a matplotlib label: short, and with no "$" to start math mode."""
    if len(text) > MAX_LABEL_CHARS:
        text = text[:MAX_LABEL_CHARS - 1] + "…"
    return text.replace("$", r"\$")


def new_figure(width: float, height: float) -> "Figure":
    """A matplotlib figure with constrained layout. matplotlib is imported here, when a figure
    is drawn: 0.8 s that `grade` and every command but report and feedback skip."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def png_data_uri(figure: "Figure") -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def score_distribution_figure(results: list[Result], lessons: Lessons,
                              grades: Grades | None = None) -> "Figure":
    """One histogram per lesson of its submissions' scores, as a percentage of the maximum."""
    from matplotlib import ticker  # see new_figure

    names = lesson_names(results, lessons)
    columns = min(3, len(names))
    rows = math.ceil(len(names) / columns)
    figure = new_figure(4 * columns, 2.8 * rows)
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for ax, lesson in zip(axes, names, strict=False):
        submitted = [r for r in results if r.lesson == lesson]
        most = lesson_max(lesson, lessons, results)
        percents = [100 * lesson_score(r, grades) / most if most else 0.0 for r in submitted]
        ax.set_title(f"{plot_label(lesson)} ({len(submitted)} submitted)", fontsize=10)
        if percents:
            ax.hist(percents, bins=np.linspace(0, 100, 11), color="#4878a8", edgecolor="white")
        else:
            ax.text(0.5, 0.5, "no submissions", ha="center", va="center",
                    transform=ax.transAxes, color="#888")
        ax.set_xlim(0, 100)
        ax.xaxis.set_major_formatter(ticker.PercentFormatter())
        ax.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
        ax.set_xlabel("score")
        ax.set_ylabel("submissions")
    for ax in axes[len(names):]:
        ax.set_visible(False)
    return figure


def pass_rate_figure(rates: list[tuple[str, str, int, int]]) -> "Figure":
    """Horizontal bars, one per exercise in notebook order, coloured by lesson."""
    from matplotlib import ticker  # see new_figure

    figure = new_figure(9, 0.32 * len(rates) + 1.6)
    ax = figure.subplots()
    positions = np.arange(len(rates))
    lessons = list(dict.fromkeys(lesson for lesson, *_ in rates))
    for index, lesson in enumerate(lessons):
        rows = [i for i, rate in enumerate(rates) if rate[0] == lesson]
        values = [rates[i][2] / rates[i][3] for i in rows]
        ax.barh(positions[rows], values, color=f"C{index % 10}", label=plot_label(lesson))
    for position, (_, _, passed, graded) in zip(positions, rates, strict=True):
        ax.text(passed / graded + 0.01, position, f"{passed}/{graded}", va="center", fontsize=8)
    ax.set_yticks(positions, [plot_label(exercise_name(grade_id)) for _, grade_id, *_ in rates])
    ax.invert_yaxis()
    ax.set_xlim(0, 1.1)
    ax.xaxis.set_major_formatter(ticker.PercentFormatter(1.0))
    ax.set_xlabel("graded submissions that pass")
    figure.legend(loc="outside upper center", ncols=min(3, len(lessons)), frameon=False)
    return figure


def mistakes_figure(mistakes: list[tuple[str, int, Counter]]) -> "Figure":
    from matplotlib import ticker  # see new_figure

    figure = new_figure(9, 0.32 * len(mistakes) + 1.2)
    ax = figure.subplots()
    positions = np.arange(len(mistakes))
    ax.barh(positions, [times for _, times, _ in mistakes], color="#c05050")
    ax.set_yticks(positions, [plot_label(mistake) for mistake, _, _ in mistakes])
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.set_xlabel("times diagnosed")
    return figure


# -- page ------------------------------------------------------------------------------------------

TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=select_autoescape(("html", "j2")), undefined=StrictUndefined,
    trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def truncated(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """Text cut to `limit` characters with a visible mark."""
    return f"{text[:limit]}\n{TRUNCATION_MARK}" if len(text) > limit else text


TEMPLATES.filters.update(points=format_points, truncated=truncated)


def render(template: str, **context) -> str:
    """A page from the templates folder, every value in `context` escaped as HTML unless
    marked safe."""
    return TEMPLATES.get_template(template).render(**context)


class LessonCell(NamedTuple):
    """A student's score on a lesson as the students table shows it."""

    text: str
    missing: bool = False


def summary_counts(results: list[Result]) -> list[tuple[str, int]]:
    """(title, count) for the summary table: students, submissions, each outcome, flagged."""
    outcomes = Counter(result.outcome for result in results)
    return [("students", len({result.student for result in results})),
            ("submissions", len(results)),
            *((outcome.value, outcomes[outcome]) for outcome in Outcome),
            ("flagged for a human (points held)", sum(result.held for result in results))]


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
    chosen = sorted((r for r in results if r.needs_human), key=lambda r: (r.student, r.lesson))
    return [(result, needs_a_human_details(result)) for result in chosen]


def lesson_cell(result: Result | None, standing=None) -> LessonCell:
    if standing is not None:
        return gradebook_cell(result, standing)
    if result is None:
        return LessonCell("missing", missing=True)
    if result.outcome is not Outcome.GRADED:
        return LessonCell(f"0 ({result.outcome.value})")
    if result.held:
        return LessonCell(f"0 (held: {format_points(result.score)})")
    return LessonCell(format_points(result.score))


def gradebook_cell(result: Result | None, standing) -> LessonCell:
    """A lesson as the gradebook holds it: what counts, and why it is not the automatic score
    (set by hand, not graded, held, late)."""
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


def lateness_rows(grades: Grades) -> list[tuple[str, str, str, str, str, str]]:
    """(student, lesson, due, submitted, how late, penalty) of every submission with a due date
    or that was late, by student and lesson."""
    rows = []
    for (student, lesson), g in sorted(grades.items()):
        late = g.lateness
        if late.due is None and not late.late:
            continue
        rows.append((student, lesson, _when(late.due), _when(late.submitted),
                     late.text() or "time unknown", format_points(g.penalty)))
    return rows


def _when(value) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC") if value is not None else ""


def override_rows(results: list[Result], grades: Grades) -> list[tuple[str, str, str, str]]:
    """(student, lesson, automatic score, score set by hand) where a human set a score."""
    automatic = {(r.student, r.lesson): r for r in results}
    rows = []
    for (student, lesson), g in sorted(grades.items()):
        if g.overridden:
            result = automatic.get((student, lesson))
            auto = format_points(result.counted_score) if result is not None else ""
            if result is not None and result.held:
                auto += f" (held: {format_points(result.score)})"
            rows.append((student, lesson, auto, format_points(g.score)))
    return rows


# -- answers that look alike -----------------------------------------------------------------------

SIMILAR = 0.95  # token similarity from which two answers count as near-identical
SHORTEST_COMPARED = 12  # tokens (as inspection's): shorter answers look alike whenever right
FUZZY_UP_TO = 200  # submissions of a lesson compared pairwise; above, only identical answers


class AlikePair(NamedTuple):
    lesson: str
    students: tuple[str, str]
    alike: int  # exercises whose answers are near-identical (all compared ones)
    similarity: float  # the lowest among them


def alike_pairs(results: list[Result]) -> list[AlikePair]:
    """Pairs of students of one lesson whose every answer (two at least, each long enough to
    tell) is the other's up to renaming: identical token sequences, or at least ``SIMILAR``
    alike where the lesson has at most ``FUZZY_UP_TO`` submissions."""
    pairs = []
    for lesson, group in itertools.groupby(sorted(results, key=lambda r: (r.lesson, r.student)),
                                           key=lambda r: r.lesson):
        answered = [r for r in group if len(_compared(r.answers)) >= 2]
        fuzzy = len(answered) <= FUZZY_UP_TO
        for first, second in _candidates(answered, fuzzy):
            shared = _compared(first.answers).keys() & _compared(second.answers).keys()
            ratios = [_similarity(first.answers[n], second.answers[n], fuzzy) for n in shared]
            if len(shared) >= 2 and min(ratios) >= SIMILAR:
                pairs.append(AlikePair(lesson, (first.student, second.student), len(shared),
                                       min(ratios)))
    return sorted(pairs, key=lambda p: (-p.alike, -p.similarity, p.lesson, p.students))


def _compared(answers: dict[str, str]) -> dict[str, str]:
    return {n: a for n, a in answers.items() if len(a.split()) >= SHORTEST_COMPARED}


def _candidates(answered: list[Result], fuzzy: bool):
    if fuzzy:
        return itertools.combinations(answered, 2)
    same = defaultdict(list)  # identical answers only: one pass, not every pair
    for result in answered:
        same[tuple(sorted(_compared(result.answers).items()))].append(result)
    return (pair for group in same.values() for pair in itertools.combinations(group, 2))


def _similarity(a: str, b: str, fuzzy: bool) -> float:
    if a == b or not fuzzy:
        return float(a == b)
    return difflib.SequenceMatcher(None, a.split(), b.split(), autojunk=False).ratio()


def student_rows(results: list[Result], names: list[str],
                 grades: Grades | None = None) -> list[tuple[str, list[LessonCell], str]]:
    """(student, a LessonCell per lesson, total) for every student, sorted (with the
    gradebook's grades: every student it holds)."""
    rows = []
    by_student = results_by_student(results)
    if grades is None:
        for student, submitted in by_student.items():
            total = sum(lesson_score(submitted.get(lesson)) for lesson in names)
            rows.append((student, [lesson_cell(submitted.get(lesson)) for lesson in names],
                         format_points(total)))
        return rows
    for student in sorted(set(by_student) | {student for student, _ in grades}):
        submitted = by_student.get(student, {})
        standing = [grades.get((student, lesson)) for lesson in names]
        cells = [lesson_cell(submitted.get(lesson), g) if g is not None
                 else LessonCell("missing", missing=True) for lesson, g in zip(names, standing,
                                                                               strict=True)]
        total = sum(g.final for g in standing if g is not None)
        rows.append((student, cells, format_points(total)))
    return rows


def sections(results: list[Result], lessons: Lessons, grades: Grades | None = None) -> dict:
    """What the report's sections show, plots as PNG data URIs; none when nothing was graded."""
    if not results:
        return {}
    rates = pass_rates(results, lessons)
    mistakes = mistake_counts(results)[:TOP_MISTAKES]
    names = lesson_names(results, lessons)
    return {
        "gradebook": grades is not None,
        "lateness": lateness_rows(grades) if grades is not None else [],
        "overrides": override_rows(results, grades) if grades is not None else [],
        "distribution_plot": png_data_uri(score_distribution_figure(results, lessons, grades)),
        "pass_rate_plot": png_data_uri(pass_rate_figure(rates)) if rates else None,
        "mistakes_plot": png_data_uri(mistakes_figure(mistakes)) if mistakes else None,
        "mistakes": [(mistake, times, places_text(places)) for mistake, times, places in mistakes],
        "flagged": flagged(results),
        "alike": alike_pairs(results),
        "lessons": names,
        "students": student_rows(results, names, grades),
    }


def report_html(results: list[Result], lessons: Lessons, grades: Grades | None = None) -> str:
    """The whole report page."""
    return render("report.html.j2", summary=summary_counts(results),
                  sections=sections(results, lessons, grades))


def write_report(results: list[Result], lessons: Lessons, out_dir: Path,
                 grades: Grades | None = None) -> tuple[Path, Path]:
    """Write out_dir/grades.csv and out_dir/report.html; return both paths. With the
    gradebook's ``grades``, only the results it holds count, with the scores it holds."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if grades is not None:
        results = [r for r in results if (r.student, r.lesson) in grades]
    csv_path = write_csv(out_dir / "grades.csv", grade_rows(results, lessons, grades))
    html_path = out_dir / "report.html"
    html_path.write_bytes(report_html(results, lessons, grades).encode("utf-8"))
    return csv_path, html_path


# -- Canvas ----------------------------------------------------------------------------------------

CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


def canvas_rows(grades: Grades, lessons: Lessons, collected,
                titles: Mapping[str, str] | None = None) -> list[list[str]]:
    """Canvas's gradebook import: Student, ID (the Canvas user id collect recorded), SIS User ID
    (the course's student id, where it is not the Canvas id), SIS Login ID, Section, then one
    column per lesson (titled as ``titles`` says, else by its name), a "Points Possible" row,
    and a row per student. A lesson not submitted, or held for a human who has not set its
    grade yet, is left blank: Canvas then keeps what it has."""
    titles = titles or {}
    names = [*lessons, *sorted({lesson for _, lesson in grades} - set(lessons))]
    rows = [[*CANVAS_COLUMNS, *(titles.get(n, n) for n in names)],
            ["Points Possible", "", "", "", "",
             *(format_points(sum(p for _, p in lessons.get(n, ()))) for n in names)]]
    for student in sorted({student for student, _ in grades}):
        canvas_id = collected.canvas_ids.get(student, "")
        cells = []
        for lesson in names:
            g = grades.get((student, lesson))
            pending = g is not None and g.needs_manual_grade and not g.overridden
            cells.append("" if g is None or pending else format_points(g.final))
        rows.append([collected.names.get(student, student), canvas_id,
                     student if student != canvas_id else "", "", "", *cells])
    return rows


def write_canvas_csv(path: Path, grades: Grades, lessons: Lessons, collected,
                     titles: Mapping[str, str] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_csv(path, canvas_rows(grades, lessons, collected, titles))
