"""Collect on a download of every LMS it reads, each built from that LMS's documented naming
(see the docstrings in grader/intake/formats/) with its hard cases: submissions without a
notebook (a link, online text, a receipt), groups and teams, resubmissions, drafts, blind
marking, both cases of Canvas's late marker. Each case is data: the download's files, and for
each file the student and the outcome of its row. Nobody may be silently dropped, merged or
graded under another id, and a draft is never graded."""

import json
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from grader import cli
from grader.course import ROOT, lesson_names
from grader.intake import Collected
from grader.workspace import Workspace

L02 = lesson_names()[1]
NB = f"{L02}.ipynb"


def notebook(marker: str) -> bytes:
    """Lesson 02's released notebook with a note of who wrote it (every file differs)."""
    data = json.loads((ROOT / "notebooks" / L02 / NB).read_text())
    data["cells"].append({"cell_type": "markdown", "metadata": {}, "source": f"by {marker}"})
    return json.dumps(data).encode()


def receipt(name: str, user: str, *files: str) -> bytes:
    """A Blackboard receipt of one attempt, listing ``files``."""
    listed = "".join(f"\tOriginal filename: {f}\n\tFilename: x_{user}_{f}\n" for f in files) \
        or "No files were attached to this submission.\n"
    return (f"Name: {name} ({user})\nAssignment: Lesson 2\nDate Submitted: Friday, March 1, "
            f"2024 10:15:30 AM\nCurrent Grade: Needs Grading\n\nSubmission Field:\nThere is "
            f"no student submission text data for this assignment.\n\nFiles:\n{listed}").encode()


@dataclass
class Case:
    """A download (path -> bytes; a notebook is ``notebook(marker)``) and what collect must do:
    for a file, (student, outcome) of each of its rows; the notebook each student ends with
    (student -> marker); the exit status."""

    files: dict[str, bytes]
    rows: dict[str, list[tuple[str, str]]]
    kept: dict[str, str]
    status: int = 0
    roster: str | None = None
    options: tuple[str, ...] = ()
    without_notebook: set[str] = field(default_factory=set)  # students the report shows missing
    times: dict[str, str] = field(default_factory=dict)  # student -> timestamp.txt
    late: set[str] = field(default_factory=set)  # students the LMS marked late


