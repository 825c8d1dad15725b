"""The instructor's commands, one function each: what ``python -m grader COMMAND`` runs once
``cli`` has read the command line, and what the Makefile's targets run.

Every command that touches the gradebook opens it once and works through that one session.
``grade`` and ``refresh`` write it; ``history``, ``feedback`` and ``report`` only read it. A
command returns its exit status, or ends with SystemExit and a one-line reason.
"""

import contextlib
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from . import intake
from . import release as releasing
from .course import ROOT, GradedCellError, Lesson, lesson_names, read_lesson
from .grading.batch import Graded, Handin, grade_batch, keep
from .grading.errors import ClusterError, NotAllGraded
from .grading.results import Outcome, Result
from .grading.submissions import Submission, find_submissions
from .intake.manifest import Collected
from .outputs.canvas import write_canvas_csv
from .outputs.feedback import write_feedback
from .outputs.report import write_report
from .records import database, gradebook, standings
from .records.lateness import course_policy
from .sandbox.bwrap import SandboxUnavailable
from .sandbox.client import Limits
from .workspace import Workspace

DEFAULT_LIMITS = Limits()


def release(lessons: list[str]) -> int:
    """Regenerate the student notebooks of ``lessons`` (all when empty) in notebooks/."""
    for notebook in releasing.release(lessons or lesson_names(), ROOT / "notebooks"):
        print(f"released {notebook.relative_to(ROOT)}")
    return 0


def collect(workspace: Workspace, source: Path, roster: Path | None = None,
            lesson: str | None = None, fmt: str = "auto", dry_run: bool = False,
            again: bool = False, groups: bool = False) -> int:
    """Collect a download; print the per-file table. 1 if any file or student was skipped."""
    try:
        done = intake.collect(source, workspace, intake.Roster.read(roster) if roster else None,
                              lesson, fmt, dry_run, again, groups)
    except intake.CollectError as err:
        raise SystemExit(f"collect: {err}") from None
    if done.rows:
        print(done.table())
    print(done.summary())
    return 1 if done.skipped else 0


def grade(workspace: Workspace, lessons: list[str] | None = None,
          students: list[str] | None = None, again: bool = False, workers: int = 1,
          limits: Limits = DEFAULT_LIMITS, sandboxed: bool = True,
          scheduler: str | None = None) -> int:
    """Grade what is new (everything with ``again``), each result written to the gradebook as
    soon as it is graded, after writing the course file's due dates into it. 1 if some
    submissions could not be graded here (not recorded: grading again goes on with them)."""
    names = lesson_names()
    unknown = set(lessons or ()) - set(names)
    if unknown:
        raise SystemExit(f"unknown lesson(s) {sorted(unknown)}; known: {', '.join(names)}")
    submissions = find_submissions(workspace.submitted, lessons or names, students)
    if not submissions:
        print(f"nothing to grade in {workspace.submitted}")
        return 0
    read = {name: read_lesson(name) for name in sorted({s.lesson for s in submissions})}
    course, collected, url = course_policy(workspace), Collected.read(workspace), workspace.db_url
    with database.gradebook(url) as book:
        gradebook.ensure_lessons(book, url, sorted(read))
        gradebook.refresh(book, url, course, collected)
        pending, done = gradebook.to_grade(book, submissions, again)
        if done:
            print(f"{len(done)} submission(s) already in the gradebook, graded from the same "
                  f"files: skipped (--again grades them again)")
        if not pending:
            return 0
        if not sandboxed:
            print("WARNING: --no-sandbox: student code runs with your rights; it can read and "
                  "change your files, the gradebook included", file=sys.stderr)
        recorder = gradebook.Recorder(book, url, workspace, read, course, collected)
        graded = _graded(pending, read, workspace, workers, limits, sandboxed, scheduler)
        return _record(graded, recorder, workspace, len(pending))


def _graded(pending: list[Submission], read: dict[str, Lesson], workspace: Workspace,
            workers: int, limits: Limits, sandboxed: bool,
            scheduler: str | None) -> Iterator[tuple[Handin, Graded]]:
    """Grading here (threads over warm runners) or, with ``scheduler``, on a Dask cluster."""
    if not scheduler:
        return grade_batch(pending, read, workspace, workers, limits, sandboxed)
    try:
        from .grading.cluster import grade_on_cluster
    except ImportError as err:
        raise SystemExit(f"Not grading: --scheduler needs Dask ({err}); install the course "
                         f"with its cluster extra: pip install -e '.[cluster]'") from None
    return grade_on_cluster(pending, read, scheduler, limits, sandboxed)


