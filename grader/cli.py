"""The instructor's command line: ``python -m grader COMMAND``; each command is one function of
``commands``, which this module only calls with what the command line says.

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
from pathlib import Path

from . import commands
from .intake.formats import BY_NAME
from .sandbox.client import Limits
from .workspace import Workspace


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    workspace = Workspace((args.workspace or Workspace.default().root).resolve())
    return args.run(args, workspace)


def parser() -> argparse.ArgumentParser:
    main_parser = argparse.ArgumentParser(
        prog="python -m grader", description="Grade the course's lessons with nbgrader: "
        "release, collect, grade, feedback, report, or all of it on a demo class.")
    main_parser.add_argument("--workspace", type=Path, help="the course workspace (default: "
                             "$ATTENTION_COURSE_WORKSPACE or course/)")
    subcommands = main_parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    def command(name, run, help_text):
        sub = subcommands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(run=run)
        return sub

    sub = command("release", lambda a, w: commands.release(a.lessons),
                  "regenerate the student notebooks in notebooks/")
    sub.add_argument("lessons", nargs="*", help="lessons (default: all)")
    sub = command("collect", lambda a, w: commands.collect(
        w, a.zip, a.roster, a.lesson, a.format, a.dry_run, a.again, a.groups),
        "add a download of submissions (Canvas, Moodle, Gradescope, Google Classroom/Drive, "
        "Blackboard, Brightspace, Microsoft Teams, Sakai, nbgrader's exchange) to the "
        "workspace: each notebook's lesson is read from its cells, "
        "every file is listed with what became of it, and the exit status is 1 if any was "
        "skipped")
    sub.add_argument("zip", type=Path, help="the downloaded zip, or a folder (e.g. nbgrader's "
                     "exchange inbound/)")
    sub.add_argument("--roster", type=Path, help="a CSV of the class: columns id and name "
                     "(optionally lms_id, email, group); matched by id, else name")
    sub.add_argument("--lesson", help="the lesson the download is for: a notebook of another "
                     "lesson is skipped, and an unreadable file is filed under it")
    sub.add_argument("--format", default="auto", choices=("auto", *BY_NAME),
                     help="the download's layout (default: detected)")
    sub.add_argument("--dry-run", action="store_true", help="print the table, write nothing")
    sub.add_argument("--again", action="store_true", help="read a download collected before "
                     "once more (notebooks already in the workspace stay as they are)")
    sub.add_argument("--groups", action="store_true", help="a group assignment: each member "
                     "of the roster's group gets the notebook a member handed in")
    sub = command("grade", lambda a, w: commands.grade(
        w, a.lesson, a.student, a.again, a.workers, limits(a), a.sandboxed, a.scheduler),
        "grade every submission, in parallel, each written to the gradebook as soon as it is "
        "graded; a submission the gradebook already holds, graded from the same files, is "
        "skipped")
    sub.add_argument("--lesson", action="append", help="only this lesson (repeatable)")
    sub.add_argument("--student", action="append", help="only this student (repeatable)")
    sub.add_argument("--again", action="store_true", help="grade submissions already graded "
                     "from the same files too (the earlier results stay in the history)")
    sub.add_argument("--scheduler", metavar="ADDRESS", help="grade on a Dask cluster: its "
                     "scheduler's address (tcp://host:8786) or scheduler file; each worker grades "
                     "as many submissions at once as it has threads (--workers is not used), "
                     "and this machine writes the gradebook")
    add_grading_options(sub)
    command("refresh", lambda a, w: commands.refresh(w), "write course.toml's due dates and "
            "extensions, and every late penalty as the scores stand, into the gradebook "
            "(grade does it too)")
    sub = command("history", lambda a, w: commands.history(w, a.student, a.lesson),
                  "every result a student's lesson had in the gradebook, oldest first, and the "
                  "scores a human set")
    sub.add_argument("student")
    sub.add_argument("lesson")
    command("feedback", lambda a, w: commands.feedback(w), "write each student's HTML "
            "feedback, from the gradebook (with the files nbgrader release_feedback needs)")
    command("report", lambda a, w: commands.report(w), "write the class report from the "
            "gradebook: grades.csv, canvas.csv (Canvas's gradebook import) and report.html "
            "with plots")
    sub = command("demo", lambda a, w: commands.demo(
        w, a.students, a.workers, limits(a), a.sandboxed),
        "build a demo class of synthetic students, grade it, write feedback and the report")
    sub.add_argument("--students", type=int, default=30, help="class size (default: 30)")
    add_grading_options(sub, cell_timeout=60.0)  # one demo student loops forever
    add_watch(command)
    add_gradescope(subcommands)
    return main_parser


def add_watch(command) -> None:
    """``watch``: grade submissions as they arrive (docs/instructors/watch.md)."""
    sub = command("watch", lambda a, w: commands.watch(
        w, None if a.no_exchange else a.exchange, a.lms_folder, a.workers, limits(a),
        a.sandboxed, a.poll),
        "grade submissions as they arrive in nbgrader's exchange (or an LMS folder), record "
        "them and release their feedback through the exchange; runs until stopped")
    sub.add_argument("--exchange", type=Path, default=Path(os.environ.get(
        "ATTENTION_COURSE_EXCHANGE", "/srv/nbgrader/exchange")),
        help="nbgrader's exchange root (default: $ATTENTION_COURSE_EXCHANGE or "
        "/srv/nbgrader/exchange)")
    sub.add_argument("--no-exchange", action="store_true", help="watch only --lms-folder")
    sub.add_argument("--lms-folder", type=Path, help="also watch this folder, which an LMS "
                     "sync fills with downloads")
    sub.add_argument("--poll", type=float, default=2.0,
                     help="seconds between looks at the folders (default: 2)")
    add_grading_options(sub)


def add_gradescope(subcommands) -> None:
    """``gradescope build LESSON`` (the autograder zip) and ``gradescope run`` (its grading)."""
    from .gradescope.settings import VISIBILITIES, Settings

    text = "the course's checks as a Gradescope autograder (docs/instructors/gradescope.md)"
    actions = subcommands.add_parser("gradescope", help=text, description=text
                                     ).add_subparsers(required=True, metavar="ACTION")
    sub = actions.add_parser("build", help="write a lesson's autograder zip")
    sub.add_argument("lesson")
    sub.add_argument("--out", type=Path, default=Path("dist/gradescope"),
                     help="where the zip goes (default: dist/gradescope)")
    for option, default in (("--visible-checks", Settings.visible_checks),
                            ("--hidden-tests", Settings.hidden_tests)):
        sub.add_argument(option, choices=VISIBILITIES, default=default,
                         help=f"when students see these tests (default: {default})")
    sub.add_argument("--cell-timeout", type=float, default=Settings.cell_timeout)
    sub.add_argument("--budget", type=float, default=Settings.budget,
                     help="seconds a submission may run (Gradescope stops at its own limit)")
    sub.set_defaults(run=lambda a, w: commands.gradescope_build(
        a.out, lesson=a.lesson, visible_checks=a.visible_checks, hidden_tests=a.hidden_tests,
        cell_timeout=a.cell_timeout, budget=a.budget))
    sub = actions.add_parser("run", help="grade /autograder/submission into "
                             "/autograder/results/results.json (what run_autograder runs)")
    sub.set_defaults(run=lambda a, w: commands.gradescope_run())


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


def limits(args: argparse.Namespace) -> Limits:
    return Limits(cell_timeout=args.cell_timeout, budget=args.budget)


if __name__ == "__main__":
    sys.exit(main())