CASES = {
    "canvas: link, text, both late markers, anonymous": Case(
        files={f"smithbob_1001_5001_{NB}": notebook("bob"),
               f"leeann_late_1002_5002_{NB}": notebook("ann"),
               f"o_brienpat_LATE_1005_5005_Copy of {NB}": notebook("pat"),
               "chenwei_1003_link.html": b"<meta http-equiv='refresh' content='0; url=x'>",
               "parkjo_LATE_1004_text.html": b"<p>my answers are in the chat</p>",
               "anon_Qw3rT_link.html": b"<p>link</p>"},
        rows={f"smithbob_1001_5001_{NB}": [("1001", "collected")],
              f"leeann_late_1002_5002_{NB}": [("1002", "collected")],
              f"o_brienpat_LATE_1005_5005_Copy of {NB}": [("1005", "renamed")],
              "chenwei_1003_link.html": [("1003", "skipped")],
              "parkjo_LATE_1004_text.html": [("1004", "skipped")],
              "anon_Qw3rT_link.html": [("anon_Qw3rT", "skipped")]},
        kept={"1001": "bob", "1002": "ann", "1005": "pat"}, status=1,
        without_notebook={"1003", "1004", "anon_Qw3rT"}, late={"1002", "1005"}),
    "canvas: a group assignment with Canvas's export of the group set": Case(
        files={f"smithbob_1001_5001_{NB}": notebook("team a"),
               f"parkjo_1004_5004_{NB}": notebook("team b")},
        roster="name,canvas_user_id,user_id,login_id,sections,group_name,canvas_group_id,"
               "group_id\nBob Smith,1001,,bsmith,,Team A,7,\nAnn Lee,1002,,alee,,Team A,7,\n"
               "Chen Wei,1003,,cwei,,Team B,8,\nJo Park,1004,,jpark,,Team B,8,\n",
        options=("--groups",),
        rows={f"smithbob_1001_5001_{NB}": [("bsmith", "collected"), ("alee", "collected")],
              f"parkjo_1004_5004_{NB}": [("jpark", "collected"), ("cwei", "collected")]},
        kept={"bsmith": "team a", "alee": "team a", "jpark": "team b", "cwei": "team b"}),
    "moodle 3.x folders, with online text": Case(
        files={f"Bob Smith_55_assignsubmission_file_/{NB}": notebook("bob"),
               f"Ann Lee_57_assignsubmission_file_/lesson two/Copy of {NB}": notebook("ann"),
               "Chen Wei_58_assignsubmission_onlinetext_/onlinetext.html": b"<p>hi</p>"},
        rows={f"Bob Smith_55_assignsubmission_file_/{NB}": [("bob-smith", "collected")],
              f"Ann Lee_57_assignsubmission_file_/lesson two/Copy of {NB}":
                  [("ann-lee", "renamed")],
              "Chen Wei_58_assignsubmission_onlinetext_/onlinetext.html":
                  [("chen-wei", "skipped")]},
        kept={"bob-smith": "bob", "ann-lee": "ann"}, status=1, without_notebook={"chen-wei"}),
    "moodle 4.x flat, with online text": Case(
        files={f"Bob Smith_55_assignsubmission_file_{NB}": notebook("bob"),
               "Chen Wei_58_assignsubmission_onlinetext_onlinetext.html": b"<p>hi</p>"},
        rows={f"Bob Smith_55_assignsubmission_file_{NB}": [("bob-smith", "collected")],
              "Chen Wei_58_assignsubmission_onlinetext_onlinetext.html":
                  [("chen-wei", "skipped")]},
        kept={"bob-smith": "bob"}, status=1, without_notebook={"chen-wei"}),
    "moodle teams, members from the roster's group column": Case(
        files={f"Team Alpha_12_assignsubmission_file/{NB}": notebook("alpha"),
               f"Team Beta_13_assignsubmission_file/{NB}": notebook("beta"),
               f"Default group_assignsubmission_file/{NB}": notebook("nobody's")},
        roster="id,name,group\ns1,Bob Smith,Team Alpha\ns2,Ann Lee,Team Alpha\n"
               "s3,Chen Wei,Team Beta\n",
        rows={f"Team Alpha_12_assignsubmission_file/{NB}": [("s1", "collected"),
                                                            ("s2", "collected")],
              f"Team Beta_13_assignsubmission_file/{NB}": [("s3", "collected")],
              f"Default group_assignsubmission_file/{NB}": [("-", "skipped")]},
        kept={"s1": "alpha", "s2": "alpha", "s3": "beta"}, status=1),
    "moodle blind marking": Case(
        files={f"Participant_1234567_assignsubmission_file/{NB}": notebook("p1"),
               f"Participant_7654321_assignsubmission_file/{NB}": notebook("p2")},
        rows={f"Participant_1234567_assignsubmission_file/{NB}":
                  [("participant1234567", "collected")],
              f"Participant_7654321_assignsubmission_file/{NB}":
                  [("participant7654321", "collected")]},
        kept={"participant1234567": "p1", "participant7654321": "p2"}),
    "gradescope: a group submission": Case(
        files={"submission_metadata.yml":
                   b"submission_1:\n  :submitters:\n  - :name: Bob Smith\n    :sid: '100'\n"
                   b"  - :name: Ann Lee\n    :sid: '200'\n  :created_at: 2024-03-01 10:00:00 "
                   b"+00:00\n",
               f"submission_1/{NB}": notebook("pair")},
        rows={f"submission_1/{NB}": [("100", "collected"), ("200", "collected")]},
        kept={"100": "pair", "200": "pair"}, times={"100": "2024-03-01 10:00:00.000000 UTC"}),
    "classroom/drive: most students in their own folder": Case(
        files={f"Bob Smith/{NB}": notebook("bob"), "Ann Lee/my attention.ipynb": notebook("ann"),
               f"Chen Wei/{NB}": notebook("chen"), f"Jo Park - {NB}": notebook("jo")},
        rows={f"Bob Smith/{NB}": [("bob-smith", "collected")],
              "Ann Lee/my attention.ipynb": [("ann-lee", "renamed")],
              f"Chen Wei/{NB}": [("chen-wei", "collected")],
              f"Jo Park - {NB}": [("jo-park", "collected")]},
        kept={"bob-smith": "bob", "ann-lee": "ann", "chen-wei": "chen", "jo-park": "jo"}),
    "blackboard: attempts, receipts, a username with _": Case(
        files={f"Lesson 2_bsmith_attempt_2024-03-01-10-15-30_{NB}": notebook("bob 1"),
               "Lesson 2_bsmith_attempt_2024-03-01-10-15-30.txt":
                   receipt("Bob Smith", "bsmith", NB),
               f"Lesson 2_bsmith_attempt_2024-03-03-08-00-00_{NB}": notebook("bob 2"),
               "Lesson 2_bsmith_attempt_2024-03-03-08-00-00.txt":
                   receipt("Bob Smith", "bsmith", NB),
               f"Lesson 2_a_lee_attempt_2024-03-02-09-00-00_Copy of {NB}": notebook("ann"),
               "Lesson 2_a_lee_attempt_2024-03-02-09-00-00.txt":
                   receipt("Ann Lee", "a_lee", f"Copy of {NB}"),
               "Lesson 2_cwei_attempt_2024-03-02-11-00-00.txt": receipt("Chen Wei", "cwei")},
        rows={f"Lesson 2_bsmith_attempt_2024-03-01-10-15-30_{NB}": [("bsmith", "superseded")],
              f"Lesson 2_bsmith_attempt_2024-03-03-08-00-00_{NB}": [("bsmith", "collected")],
              f"Lesson 2_a_lee_attempt_2024-03-02-09-00-00_Copy of {NB}":
                  [("a_lee", "renamed")],
              "Lesson 2_a_lee_attempt_2024-03-02-09-00-00.txt": [("a_lee", "ignored")],
              "Lesson 2_cwei_attempt_2024-03-02-11-00-00.txt": [("cwei", "skipped")]},
        kept={"bsmith": "bob 2", "a_lee": "ann"}, status=1, without_notebook={"cwei"},
        times={"bsmith": "2024-03-03 08:00:00.000000 UTC"}),
    "brightspace flat: two submissions of one student, one student": Case(
        files={f"123-456 - Bob Smith - Mar 1, 2024 1015 AM - {NB}": notebook("bob 1"),
               f"123-789 - Bob Smith - Mar 2, 2024 915 AM - {NB}": notebook("bob 2"),
               f"124-111 - Ann Lee - Mar 1, 2024 1100 PM - Copy of {NB}": notebook("ann"),
               "index.html": b"<html></html>"},
        rows={f"123-456 - Bob Smith - Mar 1, 2024 1015 AM - {NB}": [("bob-smith", "superseded")],
              f"123-789 - Bob Smith - Mar 2, 2024 915 AM - {NB}": [("bob-smith", "collected")],
              f"124-111 - Ann Lee - Mar 1, 2024 1100 PM - Copy of {NB}":
                  [("ann-lee", "renamed")]},
        kept={"bob-smith": "bob 2", "ann-lee": "ann"},
        times={"ann-lee": "2024-03-01 23:00:00.000000 UTC"}),
    "brightspace folders, students from the roster": Case(
        files={f"123-456 - Bob Smith - Mar 1, 2024 1015 AM/{NB}": notebook("bob"),
               f"125-001 - Chen Wei - Mar 1, 2024 1016 AM/{NB}": notebook("chen")},
        roster="id,name\ns1,Bob Smith\ns3,Wei Chen\n",
        rows={f"123-456 - Bob Smith - Mar 1, 2024 1015 AM/{NB}": [("s1", "collected")],
              f"125-001 - Chen Wei - Mar 1, 2024 1016 AM/{NB}": [("s3", "collected")]},
        kept={"s1": "bob", "s3": "chen"}),
    "teams: submitted files only, never a draft": Case(
        files={f"Lesson 2/Bob Smith/Submitted files/{NB}": notebook("bob turned in"),
               f"Lesson 2/Bob Smith/Working files/{NB}": notebook("bob's later draft"),
               f"Lesson 2/Ann Lee/Working files/{NB}": notebook("ann's draft"),
               f"Lesson 2/Chen Wei/Submitted files/Copy of {NB}": notebook("chen")},
        rows={f"Lesson 2/Bob Smith/Submitted files/{NB}": [("bob-smith", "collected")],
              f"Lesson 2/Bob Smith/Working files/{NB}": [("bob-smith", "ignored")],
              f"Lesson 2/Ann Lee/Working files/{NB}": [("ann-lee", "skipped")],
              f"Lesson 2/Chen Wei/Submitted files/Copy of {NB}": [("chen-wei", "renamed")]},
        kept={"bob-smith": "bob turned in", "chen-wei": "chen"}, status=1,
        without_notebook={"ann-lee"}),
    "sakai: attachments, timestamp, text only": Case(
        files={f"Lesson 2/Smith, Bob(bsmith)/Submission attachment(s)/{NB}": notebook("bob"),
               "Lesson 2/Smith, Bob(bsmith)/timestamp.txt": b"20240301101530123",
               "Lesson 2/Lee, Ann(alee)/Lee, Ann(alee)_submissionText.html": b"<p>text</p>",
               "Lesson 2/Lee, Ann(alee)/timestamp.txt": b"20240301111530123",
               "Lesson 2/grades.csv": b"Display ID,ID,Last Name,First Name,grade\n"},
        rows={f"Lesson 2/Smith, Bob(bsmith)/Submission attachment(s)/{NB}":
                  [("bsmith", "collected")],
              "Lesson 2/Lee, Ann(alee)/Lee, Ann(alee)_submissionText.html":
                  [("alee", "skipped")]},
        kept={"bsmith": "bob"}, status=1, without_notebook={"alee"},
        times={"bsmith": "2024-03-01 10:15:30.000000 UTC"}),
    "nbgrader exchange, zipped": Case(
        files={f"inbound/s1+{L02}+2024-03-01 10:00:00.000000 UTC/{NB}": notebook("s1"),
               f"inbound/s2+{L02}+2024-03-01 11:00:00.000000 UTC+ab12/{NB}": notebook("s2 a"),
               f"inbound/s2+{L02}+2024-03-02 11:00:00.000000 UTC+cd34/{NB}": notebook("s2 b")},
        rows={f"inbound/s1+{L02}+2024-03-01 10:00:00.000000 UTC/{NB}": [("s1", "collected")],
              f"inbound/s2+{L02}+2024-03-01 11:00:00.000000 UTC+ab12/{NB}":
                  [("s2", "superseded")],
              f"inbound/s2+{L02}+2024-03-02 11:00:00.000000 UTC+cd34/{NB}":
                  [("s2", "collected")]},
        kept={"s1": "s1", "s2": "s2 b"}),
}


