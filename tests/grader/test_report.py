"""The per-student feedback pages and the class report, built from a small synthetic class and
the standings a gradebook holding its results gives (``standings_of``)."""

import base64
import csv
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from grader.grading.results import ExerciseResult, Outcome, Result, not_graded
from grader.outputs import alike
from grader.outputs.feedback import feedback_html, write_feedback
from grader.outputs.render import MAX_TEXT_CHARS as MAX_MESSAGE_CHARS
from grader.outputs.render import TEMPLATES
from grader.outputs.report import report_html, write_report
from grader.records.standings import CellGrade, Standing

LESSONS = {
    "01_intro": [("check_alpha", 2.0), ("check_beta", 3.0)],
    "02_next": [("check_gamma", 1.0), ("check_delta", 1.5)],
    "03_nobody": [("check_epsilon", 1.0)],
}
XSS = "<script>alert(1)</script>"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def exercise(grade_id, points, max_points, mistake=None, message=None) -> ExerciseResult:
    passed = points == max_points
    return ExerciseResult(grade_id, points, max_points, passed,
                          message or ("ok" if passed else f"{grade_id} is wrong"), mistake)


def result(student, lesson, exercises, outcome=Outcome.GRADED, reason="", flags=()) -> Result:
    if outcome is not Outcome.GRADED:
        return not_graded(student, lesson, LESSONS[lesson], outcome, reason, seconds=1.5)
    return Result(student, lesson, outcome, reason, tuple(exercises),
                  sum(e.max_points for e in exercises), tuple(flags), seconds=1.5)


def standing_of(result: Result) -> Standing:
    """What the gradebook holds of a result as grading writes it: the automatic points (0 while
    held), a human needed for what is held or not graded, no score set by hand."""
    cells = {e.grade_id: CellGrade(auto, None, None, auto, e.max_points)
             for e in result.exercises for auto in [0.0 if result.held else e.points]}
    return Standing(result.student, result.lesson, result.counted_score, result.max_score,
                    cells, result.needs_human)


def standings_of(results: list[Result]) -> dict:
    return {(r.student, r.lesson): standing_of(r) for r in results}


CLASS = [
    # listed out of order on purpose: the outputs must not depend on it
    result("s03", "01_intro", [exercise("check_alpha", 2.0, 2.0),
                               exercise("check_beta", 0.5, 3.0, "off by one",
                                        message=f"beta: wrong values {XSS}")],
           flags=["replaces torch.allclose (library code patched)"]),
    result("s01", "01_intro", [exercise("check_alpha", 2.0, 2.0),
                               exercise("check_beta", 3.0, 3.0)]),
    result("s01", "02_next", [exercise("check_gamma", 1.0, 1.0),
                              exercise("check_delta", 0.0, 1.5, "off by one + wrong sign")]),
    result("s02", "01_intro", [exercise("check_alpha", 2.0, 2.0),
                               exercise("check_beta", 0.0, 3.0, "off by one",
                                        message="beta: off by one")]),
    result("s02", "02_next", [], outcome=Outcome.CRASHED, reason="the kernel died"),
    result("s04", "02_next", [], outcome=Outcome.UNGRADABLE, reason=f"not valid JSON: {XSS}"),
    result("s05", "01_intro", [], outcome=Outcome.TIMED_OUT, reason="ran for more than 120 s"),
]
EXPECTED_GRADES = {  # student: (01_intro, 02_next, total); nobody was assigned 03_nobody
    "s01": ("5", "1", "6"),
    "s02": ("2", "0", "2"),
    "s03": ("0", "0", "0"),  # flagged: its 2.5 points are held for a human
    "s04": ("0", "0", "0"),
    "s05": ("0", "0", "0"),
}


class TableReader(HTMLParser):
    """The text of every cell of every <table id=...> in a page, by table id."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.table_id = None
        self.in_cell = False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.table_id = dict(attrs).get("id")
            self.tables[self.table_id] = []
        elif tag == "tr":
            self.tables[self.table_id].append([])
        elif tag in ("td", "th"):
            self.in_cell = True
            self.tables[self.table_id][-1].append("")

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.in_cell = False

    def handle_data(self, data):
        if self.in_cell:
            self.tables[self.table_id][-1][-1] += data


def tables(page: str) -> dict[str, list[list[str]]]:
    reader = TableReader()
    reader.feed(page)
    return reader.tables


def read_csv(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as file:
        return list(csv.reader(file))


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[list[list[str]], str]:
    """The CSV rows and the HTML page of the synthetic class's report."""
    csv_path, html_path = write_report(CLASS, LESSONS, tmp_path_factory.mktemp("report"),
                                       standings_of(CLASS))
    assert (csv_path.name, html_path.name) == ("grades.csv", "report.html")
    return read_csv(csv_path), html_path.read_text(encoding="utf-8")


