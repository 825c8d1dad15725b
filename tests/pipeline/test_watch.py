"""``python -m grader watch`` for real: three Unix users (made here with useradd, removed after)
submit with nbgrader's own ``submit`` to a shared exchange, the watcher grades each submission in
the sandbox, records it and releases its feedback, and each user fetches their own feedback with
``nbgrader fetch_feedback`` and can read nobody else's. Then a small burst (a student submitting
twice, a kernel that dies, the exchange gone for a moment) and a restart in the middle, which
grades nothing twice and loses nothing. Lesson 01's demo notebooks grade in under a second."""

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nbformat
import pytest
from nbgrader.utils import notebook_hash

from grader.course import COURSE_ID, ROOT, lesson_names
from grader.demo import KERNEL_DEATH, MISTAKES, practice_names, student_notebook
from grader.records import database
from grader.timestamps import nbgrader_time
from grader.watch.service import Options, Watcher
from grader.workspace import Workspace

L01 = lesson_names()[0]
NBGRADER = [sys.executable, "-m", "nbgrader"]
SITE_PACKAGES = next(p for p in sys.path if p.endswith("site-packages"))
WAIT_S = 240  # how long a test waits for the watcher at most (no timing is asserted)


def notebook(kind: str = "correct") -> bytes:
    answers = dict.fromkeys(practice_names(L01))
    extra = None
    if kind == "mistake":
        answers["sinusoidal_positional_encoding"] = MISTAKES["sinusoidal_positional_encoding"][0]
    elif kind == "dies":
        extra = KERNEL_DEATH
    return nbformat.writes(student_notebook(L01, answers, extra)).encode()


@pytest.fixture(scope="module")
def users():
    """Three throwaway accounts of this machine, each with a home only they can read."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("making Unix users needs root and useradd")
    homes = Path(tempfile.mkdtemp(prefix="watch-homes-"))
    homes.chmod(0o755)
    names = [f"acw{who}{os.getpid() % 100000}" for who in ("ann", "bob", "cy")]
    made = []
    try:
        for name in names:
            subprocess.run(["useradd", "--create-home", "--home-dir", str(homes / name),
                            "--shell", "/usr/sbin/nologin", name], check=True,
                           capture_output=True)
            made.append(name)
            (homes / name).chmod(0o700)
        yield [pwd.getpwnam(name) for name in names]
    finally:
        for name in made:
            subprocess.run(["userdel", name], check=False, capture_output=True)
        shutil.rmtree(homes, ignore_errors=True)


@pytest.fixture
def exchange():
    """An exchange as on a hub (everyone may write its root), with lesson 01 released by
    nbgrader's own release_assignment."""
    root = Path(tempfile.mkdtemp(prefix="watch-exchange-"))
    root.chmod(0o1777)
    released = subprocess.run(
        [*NBGRADER, "release_assignment", L01, f"--Exchange.root={root}"], cwd=ROOT / "grader",
        env=os.environ | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
        capture_output=True, text=True, timeout=300)
    assert released.returncode == 0, released.stdout + released.stderr
    yield root
    shutil.rmtree(root, ignore_errors=True)


def student_python(user: pwd.struct_passwd) -> list[str]:
    """This Python as a student's account can run it: itself, or (where it lives in a folder
    only its owner may enter) the system's Python of the same version on its packages."""
    try:
        subprocess.run([sys.executable, "-c", "import nbgrader"], user=user.pw_uid,
                       env={"PYTHONPATH": SITE_PACKAGES}, capture_output=True, check=True)
        return [sys.executable]
    except (OSError, subprocess.CalledProcessError):
        pass
    system = shutil.which(f"python{sys.version_info.major}.{sys.version_info.minor}",
                          path="/usr/local/bin:/usr/bin")
    if system is None:
        pytest.skip("no Python of this version that the students' accounts may run")
    return [system]


