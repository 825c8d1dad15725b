"""A PostgreSQL gradebook on a real server (a throwaway one, helpers/postgres.py).

Graders starting together on a fresh database create its schema once, and several graders
writing at once lose no row. The demo class, graded into PostgreSQL with the real command line,
holds the points its results get in SQLite; report, feedback, history and resuming work from
a workspace that has none of the grading's local files. A URL that cannot be used says why in
one line."""

import contextlib
import multiprocessing
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader import cli
from grader.course import read_lesson
from grader.demo import build_demo_class
from grader.grading.results import ExerciseResult, Outcome, Result
from grader.grading.submissions import find_submissions
from grader.records import database
from grader.records.lateness import CourseFile
from grader.workspace import Workspace
from helpers import gradebook, postgres

L01, L02 = "01_embeddings", "02_scaled_dot_product"
LESSONS = [L01, L02]  # the demo's two fastest lessons
# s01: malformed JSON (01), a catalogued mistake (02); s02: partly answered (01), an empty file
# (02); s06: correct (01), tampering with the checks (02: held for a human)
STUDENTS = ["s01", "s02", "s06"]
GRADERS, PER_GRADER = 5, 3  # the concurrent writers, and the students each one records


@pytest.fixture(scope="module")
def server():
    with postgres.throwaway_server() as running:
        yield running


@contextlib.contextmanager
def gradebook_url(url: str | None):
    """ATTENTION_COURSE_GRADEBOOK set to ``url`` (None: the workspace's SQLite file)."""
    with pytest.MonkeyPatch.context() as patch:
        if url is None:
            patch.delenv("ATTENTION_COURSE_GRADEBOOK", raising=False)
        else:
            patch.setenv("ATTENTION_COURSE_GRADEBOOK", url)
        yield


# -- several graders on one fresh database --------------------------------------------------------

def synthetic_results(first: int, count: int, lesson) -> list[Result]:
    """Results of students p<first>... : cell i passed where bit i of the student's number is
    set, so that every student's points differ from its neighbours'."""
    return [Result(f"p{n:03d}", lesson.name, Outcome.GRADED, "",
                   tuple(ExerciseResult(g, p, p, True, "") if (n >> i) & 1
                         else ExerciseResult(g, 0.0, p, False, "wrong")
                         for i, (g, p) in enumerate(lesson.points)), lesson.max_score)
            for n in range(first, first + count)]


def one_grader(root: Path, results: list[Result], lesson, start) -> None:
    """A grader process: waits for the others, then adds the lesson to the gradebook if it is
    missing (creating the gradebook first) and records its results one by one."""
    workspace = Workspace(root)
    start.wait(timeout=60)
    gradebook.ensure_lessons(workspace, [lesson.name])
    gradebook.record(workspace, results, {lesson.name: lesson})


@pytest.mark.slow
def test_graders_starting_together_create_the_schema_once_and_lose_no_row(server, tmp_path):
    """GRADERS processes, each with a workspace of its own (as on separate machines), start at
    the same instant on a fresh database: each creates the gradebook and adds the lesson if
    missing, then records its own students' results, all at once."""
    url, lesson = server.create_database(), read_lesson(L01)
    processes = multiprocessing.get_context("fork")  # this process's imports, at once
    start = processes.Barrier(GRADERS)
    with gradebook_url(url):
        graders = [processes.Process(target=one_grader, args=(
            tmp_path / f"grader{i}", synthetic_results(i * PER_GRADER, PER_GRADER, lesson),
            lesson, start)) for i in range(GRADERS)]
        for grader in graders:
            grader.start()
        for grader in graders:
            grader.join(timeout=300)
    assert [g.exitcode for g in graders] == [0] * GRADERS  # no IntegrityError, no deadlock

    students = GRADERS * PER_GRADER
    expected = synthetic_results(0, students, lesson)
    assert gradebook.scores(url) == {(r.student, L01): {e.grade_id: e.points for e in r.exercises}
                                     for r in expected}
    assert len({tuple(points.values()) for points in gradebook.scores(url).values()}) > 2
    with database.gradebook(url) as book:
        assert [a.name for a in book.assignments] == [L01]  # the lesson added once
        notebooks = book.find_assignment(L01).notebooks
        assert [len(nb.grade_cells) for nb in notebooks] == [len(lesson.cells)]
        rows = book.db.execute(database.RESULTS.select()).all()
    assert sorted(row.student for row in rows) == [r.student for r in expected]
    with gradebook_url(url):
        assert gradebook.recorded_results(Workspace(tmp_path / "elsewhere"),
                                          [(r.student, L01) for r in expected]) == expected


