"""The class report at 300 students, built from a synthetic gradebook (tests/helpers/
large_class.py), not by grading: alike answers in clusters, the largest first and capped, every
pair in alike.csv; students in natural order; a student with no notebook shown missing; no
column, plot or CSV entry for a lesson nobody was assigned; a page well under 1 MB whose
sections are all linked from the top."""

import csv
import re
from pathlib import Path

import pytest

from grader.outputs import report
from grader.outputs.order import naturally
from helpers.large_class import ASSIGNED, LESSONS, LINK_ONLY, large_class


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("report")
    big = large_class(300)
    report.write_report(big.results, LESSONS, out, big.standings, big.no_notebook)
    return out, (out / "report.html").read_text(encoding="utf-8")


def read_csv(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as file:
        return list(csv.reader(file))


def test_the_page_is_small_and_every_section_is_linked_from_the_top(written):
    out, page = written
    assert (out / "report.html").stat().st_size < 1_000_000
    links = re.findall(r'<nav aria-label="Sections">.*?</nav>', page, re.DOTALL)[0]
    targets = re.findall(r'href="#([^"]+)"', links)
    assert len(targets) == 8
    for target in targets:
        assert f'id="{target}"' in page


def test_alike_answers_are_clusters_largest_first_capped_and_every_pair_in_alike_csv(written):
    out, page = written
    rows = re.findall(r'<table id="alike">(.*?)</table>', page, re.DOTALL)[0]
    sizes = [int(n) for n in re.findall(r"<td>(\d+): s", rows)]
    assert len(sizes) == report.SHOWN_CLUSTERS and sizes == sorted(sizes, reverse=True)
    assert sizes[0] == 60  # s1-s60 share 01_first's answers
    assert "largest of" in page and "Name v0 Attribute shared01_first" in page
    pairs = read_csv(out / "alike.csv")[1:]
    first_sixty = {f"s{i}" for i in range(1, 61)}
    assert sum(1 for p in pairs if p[0] == "01_first" and {p[1], p[2]} <= first_sixty) \
        == 60 * 59 // 2  # every pair is in the file, the page shows clusters


def test_students_in_natural_order_with_the_student_who_sent_a_link_missing(written):
    out, page = written
    grades = read_csv(out / "grades.csv")
    students = [row[0] for row in grades[1:]]
    assert students[:12] == [LINK_ONLY, *(f"s{i}" for i in range(1, 12))]
    assert students == naturally(students) and len(students) == 301
    table = re.findall(r'<table id="students">(.*?)</table>', page, re.DOTALL)[0]
    shown = re.findall(r"<tr><td>([^<]+)</td>", table)
    assert shown == students
    assert "missing (no notebook submitted: a link" in table


def test_a_lesson_nobody_was_assigned_has_no_column_and_no_plot(written):
    out, page = written
    assert read_csv(out / "grades.csv")[0][:3] == ["student", *ASSIGNED]
    assert "03_unassigned" not in page
    assert "03_unassigned" not in (out / "alike.csv").read_text()
