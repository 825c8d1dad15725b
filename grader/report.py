"""The class report: grades.csv for the LMS and one self-contained report.html with plots.

Both are built from the graded-submission dicts (one per student and lesson) and the course's
lessons, {lesson: [(grade_id, max_points), ...]} in notebook order. A lesson counts with its score
only when its submission was graded; a student scores 0 on a lesson that is missing or was not
graded. The page embeds its plots as PNG data URIs and loads nothing from anywhere.
"""

import base64
import csv
import html
import io
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, PercentFormatter

Lessons = Mapping[str, Sequence[tuple[str, float]]]

OUTCOMES = ("graded", "ungradable", "timed out", "crashed")
TOP_MISTAKES = 15
MAX_TEXT_CHARS = 2000
MAX_LABEL_CHARS = 60
TRUNCATION_MARK = "… (truncated)"

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 70em; margin: 2em auto; padding: 0 1em;
       color: #222; line-height: 1.4; }
img { max-width: 100%; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.number { text-align: right; }
.missing { color: #999; }
.text { white-space: pre-wrap; overflow-wrap: anywhere; max-width: 45em; }
"""


# -- grades ----------------------------------------------------------------------------------------

def format_points(value: float) -> str:
    """Points without needless decimals: 2.0 -> "2", 2.5 -> "2.5", 1/3 -> "0.33"."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def lesson_names(results: list[dict], lessons: Lessons) -> list[str]:
    """The course's lessons in order, then any other lesson the results name, sorted."""
    extra = {result["lesson"] for result in results} - set(lessons)
    return [*lessons, *sorted(extra)]


def results_by_student(results: list[dict]) -> dict[str, dict[str, dict]]:
    """{student: {lesson: result}}, students sorted; two results for one pair are an error."""
    table: dict[str, dict[str, dict]] = {}
    for result in sorted(results, key=lambda r: r["student"]):
        submitted = table.setdefault(result["student"], {})
        if result["lesson"] in submitted:
            raise ValueError(f"two results for {result['student']}, {result['lesson']}")
        submitted[result["lesson"]] = result
    return table


def exercise_name(grade_id: str) -> str:
    return grade_id.removeprefix("check_")


def lesson_score(result: dict | None) -> float:
    """The score a lesson counts with: 0 when missing or not graded."""
    return result["score"] if result is not None and result["outcome"] == "graded" else 0.0


def grade_rows(results: list[dict], lessons: Lessons) -> list[list[str]]:
    """The grade table as text: a header, then student, one score per lesson, total."""
    names = lesson_names(results, lessons)
    rows = [["student", *names, "total"]]
    for student, submitted in results_by_student(results).items():
        scores = [lesson_score(submitted.get(lesson)) for lesson in names]
        rows.append([student, *map(format_points, scores), format_points(sum(scores))])
    return rows


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as file:
        csv.writer(file).writerows(rows)
    return path


# -- statistics ------------------------------------------------------------------------------------

def lesson_max(lesson: str, lessons: Lessons, results: list[dict]) -> float:
    """The most points a lesson gives, from the course or else from its results."""
    if lesson in lessons:
        return sum(max_points for _, max_points in lessons[lesson])
    return max((r["max_score"] for r in results if r["lesson"] == lesson), default=0.0)


def exercise_ids(lesson: str, lessons: Lessons, lesson_results: list[dict]) -> list[str]:
    """A lesson's grade ids in notebook order, then any others its results name, sorted."""
    known = [grade_id for grade_id, _ in lessons.get(lesson, ())]
    seen = {e["grade_id"] for result in lesson_results for e in result["exercises"]}
    return [*known, *sorted(seen - set(known))]


def pass_rates(results: list[dict], lessons: Lessons) -> list[tuple[str, str, int, int]]:
    """(lesson, grade_id, passed, graded) for every exercise of a lesson with graded results."""
    rates = []
    for lesson in lesson_names(results, lessons):
        graded = [r for r in results if r["lesson"] == lesson and r["outcome"] == "graded"]
        if not graded:
            continue
        for grade_id in exercise_ids(lesson, lessons, graded):
            passed = sum(any(e["grade_id"] == grade_id and e["passed"] for e in r["exercises"])
                         for r in graded)
            rates.append((lesson, grade_id, passed, len(graded)))
    return rates


def split_mistakes(mistake: str | None) -> list[str]:
    """The mistakes one diagnosis names: "A + B" is A and B."""
    return [part.strip() for part in (mistake or "").split(" + ") if part.strip()]


def mistake_counts(results: list[dict]) -> list[tuple[str, int, Counter]]:
    """(mistake, times, {"lesson: exercise": times}), most frequent first."""
    where: dict[str, Counter] = defaultdict(Counter)
    for result in results:
        for exercise in result["exercises"]:
            for mistake in split_mistakes(exercise.get("mistake")):
                where[mistake][f"{result['lesson']}: {exercise_name(exercise['grade_id'])}"] += 1
    counted = [(mistake, sum(places.values()), places) for mistake, places in where.items()]
    return sorted(counted, key=lambda item: (-item[1], item[0]))


def needs_a_human(result: dict) -> bool:
    return result["outcome"] != "graded" or bool(result.get("tampering"))


# -- plots -----------------------------------------------------------------------------------------

def plot_label(text: str) -> str:
    """Text safe for a matplotlib label: short, and with no "$" to start math mode."""
    if len(text) > MAX_LABEL_CHARS:
        text = text[:MAX_LABEL_CHARS - 1] + "…"
    return text.replace("$", r"\$")


def png_data_uri(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def image_html(figure: Figure, alt: str) -> str:
    return f'<img src="{png_data_uri(figure)}" alt="{html.escape(alt)}">'


def score_distribution_figure(results: list[dict], lessons: Lessons) -> Figure:
    """One histogram per lesson of its submissions' scores, as a percentage of the maximum."""
    names = lesson_names(results, lessons)
    columns = min(3, len(names))
    rows = math.ceil(len(names) / columns)
    figure = Figure(figsize=(4 * columns, 2.8 * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for ax, lesson in zip(axes, names, strict=False):
        submitted = [r for r in results if r["lesson"] == lesson]
        most = lesson_max(lesson, lessons, results)
        percents = [100 * lesson_score(r) / most if most else 0.0 for r in submitted]
        ax.set_title(f"{plot_label(lesson)} ({len(submitted)} submitted)", fontsize=10)
        if percents:
            ax.hist(percents, bins=np.linspace(0, 100, 11), color="#4878a8", edgecolor="white")
        else:
            ax.text(0.5, 0.5, "no submissions", ha="center", va="center",
                    transform=ax.transAxes, color="#888")
        ax.set_xlim(0, 100)
        ax.xaxis.set_major_formatter(PercentFormatter())
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("score")
        ax.set_ylabel("submissions")
    for ax in axes[len(names):]:
        ax.set_visible(False)
    return figure


def pass_rate_figure(rates: list[tuple[str, str, int, int]]) -> Figure:
    """Horizontal bars, one per exercise in notebook order, coloured by lesson."""
    figure = Figure(figsize=(9, 0.32 * len(rates) + 1.6), layout="constrained")
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
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("graded submissions that pass")
    figure.legend(loc="outside upper center", ncols=min(3, len(lessons)), frameon=False)
    return figure


def mistakes_figure(mistakes: list[tuple[str, int, Counter]]) -> Figure:
    figure = Figure(figsize=(9, 0.32 * len(mistakes) + 1.2), layout="constrained")
    ax = figure.subplots()
    positions = np.arange(len(mistakes))
    ax.barh(positions, [times for _, times, _ in mistakes], color="#c05050")
    ax.set_yticks(positions, [plot_label(mistake) for mistake, _, _ in mistakes])
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("times diagnosed")
    return figure


# -- page ------------------------------------------------------------------------------------------

def escaped(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """Text made safe for HTML, cut to `limit` characters with a visible mark."""
    if len(text) > limit:
        text = f"{text[:limit]}\n{TRUNCATION_MARK}"
    return html.escape(text)


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def cell(content: str, css: str = "") -> str:
    """A table cell holding `content`, which is HTML already."""
    return f'<td class="{css}">{content}</td>' if css else f"<td>{content}</td>"


def table_html(table_id: str, header: list[str], rows: list[list[str]]) -> str:
    """A table with a plain-text header and rows of cells made by `cell`."""
    head = "".join(f"<th>{html.escape(title)}</th>" for title in header)
    body = "\n".join(f"<tr>{''.join(cells)}</tr>" for cells in rows)
    return f'<table id="{table_id}">\n<tr>{head}</tr>\n{body}\n</table>'


def summary_html(results: list[dict]) -> str:
    outcomes = Counter(result["outcome"] for result in results)
    others = sorted(set(outcomes) - set(OUTCOMES))
    header = ["students", "submissions", *OUTCOMES, *others, "with signs of tampering"]
    counts = [len({result["student"] for result in results}), len(results),
              *(outcomes[outcome] for outcome in (*OUTCOMES, *others)),
              sum(bool(result.get("tampering")) for result in results)]
    return table_html("summary", header, [[cell(str(count), "number") for count in counts]])


def distribution_section(results: list[dict], lessons: Lessons) -> str:
    figure = score_distribution_figure(results, lessons)
    return ("<h2>Scores per lesson</h2>\n<p>Each submission's score as a percentage of the "
            "lesson's maximum; a submission that could not be graded counts as 0.</p>\n"
            + image_html(figure, "Histograms of the scores of each lesson"))


def pass_rate_section(results: list[dict], lessons: Lessons) -> str:
    rates = pass_rates(results, lessons)
    if not rates:
        return ("<h2>Pass rate per exercise</h2>\n<p>No submission has been graded, so there "
                "are no pass rates to show.</p>")
    return ("<h2>Pass rate per exercise</h2>\n<p>The share of a lesson's graded submissions "
            "that pass each of its exercises.</p>\n"
            + image_html(pass_rate_figure(rates), "Pass rate of each exercise"))


def places_text(places: Counter) -> str:
    """Where a mistake was made: "lesson: exercise", with counts when there are several."""
    ranked = sorted(places.items(), key=lambda item: (-item[1], item[0]))
    if len(ranked) == 1:
        return ranked[0][0]
    return ", ".join(f"{place} ({times})" for place, times in ranked)


def mistakes_section(results: list[dict]) -> str:
    mistakes = mistake_counts(results)[:TOP_MISTAKES]
    if not mistakes:
        return "<h2>Most frequent mistakes</h2>\n<p>No known mistake was diagnosed.</p>"
    rows = [[cell(escaped(mistake)), cell(str(times), "number"), cell(escaped(places_text(places)))]
            for mistake, times, places in mistakes]
    return ("<h2>Most frequent mistakes</h2>\n<p>Known mistakes the checks diagnosed; a pair "
            "of mistakes counts once for each.</p>\n"
            + image_html(mistakes_figure(mistakes), "The most frequent mistakes") + "\n"
            + table_html("mistakes", ["mistake", "times", "exercise"], rows))


def needs_a_human_details(result: dict) -> str:
    lines = [result.get("reason") or ""] if result["outcome"] != "graded" else []
    lines += [f"Tampering: {evidence}" for evidence in result.get("tampering") or ()]
    return "\n".join(line for line in lines if line)


def needs_a_human_section(results: list[dict]) -> str:
    flagged = sorted((r for r in results if needs_a_human(r)),
                     key=lambda r: (r["student"], r["lesson"]))
    if not flagged:
        return ("<h2>Needs a human</h2>\n<p>Nothing: every submission was graded and shows no "
                "sign of tampering.</p>")
    rows = [[cell(html.escape(r["student"])), cell(html.escape(r["lesson"])),
             cell(html.escape(r["outcome"])), cell(escaped(needs_a_human_details(r)), "text")]
            for r in flagged]
    return ("<h2>Needs a human</h2>\n<p>Submissions that could not be graded or show signs of "
            "tampering.</p>\n"
            + table_html("needs-a-human", ["student", "lesson", "outcome", "details"], rows))


def lesson_cell(result: dict | None) -> str:
    if result is None:
        return cell("missing", "number missing")
    if result["outcome"] != "graded":
        return cell(f"0 ({html.escape(result['outcome'])})", "number")
    return cell(format_points(result["score"]), "number")


def students_section(results: list[dict], lessons: Lessons) -> str:
    names = lesson_names(results, lessons)
    rows = []
    for student, submitted in results_by_student(results).items():
        total = sum(lesson_score(submitted.get(lesson)) for lesson in names)
        rows.append([cell(html.escape(student)),
                     *(lesson_cell(submitted.get(lesson)) for lesson in names),
                     cell(format_points(total), "number")])
    return ("<h2>Students</h2>\n<p>The scores in grades.csv: a lesson that is missing or could "
            "not be graded counts as 0.</p>\n"
            + table_html("students", ["student", *names, "total"], rows))


def report_html(results: list[dict], lessons: Lessons) -> str:
    """The whole report page."""
    if results:
        sections = [distribution_section(results, lessons), pass_rate_section(results, lessons),
                    mistakes_section(results), needs_a_human_section(results),
                    students_section(results, lessons)]
    else:
        sections = ["<p>Nothing has been graded yet.</p>"]
    body = "\n".join([summary_html(results), *sections])
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Class report</title>
<style>{STYLE}</style>
</head>
<body>
<h1>Class report</h1>
{body}
</body>
</html>
"""


def write_report(results: list[dict], lessons: Lessons, out_dir: Path) -> tuple[Path, Path]:
    """Write out_dir/grades.csv and out_dir/report.html; return both paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = write_csv(out_dir / "grades.csv", grade_rows(results, lessons))
    html_path = out_dir / "report.html"
    html_path.write_bytes(report_html(results, lessons).encode("utf-8"))
    return csv_path, html_path