def collect(tmp_path: Path, case: Case, capsys) -> tuple[int, str, Workspace]:
    download = tmp_path / "download.zip"
    with zipfile.ZipFile(download, "w") as archive:
        for name, data in case.files.items():
            archive.writestr(zipfile.ZipInfo(name, (2024, 3, 9, 12, 0, 0)), data)
    workspace = Workspace(tmp_path / "course")
    options = list(case.options)
    if case.roster is not None:
        (tmp_path / "roster.csv").write_text(case.roster, encoding="utf-8")
        options += ["--roster", str(tmp_path / "roster.csv")]
    try:
        status = cli.main(["--workspace", str(workspace.root), "collect", str(download),
                           *options])
    except SystemExit as end:
        status = end.code
    return status, capsys.readouterr().out, workspace


def table_rows(out: str, file: str) -> list[tuple[str, str]]:
    """(student, outcome) of each row of ``file`` in collect's table."""
    found = []
    for line in out.splitlines():
        if line.startswith(file + "  "):
            student, _, outcome = line[len(file):].split()[:3]
            found.append((student, outcome))
    return found


@pytest.mark.parametrize("name", CASES)
def test_each_lms_download_is_collected_as_its_naming_says(name, tmp_path, capsys):
    case = CASES[name]
    status, out, workspace = collect(tmp_path, case, capsys)
    for file, expected in case.rows.items():
        assert sorted(table_rows(out, file)) == sorted(expected), f"{file}\n{out}"
    got = {p.parent.parent.name: json.loads(p.read_bytes())["cells"][-1]["source"]
           for p in workspace.submitted.glob(f"*/{L02}/{NB}")}
    assert got == {student: f"by {who}" for student, who in case.kept.items()}, out
    assert status == case.status, out
    manifest = json.loads(workspace.manifest.read_text())
    assert {key.rpartition("/")[0] for key in manifest.get("no_notebook", {})} \
        == case.without_notebook
    assert {s for s, _ in Collected.read(workspace).no_notebook} == case.without_notebook
    for student in case.without_notebook:
        assert "no notebook submitted" in out
        assert manifest["no_notebook"][f"{student}/{L02}"]["why"].startswith(
            "no notebook submitted")
    for student, stamp in case.times.items():
        assert (workspace.submitted / student / L02 / "timestamp.txt").read_text() == stamp
    late = {k.partition("/")[0] for k, v in manifest["submissions"].items() if v["late"]}
    assert late == case.late