def as_user(user: pwd.struct_passwd, *command: str, check: bool = True
            ) -> subprocess.CompletedProcess:
    home = Path(user.pw_dir)
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
           "PYTHONPATH": SITE_PACKAGES}
    if command[0] == sys.executable:
        command = (*student_python(user), *command[1:])
    done = subprocess.run(list(command), cwd=home, env=env, user=user.pw_uid,
                          group=user.pw_gid, extra_groups=[], capture_output=True, text=True,
                          timeout=300)
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def nbgrader_as(user: pwd.struct_passwd, step: str, exchange: Path, check: bool = True):
    return as_user(user, *NBGRADER, step, L01, f"--course={COURSE_ID}",
                   f"--Exchange.root={exchange}", check=check)


def student_submits(user: pwd.struct_passwd, exchange: Path, kind: str) -> None:
    """The student's own copy of the lesson, filled in, handed in with ``nbgrader submit``."""
    folder = Path(user.pw_dir) / L01
    as_user(user, "mkdir", "-p", str(folder))
    (folder / f"{L01}.ipynb").write_bytes(notebook(kind))
    os.chown(folder / f"{L01}.ipynb", user.pw_uid, user.pw_gid)
    nbgrader_as(user, "submit", exchange)


def watching(workspace: Workspace, exchange: Path, **options):
    """A watcher on its own thread, and the event that stops it."""
    watcher = Watcher(workspace, Options(exchange, poll=0.2, recheck=1.0, **options))
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    return watcher, stop, thread


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def history(workspace: Workspace) -> dict[tuple[str, str], list[dict]]:
    with database.gradebook(workspace.db_url) as book:
        return {key: database.entries(book, *key) for key in database.newest(book)}


def outbound(exchange: Path) -> Path:
    return exchange / COURSE_ID / "feedback"


def test_three_students_get_their_own_feedback_and_nobody_elses(tmp_path, users, exchange):
    workspace = Workspace(tmp_path / "course")
    ann, bob, cy = users
    kinds = {ann.pw_name: "correct", bob.pw_name: "mistake", cy.pw_name: "correct"}
    for user in users:
        student_submits(user, exchange, kinds[user.pw_name])
    watcher, stop, thread = watching(workspace, exchange)
    try:
        wait_for(lambda: watcher.counts["handed back"] >= 3, "three feedback pages")
    finally:
        stop.set()
        thread.join()

    for user in users:
        nbgrader_as(user, "fetch_feedback", exchange)
        (page,) = (Path(user.pw_dir) / L01 / "feedback").glob(f"*/{L01}.html")
        text = page.read_text()
        assert user.pw_name in text
        assert not any(other.pw_name in text for other in users if other is not user)
        # before the due date (none is set): the checks of the notebook, never the score
        assert "The check in your notebook" in text and "Score:" not in text
    bobs = next((Path(bob.pw_dir) / L01 / "feedback").glob(f"*/{L01}.html")).read_text()
    assert "sin and cos swapped" in bobs and "not passed" in bobs

    # nobody can list the exchange's feedback or inbound, nor read another's home (where the
    # secret that names their feedback lives)
    for path in (outbound(exchange), exchange / COURSE_ID / "inbound", Path(ann.pw_dir)):
        assert as_user(bob, "ls", str(path), check=False).returncode != 0, path
    # bob asking for ann's feedback gets his own: his cache holds no secret of hers
    as_user(bob, *NBGRADER, "fetch_feedback", L01, f"--course={COURSE_ID}",
            f"--Exchange.root={exchange}", f"--CourseDirectory.student_id={ann.pw_name}",
            "--Exchange.assignment_dir=asked-for-ann", check=False)
    for page in (Path(bob.pw_dir) / "asked-for-ann").rglob("*.html"):
        assert ann.pw_name not in page.read_text() and bob.pw_name in page.read_text()
    assert {key[0] for key in history(workspace)} == set(kinds)


