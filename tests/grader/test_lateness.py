"""Due dates, extensions and the late policy (grader/records/lateness.py): the course file, how
late a submission is and what that costs. (tests/pipeline/test_late_submissions.py follows
lateness through the whole data path.)"""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from nbgrader.api import Assignment, SubmittedAssignment

from grader.records.lateness import CourseFile, CourseFileError, LatePolicy, lateness
from grader.records.standings import submission_lateness

DUE = datetime(2025, 3, 7, 23, 59, tzinfo=UTC)
POLICY = LatePolicy(penalty_per_day=0.1, max_penalty=0.3, grace=timedelta(minutes=10))
L02 = "02_scaled_dot_product"


@pytest.mark.parametrize(("submitted", "days"), [
    (DUE - timedelta(hours=1), 0), (DUE, 0), (DUE + timedelta(minutes=9), 0),  # grace
    (DUE + timedelta(minutes=11), 1), (DUE + timedelta(hours=24), 1),
    (DUE + timedelta(hours=25), 2), (DUE + timedelta(days=9), 9)])
def test_every_started_day_late_counts_after_the_grace(submitted, days):
    assert lateness(DUE, submitted, False, POLICY).days == days


def test_the_penalty_is_a_share_of_the_lesson_capped_and_never_more_than_the_score():
    two_days = lateness(DUE, DUE + timedelta(days=2), False, POLICY)
    assert (two_days.share, two_days.penalty(7, 10), two_days.text()) == (0.2, 2.0, "2 days late")
    assert two_days.penalty(1, 10) == 1  # the score cannot go below 0
    assert lateness(DUE, DUE + timedelta(days=9), False, POLICY).penalty(10, 10) == 3


def test_an_extension_moves_the_due_date():
    """nbgrader's due date of a submission (its extension included) is the one counted."""
    lesson = Assignment(name=L02, duedate=DUE.replace(tzinfo=None))  # as nbgrader stores it
    submitted = SubmittedAssignment(assignment=lesson, extension=timedelta(days=3),
                                    timestamp=(DUE + timedelta(days=2)).replace(tzinfo=None))
    late = submission_lateness(submitted, False, CourseFile(late=POLICY))
    assert (late.late, late.due, late.text()) == (False, DUE + timedelta(days=3), "on time")


def test_the_lms_late_marker_counts_only_where_no_time_is_known():
    marked = lateness(DUE, None, True, POLICY)
    assert (marked.days, marked.text()) == (1, "late (LMS; time unknown)")
    assert not lateness(DUE, DUE - timedelta(days=1), True, POLICY).late  # time known
    assert lateness(None, None, False, POLICY).text() == ""  # nothing known


def test_the_course_file_reads_dates_in_any_zone_extensions_and_the_policy():
    course = CourseFile.parse({
        "due": {"01": datetime(2025, 3, 7, 23, 59, tzinfo=timezone(timedelta(hours=1))),
                "02": "2025-03-14 23:59 Europe/Berlin", "03": datetime(2025, 3, 21, 12, 0)},
        "extensions": {"s07": {"02": 2.5}},
        "late": {"penalty_per_day": 0.1, "max_penalty": 0.5, "grace_minutes": 15},
        "canvas": {"01": "Embeddings (4021)"}})
    assert course.due == {"01": datetime(2025, 3, 7, 22, 59, tzinfo=UTC),
                          "02": datetime(2025, 3, 14, 22, 59, tzinfo=UTC),
                          "03": datetime(2025, 3, 21, 12, 0, tzinfo=UTC)}  # no zone: UTC
    assert course.extensions == {("s07", "02"): timedelta(days=2.5)}
    assert course.late == LatePolicy(0.1, 0.5, timedelta(minutes=15), 1)
    assert course.canvas == {"01": "Embeddings (4021)"}


@pytest.mark.parametrize(("data", "error"), [
    ({"deadlines": {}}, "unknown section"), ({"due": {"01": "next friday"}}, "not a date"),
    ({"late": {"penalty_per_day": -1}}, "expected a number >= 0"),
    ({"late": {"penality_per_day": 0.1}}, "unknown key"),
    ({"extensions": {"s07": 3}}, "expected { lesson = days")])
def test_a_course_file_that_cannot_be_read_says_why(data, error):
    with pytest.raises(CourseFileError, match=error):
        CourseFile.parse(data)