def test_csv_has_a_row_per_student_with_lesson_scores_and_total(report):
    rows, _ = report
    assert rows[0] == ["student", "01_intro", "02_next", "total"]
    assert [row[0] for row in rows[1:]] == sorted(EXPECTED_GRADES)
    assert {row[0]: tuple(row[1:]) for row in rows[1:]} == EXPECTED_GRADES


def test_students_table_shows_the_csv_numbers_and_missing_lessons(report):
    rows, page = report
    students = tables(page)["students"]
    assert students[0] == rows[0]
    shown = {row[0]: row[1:] for row in students[1:]}
    assert shown["s03"] == ["0 (held: 2.5)", "missing", "0"]
    assert shown["s02"] == ["2", "0 (crashed)", "2"]
    for row in rows[1:]:
        numbers = [re.sub(r"missing| \(.*\)", "", text) or "0" for text in shown[row[0]]]
        assert numbers == row[1:]


def test_summary_counts_students_submissions_and_outcomes(report):
    header, counts = tables(report[1])["summary"]
    assert dict(zip(header, counts, strict=True)) == {
        "students": "5", "submissions": "7", "graded": "4", "ungradable": "1", "timed out": "1",
        "crashed": "1", "flagged for a human (points held)": "1"}


def test_mistakes_table_counts_each_half_of_a_pair(report):
    mistakes = tables(report[1])["mistakes"]
    assert mistakes[0] == ["mistake", "times", "exercise"]
    assert mistakes[1:] == [["off by one", "3", "01_intro: beta (2), 02_next: delta (1)"],
                            ["wrong sign", "1", "02_next: delta"]]


def test_needs_a_human_lists_every_ungraded_or_tampered_submission(report):
    rows = tables(report[1])["needs-a-human"]
    assert [row[:3] for row in rows[1:]] == [["s02", "02_next", "crashed"],
                                              ["s03", "01_intro", "graded"],
                                              ["s04", "02_next", "ungradable"],
                                              ["s05", "01_intro", "timed out"]]
    details = {row[0]: row[3] for row in rows[1:]}
    assert details["s03"] == "Flagged: replaces torch.allclose (library code patched)"
    assert details["s04"] == f"not valid JSON: {XSS}"  # shown as text, see the escaping test


def test_report_embeds_png_plots_and_loads_nothing_from_the_network(report):
    page = report[1]
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 3
    assert all(base64.b64decode(image).startswith(PNG_SIGNATURE) for image in images)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.IGNORECASE)
    assert "<script" not in page.lower()


def test_student_text_is_escaped(report, tmp_path):
    page = report[1]
    assert XSS not in page
    assert "not valid JSON: &lt;script&gt;alert(1)&lt;/script&gt;" in page
    for student_result in CLASS:
        feedback = feedback_html(student_result, standing_of(student_result))
        assert XSS not in feedback
    assert "wrong values &lt;script&gt;" in feedback_html(CLASS[0], standing_of(CLASS[0]))


@pytest.mark.parametrize("template", ["feedback.html.j2", "report.html.j2"])
def test_templates_escape_a_hostile_student_and_lesson(template, tmp_path):
    autoescape = TEMPLATES.autoescape
    assert autoescape(template) if callable(autoescape) else autoescape
    lesson = "01_<b>intro</b>"
    hostile = result(XSS, lesson, [exercise("check_<i>alpha</i>", 0.0, 2.0, XSS, message=XSS)],
                     flags=[XSS])
    if template == "feedback.html.j2":
        page = feedback_html(hostile, standing_of(hostile))
    else:
        page = write_report([hostile], LESSONS, tmp_path, standings_of([hostile]))[1].read_text(
            encoding="utf-8")
    assert XSS not in page and "<b>" not in page and "<i>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "01_&lt;b&gt;intro&lt;/b&gt;" in page


def test_report_is_the_same_for_the_same_results_in_any_order(report, tmp_path):
    csv_path, html_path = write_report(CLASS[::-1], LESSONS, tmp_path, standings_of(CLASS[::-1]))
    assert read_csv(csv_path) == report[0]
    assert html_path.read_text(encoding="utf-8") == report[1]


def test_empty_class_gives_an_empty_csv_and_says_nothing_is_graded(tmp_path):
    csv_path, html_path = write_report([], LESSONS, tmp_path, {})
    assert read_csv(csv_path) == [["student", "total"]]  # no lesson assigned yet
    page = html_path.read_text(encoding="utf-8")
    assert "Nothing has been graded yet." in page
    assert "data:image/png" not in page


def test_all_ungradable_says_there_are_no_pass_rates(tmp_path):
    results = [result(f"s{i}", "01_intro", [], outcome=Outcome.UNGRADABLE, reason="empty notebook")
               for i in range(3)]
    csv_path, html_path = write_report(results, LESSONS, tmp_path, standings_of(results))
    assert [row[1:] for row in read_csv(csv_path)[1:]] == [["0", "0"]] * 3
    page = html_path.read_text(encoding="utf-8")
    assert "there are no pass rates to show" in page
    assert "No known mistake was diagnosed." in page
    assert len(tables(page)["needs-a-human"]) == 1 + 3