def _record(graded: Iterator[tuple[Handin, Graded]], recorder: gradebook.Recorder,
            workspace: Workspace, total: int) -> int:
    """Keep and record each result as it comes; say how it went."""
    started, not_graded = time.monotonic(), []
    try:
        with _interrupts_between_writes() as writing, \
                tqdm(total=total, unit="submission", desc="grading", disable=None) as bar:
            for handin, done in graded:
                with writing():  # Ctrl-C never splits one result's writes
                    if problem := _keep_and_record(handin, done, recorder, workspace):
                        not_graded.append(problem)
                bar.update()
    except SandboxUnavailable as err:
        raise SystemExit(f"Not grading: student code runs only in a sandbox, and {err}.\n"
                         f"Nothing was run. To grade without a sandbox anyway, with your rights "
                         f"(only for code you trust), pass --no-sandbox.") from None
    except ClusterError as err:
        raise SystemExit(f"Not grading: {err}. Nothing was graded.") from None
    except NotAllGraded as err:
        not_graded += err.reasons
    except KeyboardInterrupt:
        print(f"\ninterrupted: {len(recorder.recorded)} of {total} submission(s) graded and "
              f"written to the gradebook; run grade again to go on where it stopped",
              file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        graded.close()  # stops what is still running
    print(summary(recorder.recorded, time.monotonic() - started))
    if not_graded:
        print(f"{len(not_graded)} submission(s) not graded and not recorded (grade again to go "
              f"on with them):\n  " + "\n  ".join(not_graded), file=sys.stderr)
        return 1
    return 0


def _keep_and_record(handin: Handin, done: Graded, recorder: gradebook.Recorder,
                     workspace: Workspace) -> str | None:
    """Keep one result and record it; what went wrong, in a line, if that failed (the batch
    goes on, and grading again takes this submission up again)."""
    graded = Graded(done.result.printable(), done.output)
    try:
        keep(graded, workspace)
        recorder.record(handin, graded.result)
    except Exception as err:  # a grader bug, or the disk: this submission only
        return (f"{handin.student} {handin.lesson}: not recorded "
                f"({type(err).__name__}: {str(err)[:300]})")
    return None


@contextlib.contextmanager
def _interrupts_between_writes():
    """Ctrl-C (SIGINT) as usual, except inside ``writing()``, where it waits for the block's
    end. A process that ignores SIGINT (started in the background) keeps ignoring it."""
    state = {"writing": False, "pending": False}

    def handler(signum, frame):
        if state["writing"]:
            state["pending"] = True
        else:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def writing():
        state["writing"] = True
        try:
            yield
        finally:
            state["writing"] = False
        if state["pending"]:
            raise KeyboardInterrupt

    before = signal.getsignal(signal.SIGINT)
    if before is signal.default_int_handler:
        signal.signal(signal.SIGINT, handler)
    try:
        yield writing
    finally:
        signal.signal(signal.SIGINT, before)


def summary(results: list[Result], seconds: float) -> str:
    """A table: per lesson, how many submissions ended in each outcome, and the mean score."""
    header = f"{'lesson':24}" + "".join(f"{o:>12}" for o in Outcome) + f"{'mean score':>14}"
    rows = [header, "-" * len(header)]
    for lesson in sorted({r.lesson for r in results}):
        mine = [r for r in results if r.lesson == lesson]
        counts = Counter(r.outcome for r in mine)
        mean = sum(r.score for r in mine) / len(mine)
        rows.append(f"{lesson:24}" + "".join(f"{counts[o]:>12}" for o in Outcome)
                    + f"{mean:>8.1f} / {mine[0].max_score:g}")
    flagged = sum(1 for r in results if r.needs_human)
    rows.append(f"{len(results)} submissions in {seconds:.1f} s "
                f"({60 * len(results) / max(seconds, 1e-9):.0f} per minute); {flagged} need a "
                f"human (see the report)")
    return "\n".join(rows)


def refresh(workspace: Workspace) -> int:
    """Write the course file's due dates and extensions, and every late penalty as the scores
    stand, into the gradebook (``grade`` does it too, before grading)."""
    url = workspace.db_url
    with database.gradebook(url) as book:
        gradebook.refresh(book, url, course_policy(workspace), Collected.read(workspace))
    print(f"the gradebook {database.shown(url)} holds course.toml's due dates and extensions, "
          f"and the late penalties of the scores as they stand")
    return 0


def history(workspace: Workspace, student: str, lesson: str) -> int:
    """Print every result a student's lesson had in the gradebook, and the scores set by hand."""
    with database.gradebook(workspace.db_url) as book:
        entries = standings.history(book, student, lesson)
        overrides = [o for o in standings.overrides(book) if o[:2] == (student, lesson)]
    if not entries:
        raise SystemExit(f"no history for {student}, {lesson} in the gradebook "
                         f"{database.shown(workspace.db_url)}")
    for entry in entries:
        result = Result.from_dict(entry["result"])
        files = (entry.get("submission") or "unknown")[:12]
        flags = f"; flagged: {'; '.join(result.flags)}" if result.flags else ""
        print(f"{entry['recorded']}  {result.outcome.value:10}  {result.score:g} / "
              f"{result.max_score:g}  (files {files}){flags}")
    for _, _, grade_id, manual, extra in overrides:
        print(f"set by hand: {grade_id} = {manual}" + (f" + {extra} extra" if extra else ""))
    return 0


def _gradebook_view(workspace: Workspace
                    ) -> tuple[list[Result], standings.Standings, list[str]]:
    """The results and standings the gradebook holds, and what it does not hold yet of the
    course file (read only)."""
    if not workspace.root.is_dir() and not database.is_postgres(workspace.db_url):
        return [], {}, []  # no workspace, so no SQLite gradebook in it
    course = course_policy(workspace)
    with database.gradebook(workspace.db_url) as book:
        found = standings.standings(book, course, Collected.read(workspace))
        results = standings.recorded_results(book, found)
        stale = standings.out_of_date(book, course, found)
    return results, found, stale


def _say_if_out_of_date(stale: list[str]) -> None:
    if stale:
        shown = ", ".join(stale[:3]) + (f" and {len(stale) - 3} more" if len(stale) > 3 else "")
        print(f"note: the gradebook does not hold course.toml's {shown} yet: `make refresh` "
              f"(python -m grader refresh) writes them", file=sys.stderr)


def feedback(workspace: Workspace) -> int:
    """Write each student's feedback page from the gradebook, with nbgrader's exchange files
    of the submission that was graded."""
    results, found, stale = _gradebook_view(workspace)
    written = write_feedback(results, workspace.feedback, found, workspace.autograded)
    print(f"wrote {len(written)} feedback pages in {workspace.feedback}")
    _say_if_out_of_date(stale)
    return 0


def course_points() -> dict[str, list[tuple[str, float]]]:
    """Every lesson's graded cells and points; a lesson that cannot be read is left out, and
    said so."""
    points = {}
    for name in lesson_names():
        try:
            points[name] = read_lesson(name).points
        except GradedCellError as err:
            print(f"left out of the report: {err}", file=sys.stderr)
    return points


def report(workspace: Workspace) -> int:
    """Write the class report, grades.csv and canvas.csv from the gradebook."""
    lessons = course_points()
    results, found, stale = _gradebook_view(workspace)
    collected, course = Collected.read(workspace), course_policy(workspace)
    no_notebook = {key: why for key, why in collected.no_notebook.items() if key not in found}
    assigned = {*course.due, *(lesson for _, lesson in no_notebook if lesson)}
    grades, page = write_report(results, lessons, workspace.report, found, no_notebook,
                                assigned)
    canvas = write_canvas_csv(workspace.report / "canvas.csv", found, lessons, collected,
                              course.canvas, assigned)
    print(f"class report: {page}\ngrades for the LMS: {grades}\nfor Canvas's gradebook "
          f"import: {canvas}")
    _say_if_out_of_date(stale)
    return 0


def demo(workspace: Workspace, students: int = 30, workers: int = 1,
         limits: Limits = DEFAULT_LIMITS, sandboxed: bool = True) -> int:
    """A synthetic class collected, graded, given feedback and reported on."""
    from .demo import build_demo_class

    for archive in build_demo_class(workspace, students):
        collect(workspace, archive)
    status = grade(workspace, workers=workers, limits=limits, sandboxed=sandboxed)
    feedback(workspace)
    report(workspace)
    return status


def watch(workspace: Workspace, exchange: Path | None, lms_folder: Path | None,
          workers: int = 1, limits: Limits = DEFAULT_LIMITS, sandboxed: bool = True,
          poll: float = 2.0) -> int:
    """Grade submissions as they arrive and hand their feedback back (docs/instructors/watch.md),
    until SIGTERM or Ctrl-C."""
    from .watch import SettingsError
    from .watch.service import Options
    from .watch.service import watch as run_watch

    try:
        return run_watch(workspace, Options(exchange, lms_folder, workers, limits, sandboxed,
                                            poll))
    except SettingsError as err:
        raise SystemExit(f"watch: {err}") from None
    except SandboxUnavailable as err:
        raise SystemExit(f"Not watching: student code runs only in a sandbox, and {err}. "
                         f"--no-sandbox grades anyway, with your rights.") from None


def gradescope_build(out: Path, **settings) -> int:
    """Write a lesson's Gradescope autograder zip to ``out`` (``settings``: those of
    ``gradescope.settings.Settings``)."""
    from .gradescope.build import build
    from .gradescope.settings import Settings, SettingsError

    try:
        path = build(Settings(**settings), out)
    except SettingsError as err:
        raise SystemExit(f"gradescope: {err}") from None
    print(f"wrote {path}: upload it as the assignment's autograder (Configure Autograder > "
          f"Zip file upload); docs/instructors/gradescope.md says what it does")
    return 0


def gradescope_run() -> int:
    """Grade the submission in /autograder (run_autograder's command)."""
    from .gradescope.run import run_autograder

    return run_autograder()