# -- the server as docs/instructors/scaling.md makes it ------------------------------------------

DOCS = Path(__file__).parents[2] / "docs" / "instructors" / "scaling.md"


def documented_commands(program: str) -> list[str]:
    """The arguments of the ``sudo -u postgres <program>`` line of the docs' server setup."""
    (line,) = [line for line in DOCS.read_text().splitlines()
               if line.startswith(f"sudo -u postgres {program} ")]
    return line.split("#")[0].split()[4:]


def test_the_documented_role_and_database_are_enough_to_grade_into(server, tmp_path):
    """The docs' createuser and createdb, run as the postgres superuser (what `sudo -u
    postgres` is): the role they make, no superuser, owns a database where the grader creates
    its gradebook and records results."""
    as_postgres = ["-h", str(server.socket_dir), "-U", "postgres"]
    role = documented_commands("createuser")
    role.remove("--pwprompt")  # the throwaway server trusts its socket: no password to type
    for program, arguments in (("createuser", role), ("createdb", documented_commands("createdb"))):
        done = subprocess.run([str(postgres.binaries() / program), *as_postgres, *arguments],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    url = f"postgresql://{role[-1]}@/{documented_commands('createdb')[-1]}" \
          f"?host={server.socket_dir}"
    lesson = read_lesson(L01)
    with gradebook_url(url):
        workspace = Workspace(tmp_path / "course")
        gradebook.ensure_lessons(workspace, [L01])
        gradebook.record(workspace, synthetic_results(0, 2, lesson), {L01: lesson})
    assert set(gradebook.scores(url)) == {("p000", L01), ("p001", L01)}


# -- the demo class, graded into PostgreSQL -------------------------------------------------------

@pytest.fixture(scope="module")
def demo(server, graded_class):
    """A small demo class (LESSONS, STUDENTS) collected, graded into a fresh PostgreSQL
    database by `python -m grader grade`, then its report and feedback; (workspace, url)."""
    url = server.create_database()
    students = [option for student in STUDENTS for option in ("--student", student)]
    workspace = graded_class(
        "demo", downloads=lambda workspace: build_demo_class(workspace, 9)[:len(LESSONS)],
        gradebook=url, grade=("--workers", "2", *students), command_line=True,
        then=("report", "feedback"))
    return workspace, url


def local_results(workspace: Workspace) -> dict:
    """What grading wrote to results/ (its output files), by (student, lesson)."""
    return {(p.parent.name, p.stem): Result.from_json(p.read_text())
            for p in workspace.results.glob("*/*.json")}


def pages(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*.html")}


@pytest.mark.slow
def test_the_demo_class_in_postgresql_has_the_points_it_has_in_sqlite(demo, tmp_path):
    """The gradebook's part of grading is writing each result: the same results recorded into
    a SQLite gradebook (grading is the same whatever the gradebook) hold the same points,
    flags and manual-grading marks, and give the same grades CSV and feedback pages."""
    workspace, url = demo
    with gradebook_url(url):
        graded = {(r.student, r.lesson): r for r in gradebook.results(workspace)}
        standings = gradebook.standings(workspace)
    assert len(graded) == len(STUDENTS) * len(LESSONS)
    assert graded == local_results(workspace)  # what grading produced, as the database holds it
    assert graded["s06", L02].held and graded["s01", L01].outcome.value == "ungradable"
    assert graded["s06", L01].score == read_lesson(L01).max_score > graded["s02", L01].score

    sqlite = Workspace(tmp_path / "sqlite")
    shutil.copytree(workspace.submitted, sqlite.submitted)
    shutil.copy(workspace.root / "collected.json", sqlite.root)
    with gradebook_url(None):
        gradebook.ensure_lessons(sqlite, LESSONS)
        gradebook.record(sqlite, list(graded.values()), {n: read_lesson(n) for n in LESSONS},
                         CourseFile())
        assert gradebook.scores(sqlite) == gradebook.scores(url)
        assert gradebook.standings(sqlite) == standings
        for command in ("report", "feedback"):
            assert cli.main(["--workspace", str(sqlite.root), command]) == 0
    csv = (workspace.report / "grades.csv").read_bytes()
    assert csv == (sqlite.report / "grades.csv").read_bytes()
    assert len(pages(workspace.feedback)) == len(graded)
    assert pages(workspace.feedback) == pages(sqlite.feedback)


@pytest.mark.slow
def test_report_feedback_and_history_need_only_the_gradebook(demo, tmp_path, capsys):
    """From an empty workspace on the same URL (another machine): the same grades CSV and
    feedback pages, the history; and a grader there with the same submissions resumes."""
    workspace, url = demo
    empty = Workspace(tmp_path / "elsewhere")
    empty.root.mkdir()
    with gradebook_url(url):
        for command in ("report", "feedback"):
            assert cli.main(["--workspace", str(empty.root), command]) == 0
        capsys.readouterr()
        assert cli.main(["--workspace", str(empty.root), "history", "s06", L02]) == 0
        shown = capsys.readouterr().out.splitlines()
        assert len(shown) == 1 and "graded" in shown[0] and "flagged" in shown[0]

        shutil.copytree(workspace.submitted, empty.submitted)  # the submissions, nothing else
        pending, done = gradebook.to_grade(
            empty, find_submissions(empty.submitted, LESSONS, STUDENTS), again=False)
    assert not list(empty.results.glob("*")) and not (empty.root / "autograded").exists()
    assert (empty.report / "grades.csv").read_bytes() == \
        (workspace.report / "grades.csv").read_bytes()
    assert pages(empty.feedback) == pages(workspace.feedback)
    assert pending == [] and len(done) == len(STUDENTS) * len(LESSONS)


# -- what an instructor sees when the URL cannot be used -------------------------------------------

def command_error(workspace: Path, url: str) -> str:
    with gradebook_url(url), pytest.raises(SystemExit) as stopped:
        cli.main(["--workspace", str(workspace), "report"])
    message = str(stopped.value.code)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_without_the_driver_the_instructor_is_told_to_install_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if psycopg were not installed
    message = command_error(tmp_path, f"postgresql://postgres@/gradebook?host={tmp_path}")
    assert "-c constraints.txt -e '.[postgres]'" in message, message


def test_an_unreachable_server_or_a_wrong_url_is_said_in_one_line(tmp_path):
    message = command_error(tmp_path, f"postgresql://grader:secret@/gradebook?host={tmp_path}")
    assert "cannot reach postgresql://grader:***@/gradebook" in message, message
    assert "secret" not in message
    assert "not a database URL" in command_error(tmp_path, "gradebook.db")
    assert "unknown kind of database" in command_error(tmp_path, "mysqlish://host/db")


def test_the_throwaway_server_says_how_to_install_postgresql(tmp_path, monkeypatch):
    monkeypatch.setattr(postgres, "DEBIAN_BINARIES", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(postgres.PostgresMissing, match="make postgresql"), \
            postgres.throwaway_server():
        pass