def test_two_results_for_one_student_and_lesson_are_refused(tmp_path):
    with pytest.raises(ValueError, match="s01, 01_intro"):
        write_report([CLASS[1], CLASS[1]], LESSONS, tmp_path, standings_of([CLASS[1]]))


def test_feedback_page_shows_score_outcome_and_each_exercise():
    graded = feedback_html(CLASS[3], standing_of(CLASS[3]))
    assert "2 / 5" in graded
    assert "<span>alpha</span><span>2 / 2</span>" in graded
    assert "Passed." in graded
    assert "check_" not in graded
    held = feedback_html(CLASS[0], standing_of(CLASS[0]))  # its 2.5 points wait for a human
    assert "0 / 5" in held and "Your instructor will set the grade of this lesson" in held
    crashed = feedback_html(CLASS[4], standing_of(CLASS[4]))
    assert "crashed" in crashed and "the kernel died" in crashed
    assert "0 / 1.5" in crashed


def test_feedback_of_an_ungraded_submission_says_why_once():
    why = "the kernel died in cell 7 (killed by signal SIGKILL)"
    crashed = not_graded("s09", "02_next", LESSONS["02_next"], Outcome.CRASHED, why)
    page = feedback_html(crashed, standing_of(crashed))
    assert page.count(why) == 1
    assert page.count("Not graded (see above).") == len(LESSONS["02_next"])


def test_feedback_truncates_very_long_messages():
    long = result("s01", "01_intro", [exercise("check_alpha", 0.0, 2.0, message="x" * 10_000),
                                      exercise("check_beta", 3.0, 3.0)])
    page = feedback_html(long, standing_of(long))
    assert "x" * MAX_MESSAGE_CHARS in page
    assert "x" * (MAX_MESSAGE_CHARS + 1) not in page
    assert "… (truncated)" in page


def test_feedback_files_use_nbgraders_layout_and_rewrite_identically(tmp_path):
    paths = write_feedback(CLASS, tmp_path, standings_of(CLASS))
    assert paths == [tmp_path / r.student / r.lesson / f"{r.lesson}.html" for r in CLASS]
    first = {path: path.read_bytes() for path in paths}
    paths[0].write_text("stale")
    assert write_feedback(CLASS, tmp_path, standings_of(CLASS)) == paths
    assert {path: path.read_bytes() for path in paths} == first


def test_feedback_refuses_names_that_are_not_a_single_folder(tmp_path):
    with pytest.raises(ValueError):
        hostile = result("../s01", "01_intro", [], outcome=Outcome.CRASHED)
        write_feedback([hostile], tmp_path, standings_of([hostile]))


# ---------------------------------------------------------------- answers that look alike

def with_answers(student: str, answers: dict[str, str]) -> Result:
    exercise = ExerciseResult("check_softmax", 2.0, 2.0, True, "ok")
    return Result(student, "02_scaled_dot_product", Outcome.GRADED, "", (exercise,), 2.0,
                  answers=answers)


LONG = " ".join(f"Name v{i % 4} Attribute amax" for i in range(8))


def test_pairs_whose_every_answer_is_alike_are_listed_highlighted_in_the_report():
    other = LONG.replace("amax", "amin", 1)
    results = [with_answers("ann", {"softmax": LONG, "scaled_dot_product_attention": LONG + " x"}),
               with_answers("bob", {"softmax": LONG, "scaled_dot_product_attention": LONG + " x"}),
               with_answers("cy", {"softmax": other, "scaled_dot_product_attention": LONG + " x"}),
               with_answers("dee", {"softmax": "Return v0", "scaled_dot_product_attention": LONG})]
    pairs = alike.alike_pairs(results)
    assert [p.students for p in pairs] == [("ann", "bob"), ("ann", "cy"), ("bob", "cy")]
    assert pairs[0].similarity == 1.0 and pairs[1].similarity < 1.0
    page = report_html(results, {}, standings_of(results))
    (cluster,) = alike.alike_clusters(pairs, results)  # linked through ann-cy and bob-cy
    assert cluster.students == ("ann", "bob", "cy") and cluster.similarity < 1.0
    assert cluster.exercises == ("scaled_dot_product_attention", "softmax")
    assert "3: ann, bob, cy" in page and cluster.answer[:40] in page


def test_answers_too_short_to_tell_or_too_few_are_not_compared():
    results = [with_answers(s, {"softmax": "Return v0 Name v1", "scores": LONG})
               for s in ("ann", "bob")]
    assert alike.alike_pairs(results) == []


def test_a_large_class_compares_identical_answers_only(monkeypatch):
    monkeypatch.setattr(alike, "FUZZY_UP_TO", 2)
    other = LONG.replace("amax", "amin", 1)
    results = [with_answers("ann", {"a": LONG, "b": LONG}),
               with_answers("bob", {"a": LONG, "b": LONG}),
               with_answers("cy", {"a": other, "b": LONG})]
    assert [p.students for p in alike.alike_pairs(results)] == [("ann", "bob")]
