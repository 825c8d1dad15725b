"""The instructor's commands: release, collect, grade, feedback, report, demo.

    python -m grader grade              # every submission in the workspace, one worker per core
    python -m grader --help             # all commands;  python -m grader grade --help, ...

The Makefile wraps each one (`make grade`, `make report`, ...). The workspace (submissions,
results, feedback, report, gradebook, course.toml) is course/ unless --workspace or
ATTENTION_COURSE_WORKSPACE says otherwise. nbgrader's gradebook is the one source of truth:
`grade` writes each submission to it as soon as it is graded (an interrupted batch loses nothing,
and `grade` again goes on where it stopped), and `feedback` and `report` read it, so a score a
human set in the formgrader is what counts.
"""

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

from tqdm import tqdm

from . import intake, release
from .course import ROOT, GradedCellError, lesson_names, read_lesson
from .grading.batch import Limits, grade_batch
from .grading.results import Outcome, Result
from .grading.submissions import Submission, find_submissions
from .outputs.feedback import write_feedback
from .outputs.report import write_canvas_csv, write_report
from .records import database, gradebook, lateness
from .sandbox.bwrap import SandboxUnavailable
from .workspace import Workspace


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    workspace = Workspace((args.workspace or Workspace.default().root).resolve())
    args.command(args, workspace)
    return 0


def parser() -> argparse.ArgumentParser:
    main_parser = argparse.ArgumentParser(
        prog="python -m grader", description="Grade the course's lessons with nbgrader: "
        "release, collect, grade, feedback, report, or all of it on a demo class.")
    main_parser.add_argument("--workspace", type=Path, help="the course workspace (default: "
                             "$ATTENTION_COURSE_WORKSPACE or course/)")
    commands = main_parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    def command(name, function, help_text):
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(command=function)
        return sub

    sub = command("release", run_release, "regenerate the student notebooks in notebooks/")
    sub.add_argument("lessons", nargs="*", help="lessons (default: all)")
    sub = command("collect", run_collect, "add a download of submissions (Canvas, Moodle, "
                  "Gradescope, Google Classroom/Drive, nbgrader's exchange) to the workspace: "
                  "each notebook's lesson is read from its cells, every file is listed with "
                  "what became of it, and the exit status is 1 if any was skipped")
    sub.add_argument("zip", type=Path, help="the downloaded zip, or a folder (e.g. nbgrader's "
                     "exchange inbound/)")
    sub.add_argument("--roster", type=Path, help="a CSV of the class: columns id and name "
                     "(optionally lms_id, email); students are matched to it by id, else name")
    sub.add_argument("--lesson", help="the lesson the download is for: a notebook of another "
                     "lesson is skipped, and an unreadable file is filed under it")
    sub.add_argument("--format", default="auto", choices=("auto", *intake.formats.BY_NAME),
                     help="the download's layout (default: detected)")
    sub.add_argument("--dry-run", action="store_true", help="print the table, write nothing")
    sub.add_argument("--again", action="store_true", help="read a download collected before "
                     "once more (notebooks already in the workspace stay as they are)")
    sub = command("grade", run_grade, "grade every submission, in parallel, each written to "
                  "the gradebook as soon as it is graded; a submission the gradebook already "
                  "holds, graded from the same files, is skipped")
    sub.add_argument("--lesson", action="append", help="only this lesson (repeatable)")
    sub.add_argument("--student", action="append", help="only this student (repeatable)")
    sub.add_argument("--again", action="store_true", help="grade submissions already graded "
                     "from the same files too (the earlier results stay in the history)")
    sub.add_argument("--scheduler", metavar="ADDRESS", help="grade on a Dask cluster: its "
                     "scheduler's address (tcp://host:8786) or scheduler file; each worker grades "
                     "as many submissions at once as it has threads (--workers is not used), "
                     "and this machine writes the gradebook")
    add_grading_options(sub)
    sub = command("history", run_history, "every result a student's lesson had in the "
                  "gradebook, oldest first, and the scores a human set")
    sub.add_argument("student")
    sub.add_argument("lesson")
    command("feedback", run_feedback, "write each student's HTML feedback, from the gradebook "
            "(with the files nbgrader release_feedback needs)")
    command("report", run_report, "write the class report from the gradebook: grades.csv, "
            "canvas.csv (Canvas's gradebook import) and report.html with plots")
    sub = command("demo", run_demo, "build a demo class of synthetic students, grade it, "
                  "write feedback and the report")
    sub.add_argument("--students", type=int, default=30, help="class size (default: 30)")
    add_grading_options(sub, cell_timeout=60.0)  # one demo student loops forever
    return main_parser