REFUSED = {
    "every notebook one student's": {f"Lesson 2_{who}_{NB}": notebook(who)
                                     for who in ("ann", "bob", "chen")},
}


@pytest.mark.parametrize("name", REFUSED)
def test_a_download_that_would_put_the_class_under_one_student_is_refused(
        name, tmp_path, capsys):
    status, out, workspace = collect(tmp_path, Case(REFUSED[name], {}, {}), capsys)
    assert "every notebook of this download (3) would be student" in str(status)
    assert not list(workspace.submitted.glob("*/*/*.ipynb"))


def test_a_download_that_would_make_every_notebook_a_new_student_is_refused(tmp_path, capsys):
    first = Case({f"s{i}_{NB}": notebook(f"s{i}") for i in range(3)}, {}, {})
    status, out, workspace = collect(tmp_path, first, capsys)
    assert status == 0 and len(list(workspace.submitted.glob("*/*/*.ipynb"))) == 3
    second = Case({f"sub{i}x_{NB}": notebook(f"x{i}") for i in range(3)}, {}, {})
    status, out, workspace = collect(tmp_path, second, capsys)
    assert "every notebook of this download would be a new student" in str(status)
    assert len(list(workspace.submitted.glob("*/*/*.ipynb"))) == 3
    # the instructor who names the format says these are the students' names
    named = replace(second, options=("--format", "files"))
    status, out, workspace = collect(tmp_path, named, capsys)
    assert status == 0 and len(list(workspace.submitted.glob("*/*/*.ipynb"))) == 6
