"""Feedback as submissions arrive: seconds from `nbgrader submit` to the feedback being
fetchable, over a burst of students submitting at once.

`python -m grader watch`'s service runs on its own thread with two workers (the course's two
cores), its runners warmed by one submission first, as a running service's are. Then a burst of
students submit lesson 01 through nbgrader's own submit code (``ExchangeSubmit``, in this
process, one student id each; the exchange is a throwaway folder). A submission's time runs from
the end of its submit to the moment its page is in the exchange under the hash of its secret,
where `nbgrader fetch_feedback` finds it. Reports the median and the worst, and whether every
student's page arrived.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nbformat  # noqa: E402
from nbgrader.auth import Authenticator  # noqa: E402
from nbgrader.coursedir import CourseDirectory  # noqa: E402
from nbgrader.exchange.default import ExchangeSubmit  # noqa: E402
from nbgrader.utils import notebook_hash  # noqa: E402

from grader.course import COURSE_ID, lesson_names  # noqa: E402
from grader.demo import practice_names, student_notebook  # noqa: E402
from grader.watch.service import Options, Watcher  # noqa: E402
from grader.workspace import Workspace  # noqa: E402

LESSON = lesson_names()[0]
GIVE_UP_S = 900


def release_lesson(exchange: Path) -> None:
    subprocess.run([sys.executable, "-m", "nbgrader", "release_assignment", LESSON,
                    f"--Exchange.root={exchange}"], cwd=ROOT / "grader", check=True,
                   capture_output=True, env=os.environ | {"PATH": f"{Path(sys.executable).parent}"
                                                          f":{os.environ['PATH']}"})


def submit(exchange: Path, home: Path, student: str) -> Path:
    """nbgrader's submit for ``student`` from ``home``; the page's path once released."""
    folder = home / LESSON
    folder.mkdir(parents=True)
    answers = dict.fromkeys(practice_names(LESSON))
    (folder / f"{LESSON}.ipynb").write_text(nbformat.writes(student_notebook(LESSON, answers)))
    coursedir = CourseDirectory(course_id=COURSE_ID, student_id=student, assignment_id=LESSON)
    ExchangeSubmit(coursedir=coursedir, authenticator=Authenticator(), root=str(exchange),
                   cache=str(home / "cache"), assignment_dir=str(home)).start()
    (cached,) = (home / "cache" / COURSE_ID).glob(f"{student}+{LESSON}+*")
    secret = (cached / "submission_secret.txt").read_text()
    page = notebook_hash(secret=secret, notebook_id=LESSON)
    return exchange / COURSE_ID / "feedback" / f"{page}.html"


def wait_for_pages(pages: dict[str, Path], since: dict[str, float]) -> dict[str, float]:
    """Seconds from each submit's end to its page (polled every 20 ms)."""
    seen, deadline = {}, time.monotonic() + GIVE_UP_S
    while len(seen) < len(pages) and time.monotonic() < deadline:
        for student, page in pages.items():
            if student not in seen and page.is_file():
                seen[student] = time.monotonic() - since[student]
        time.sleep(0.02)
    return seen


def measure(students: int = 50, workers: int = 2) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-watch-") as scratch:
        scratch = Path(scratch)
        exchange = scratch / "exchange"
        exchange.mkdir(mode=0o1777)
        release_lesson(exchange)
        watcher = Watcher(Workspace(scratch / "course"),
                          Options(exchange, workers=workers, poll=0.5, health=3600))
        stop = threading.Event()
        thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
        thread.start()
        try:
            warm = submit(exchange, scratch / "warm-up", "warmup")
            wait_for_pages({"warmup": warm}, {"warmup": time.monotonic()})
            pages, since = {}, {}
            for n in range(students):
                student = f"b{n:02d}"
                pages[student] = submit(exchange, scratch / student, student)
                since[student] = time.monotonic()
            seconds = wait_for_pages(pages, since)
        finally:
            stop.set()
            thread.join()
    times = sorted(seconds.values())
    return {"students": students, "workers": workers, "all_fetchable": len(times) == students,
            "median_s": statistics.median(times) if times else None,
            "worst_s": times[-1] if times else None, "seconds": times}


def report(result: dict) -> str:
    return (f"watch: {result['students']} students submitting at once, {result['workers']} "
            f"workers: feedback fetchable {result['median_s']:.1f} s after submit (median), "
            f"{result['worst_s']:.1f} s at worst; every page: {result['all_fetchable']}")


if __name__ == "__main__":
    print(report(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 50)))