def add_grading_options(sub: argparse.ArgumentParser,
                        cell_timeout: float = Limits.cell_timeout) -> None:
    sub.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                     help="submissions graded side by side (default: one per core)")
    sub.add_argument("--cell-timeout", type=float, default=cell_timeout,
                     help=f"seconds a cell may run (default: {cell_timeout:g})")
    sub.add_argument("--budget", type=float, default=Limits.budget,
                     help=f"seconds a submission may run (default: {Limits.budget:g})")
    sub.add_argument("--no-sandbox", dest="sandboxed", action="store_false",
                     help="run student code without the bubblewrap sandbox, with your rights "
                     "(only for code you trust, where bubblewrap cannot run)")


# ---------------------------------------------------------------- commands

def run_release(args, workspace: Workspace) -> None:
    for notebook in release.release(args.lessons or lesson_names(), ROOT / "notebooks"):
        print(f"released {notebook.relative_to(ROOT)}")


def run_collect(args, workspace: Workspace) -> None:
    """Print the per-file table; exit with status 1 if any file or student was skipped."""
    try:
        roster = intake.Roster.read(args.roster) if getattr(args, "roster", None) else None
        done = intake.collect(args.zip, workspace, roster, args.lesson,
                               getattr(args, "format", "auto"), getattr(args, "dry_run", False),
                               getattr(args, "again", False))
    except intake.CollectError as err:
        raise SystemExit(f"collect: {err}") from None
    if done.rows:
        print(done.table())
    print(done.summary())
    if done.skipped:
        raise SystemExit(1)


def run_grade(args, workspace: Workspace) -> None:
    names = lesson_names()
    unknown = set(args.lesson or ()) - set(names)
    if unknown:
        raise SystemExit(f"unknown lesson(s) {sorted(unknown)}; known: {', '.join(names)}")
    submissions = find_submissions(workspace.submitted, args.lesson or names, args.student)
    if not submissions:
        print(f"nothing to grade in {workspace.submitted}")
        return
    lessons = {name: read_lesson(name) for name in sorted({s.lesson for s in submissions})}
    course = lateness.course_policy(workspace)
    gradebook.ensure_lessons(workspace.db_url, sorted({s.lesson for s in submissions}))
    gradebook.apply_course(workspace.db_url, course)
    pending, done = gradebook.to_grade(workspace, submissions, getattr(args, "again", False))
    if done:
        print(f"{len(done)} submission(s) already in the gradebook, graded from the same files: "
              f"skipped (--again grades them again)")
    if not pending:
        return
    limits = Limits(cell_timeout=args.cell_timeout, budget=args.budget)
    if not args.sandboxed:
        print("WARNING: --no-sandbox: student code runs with your rights; it can read and "
              "change your files, the gradebook included", file=sys.stderr)
    gradebook.keep_earlier_results(workspace, pending)
    recorder = gradebook.Recorder(workspace, lessons, course)
    started = time.monotonic()
    try:
        with tqdm(total=len(pending), unit="submission", desc="grading",
                  disable=None) as bar:
            def on_result(result: Result) -> None:
                recorder(result)  # in the gradebook before the next one is graded
                bar.update()

            results, not_graded = grade_pending(pending, lessons, workspace, args, limits,
                                                on_result)
    except SandboxUnavailable as err:
        raise SystemExit(f"Not grading: student code runs only in a sandbox, and {err}.\n"
                         f"Nothing was run. To grade without a sandbox anyway, with your rights "
                         f"(only for code you trust), pass --no-sandbox.") from None
    except KeyboardInterrupt:
        recorder.stop()
        print(f"\ninterrupted: {len(recorder.recorded)} of {len(pending)} submission(s) graded "
              f"and written to the gradebook; run grade again to go on where it stopped",
              file=sys.stderr)
        raise SystemExit(130) from None
    print(summary(results, time.monotonic() - started))
    if not_graded:
        print(f"{len(not_graded)} submission(s) not graded and not recorded (grade again to go "
              f"on with them):\n  " + "\n  ".join(not_graded), file=sys.stderr)
        raise SystemExit(1)