def submit_as_root(exchange: Path, student: str, kind: str, stamp: str) -> str:
    """What ``nbgrader submit`` leaves in inbound/ (the instructor's copy is believed); returns
    the secret."""
    folder = exchange / COURSE_ID / "inbound" / f"{student}+{L01}+{stamp}+{os.urandom(3).hex()}"
    folder.mkdir(parents=True)
    (folder / f"{L01}.ipynb").write_bytes(notebook(kind))
    (folder / "timestamp.txt").write_text(stamp)
    secret = os.urandom(16).hex()
    (folder / "submission_secret.txt").write_text(secret)
    return secret


def released(exchange: Path, secret: str) -> Path:
    return outbound(exchange) / f"{notebook_hash(secret=secret, notebook_id=L01)}.html"


def test_a_burst_with_a_crash_and_the_exchange_gone_for_a_while(tmp_path, exchange):
    workspace = Workspace(tmp_path / "course")
    (workspace.root).mkdir(parents=True)
    (workspace.root / "watch.toml").write_text('[default]\nbefore_due = "hidden"\n')
    secrets = {f"s{n}": submit_as_root(exchange, f"s{n}", "correct",
                                       nbgrader_time(time_of(n))) for n in range(4)}
    older = submit_as_root(exchange, "s0", "mistake", nbgrader_time(time_of(-1)))
    secrets["dies"] = submit_as_root(exchange, "dies", "dies", nbgrader_time(time_of(5)))
    inbound = exchange / COURSE_ID / "inbound"
    inbound.rename(inbound.with_name("away"))
    watcher, stop, thread = watching(workspace, exchange, workers=2)
    try:
        wait_for(lambda: watcher.problems, "the watcher to notice the exchange is gone")
        inbound.with_name("away").rename(inbound)
        wait_for(lambda: all(released(exchange, s).is_file() for s in secrets.values()),
                 "every student's feedback")
    finally:
        stop.set()
        thread.join()
    graded = history(workspace)
    assert all(len(entries) == 1 for entries in graded.values())  # s0's newest only
    assert not released(exchange, older).is_file()
    dies = graded["dies", L01][0]["result"]
    assert dies["outcome"] == "crashed"
    assert all(graded[f"s{n}", L01][0]["result"]["score"] == dies["max_score"]
               for n in range(4))
    page = released(exchange, secrets["s1"]).read_text()
    assert "The hidden tests: passed." in page and "Score:" not in page


def time_of(n: int) -> datetime:
    return datetime(2025, 3, 1, 10, tzinfo=UTC) + timedelta(minutes=n)


def test_a_restart_in_the_middle_grades_nothing_twice_and_loses_nothing(tmp_path, exchange):
    workspace = Workspace(tmp_path / "course")
    workspace.root.mkdir(parents=True)
    (workspace.course_file).write_text(f'[due]\n{L01} = "2025-03-02T00:00:00Z"\n')
    secrets = [submit_as_root(exchange, f"r{n}", "correct", nbgrader_time(time_of(n)))
               for n in range(6)]
    first, stop, thread = watching(workspace, exchange)
    try:
        wait_for(lambda: first.counts["recorded"] >= 2, "two submissions graded")
    finally:
        stop.set()
        thread.join()
    assert first.counts["recorded"] < len(secrets)  # stopped in the middle
    second, stop, thread = watching(workspace, exchange)
    try:
        wait_for(lambda: all(released(exchange, s).is_file() for s in secrets),
                 "every student's feedback")
    finally:
        stop.set()
        thread.join()
    graded = history(workspace)
    assert len(graded) == len(secrets)
    assert all(len(entries) == 1 for entries in graded.values())  # nothing graded twice
    assert first.counts["recorded"] + second.counts["recorded"] == len(secrets)
    # the due date has passed: the full feedback, with the score
    assert "Score:" in released(exchange, secrets[-1]).read_text()
    ledger = json.loads((workspace.root / "watch" / "handed_back.json").read_text())
    assert {entry["view"] for entry in ledger.values()} == {"full"}