def grade_pending(pending: list[Submission], lessons: dict, workspace: Workspace, args,
                  limits: Limits, on_result) -> tuple[list[Result], list[str]]:
    """Grade here (threads over warm runners) or, with --scheduler, on a Dask cluster: the
    results, and why each submission that was not graded was not."""
    if not getattr(args, "scheduler", None):
        return grade_batch(pending, lessons, workspace, args.workers, limits, args.sandboxed,
                           on_result=on_result), []
    try:
        from .grading.cluster import ClusterError, NotAllGraded, grade_on_cluster
    except ImportError as err:
        raise SystemExit(f"Not grading: --scheduler needs Dask ({err}); install the course "
                         f"with its cluster extra: pip install -e '.[cluster]'") from None
    try:
        return grade_on_cluster(pending, lessons, workspace, args.scheduler, limits,
                                args.sandboxed, on_result), []
    except ClusterError as err:
        raise SystemExit(f"Not grading: {err}. Nothing was graded.") from None
    except NotAllGraded as err:
        return err.results, err.reasons


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
                f"({60 * len(results) / seconds:.0f} per minute); {flagged} need a human "
                f"(see the report)")
    return "\n".join(rows)


def load_results(workspace: Workspace) -> list[Result]:
    """Every result the gradebook holds, by student and lesson."""
    return gradebook.recorded_results(workspace, gradebook.scores(workspace.db_url))


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


def graded(workspace: Workspace) -> tuple[list[Result], dict]:
    """The results the gradebook holds and the gradebook's standings, brought up to date with
    the course file (due dates, extensions, late penalties on the scores as they stand)."""
    course = lateness.course_policy(workspace)
    if not workspace.root.is_dir() and not database.is_postgres(workspace.db_url):
        return [], {}  # no workspace, so no SQLite gradebook in it
    gradebook.refresh(workspace, course)
    standings = gradebook.standings(workspace, course)
    return gradebook.recorded_results(workspace, standings), standings


def run_history(args, workspace: Workspace) -> None:
    entries = gradebook.history(workspace, args.student, args.lesson)
    if not entries:
        raise SystemExit(f"no history for {args.student}, {args.lesson} in the gradebook "
                         f"{database.shown(workspace.db_url)}")
    for entry in entries:
        result = Result.from_dict(entry["result"])
        files = (entry.get("submission") or "unknown")[:12]
        flags = f"; flagged: {'; '.join(result.flags)}" if result.flags else ""
        print(f"{entry['recorded']}  {result.outcome.value:10}  {result.score:g} / "
              f"{result.max_score:g}  (files {files}){flags}")
    for _, _, grade_id, manual, extra in (o for o in gradebook.overrides(workspace.db_url)
                                           if o[:2] == (args.student, args.lesson)):
        print(f"set by hand: {grade_id} = {manual}" + (f" + {extra} extra" if extra else ""))


def run_feedback(args, workspace: Workspace) -> None:
    results, standings = graded(workspace)
    written = write_feedback(results, workspace.feedback, standings, workspace.submitted)
    print(f"wrote {len(written)} feedback pages in {workspace.feedback}")


def run_report(args, workspace: Workspace) -> None:
    lessons = course_points()
    results, standings = graded(workspace)
    grades, page = write_report(results, lessons, workspace.report, standings)
    course = lateness.course_policy(workspace)
    canvas = write_canvas_csv(workspace.report / "canvas.csv", standings, lessons,
                              intake.Collected.read(workspace), course.canvas)
    print(f"class report: {page}\ngrades for the LMS: {grades}\nfor Canvas's gradebook "
          f"import: {canvas}")


def run_demo(args, workspace: Workspace) -> None:
    from .demo import build_demo_class

    zips = build_demo_class(workspace, args.students)
    for archive in zips:
        run_collect(argparse.Namespace(zip=archive, lesson=None), workspace)
    run_grade(argparse.Namespace(lesson=None, student=None, workers=args.workers,
                                 cell_timeout=args.cell_timeout, budget=args.budget,
                                 sandboxed=args.sandboxed, again=False), workspace)
    run_feedback(args, workspace)
    run_report(args, workspace)


if __name__ == "__main__":
    sys.exit(main())
