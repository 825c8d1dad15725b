"""The adversarial suite: every crafted submission of ``attacks`` through the real pipeline
(LMS zip, ``nbgrader zip_collect``, ``python -m grader grade``, gradebook, feedback, report),
then what the course promises an instructor, measured:

- wrongly credited: submissions given more points than they earned;
- correct answers uncredited: honest, complete answers given fewer than all points;
- batch aborts: grading commands that failed, or left a submission without a result;
- gradebook integrity: SQLite's own check, the rows of students graded before the attackers
  unchanged, and every attacker's row equal to its result;
- planted secrets leaked: strings put where no submission may look (the grader's environment,
  the workspace, the gradebook, another student's notebook, the hidden tests) found in anything
  the attackers got back (results, kept output, feedback, report) or sent to the network;
- processes surviving the batch; files of the course changed on disk;
- active content in the instructor's pages: anything that could run, load or hide in the page
  nbgrader's formgrader makes of every autograded notebook of the batch, rendered without the
  sanitiser grader/nbgrader_config.py adds (so the notebooks themselves must be inert).

    make adversarial        # prints every attack's outcome and the summary (exit 1 on failure)
"""

import hashlib
import json
import os
import secrets
import socket
import sqlite3
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import psutil
from nbgrader.api import Gradebook

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the grader and the tests' helpers, as a script

from attacks import ATTACKS, LESSON, MARKER, Attack, Target, file_of, notebook  # noqa: E402

from grader import cli  # noqa: E402
from grader.course import COURSE_ID  # noqa: E402
from grader.demo import MISTAKES  # noqa: E402
from grader.grading.results import Result  # noqa: E402
from grader.workspace import Workspace  # noqa: E402
from helpers import gradebook  # noqa: E402
from helpers.formgrade import active_content, formgrade_page, shows_every_cell  # noqa: E402

# A cell may run 10 s: a correct cell that imports torch._dynamo (@torch.compile) takes 1.6 s
# alone and passed 5 s with the whole suite running beside it.
CELL_TIMEOUT, BUDGET = 10, 20
HONEST = ("honest-a", "honest-b")  # graded before the attackers; their rows must not move
PROTECTED = ("src/attention_course", "grader", "solutions", "notebooks")
MEMORY_GROWTH_LIMIT_MIB = 256  # what a record built to inflate may cost the grader
SETTLE_SECONDS = 6  # after the batch, time for anything left behind to act
ENVIRONMENT_SECRET = "ATTENTION_COURSE_LMS_TOKEN"  # planted in the grader's environment
HIDDEN_TESTS = "### BEGIN HIDDEN TESTS"  # in solutions/ only, never released


@dataclass
class Summary:
    rows: list[tuple[Attack, dict | None, str]] = field(default_factory=list)  # problem or ""
    wrongly_credited: int = 0
    correct_uncredited: int = 0
    batch_aborts: int = 0
    gradebook_problems: list[str] = field(default_factory=list)
    secrets_leaked: list[str] = field(default_factory=list)
    connections: int = 0
    survivors: list[str] = field(default_factory=list)
    files_changed: list[str] = field(default_factory=list)
    pages: int = 0  # formgrader pages rendered
    active_content: list[str] = field(default_factory=list)
    memory_growth_mib: float = 0.0  # the grader's peak resident memory above its baseline
    seconds: float = 0.0

    @property
    def figures(self) -> dict[str, int | str]:
        return {
            "wrongly credited": self.wrongly_credited,
            "correct answers wrongly uncredited": self.correct_uncredited,
            "batch aborts": self.batch_aborts,
            "gradebook integrity": "ok" if not self.gradebook_problems else
            "; ".join(self.gradebook_problems),
            "planted secrets leaked": len(self.secrets_leaked),
            "network connections from submissions": self.connections,
            "processes surviving the batch": len(self.survivors),
            "course files changed": len(self.files_changed),
            "active content in the instructor's pages": len(self.active_content),
        }

    @property
    def passed(self) -> bool:
        return not any(problem for _, _, problem in self.rows) and all(
            value in (0, "ok") for value in self.figures.values()) \
            and self.memory_growth_mib < MEMORY_GROWTH_LIMIT_MIB

    def table(self) -> str:
        lines = [f"{'submission':24}{'expected':>26}{'got':>20}  ", "-" * 76]
        for attack, result, problem in self.rows:  # (lesson 02 unless said)
            expected = f"{attack.outcome} {attack.score:g}"
            got = "no result" if result is None else f"{result.outcome} {result.counted_score:g}"
            lesson = "" if attack.lesson == LESSON else f" ({attack.lesson[:2]})"
            lines.append(f"{attack.student + lesson:24}{expected:>26}{got:>20}  "
                         f"{'FAIL: ' + problem if problem else 'ok'}")
        lines += ["", f"{len(self.rows)} crafted submissions graded in {self.seconds:.0f} s"]
        lines += [f"{name:44}{value}" for name, value in self.figures.items()]
        lines.append(f"{'formgrader pages rendered':44}{self.pages}")
        lines.append(f"{'grader memory above its baseline':44}{self.memory_growth_mib:.0f} MiB "
                     f"(at most {MEMORY_GROWTH_LIMIT_MIB})")
        return "\n".join(lines)


def run_suite(folder: Path, attacks: list[Attack] = ATTACKS, sandboxed: bool = True) -> Summary:
    """Grade ``attacks`` after two honest students, in a fresh workspace under ``folder``."""
    started = time.time()
    workspace = Workspace(folder / "workspace")
    listener = Listener()
    gradebook_file = workspace.root / "gradebook.db"
    target = Target(str(ROOT), str(workspace.root), str(gradebook_file), listener.port)
    fingerprint_before = fingerprint(ROOT)
    planted = plant_secrets(workspace)
    summary = Summary()
    try:
        if grade(workspace, honest_submissions(planted), sandboxed):
            raise RuntimeError("the honest students could not be graded (see above)")
        plant_in_gradebook(workspace, planted)
        before = honest_rows(workspace)
        downloads: dict[str, dict[str, bytes]] = {}  # lesson -> its LMS download's files
        for a in attacks:
            downloads.setdefault(a.lesson, {}).update(a.files(target))
        beside = {f"{a.student}/{a.lesson}/{name}": text for a in attacks
                  for name, text in a.beside.items()}
        with PeakMemory() as memory:
            summary.batch_aborts += grade(workspace, downloads, sandboxed, beside)
        summary.memory_growth_mib = memory.growth_mib
        time.sleep(SETTLE_SECONDS)
        summary.survivors = surviving_processes(started)
        summary.gradebook_problems = gradebook_problems(workspace, before)
    finally:
        os.environ.pop(ENVIRONMENT_SECRET, None)
        listener.stop()
    cli.main(["--workspace", str(workspace.root), "feedback"])
    cli.main(["--workspace", str(workspace.root), "report"])
    results = {(r.student, r.lesson): r for r in gradebook.results(workspace)}
    for attack in attacks:
        result = results.get((attack.student, attack.lesson))
        output = workspace.result_file(attack.student, attack.lesson).with_suffix(".output.txt")
        text = output.read_text(errors="replace") if output.is_file() else ""
        summary.rows.append((attack, result, problem(attack, result, text)))
        got = getattr(result, "counted_score", None)
        summary.wrongly_credited += got is not None and got > attack.score
        summary.correct_uncredited += attack.correct and (got is None or got < attack.score)
    summary.secrets_leaked = leaked(planted, workspace, listener.received)
    summary.connections = len(listener.received)
    summary.files_changed = [path for path, digest in fingerprint(ROOT).items()
                             if fingerprint_before.get(path) != digest]
    summary.pages, summary.active_content = instructor_pages(workspace, target.beacon)
    summary.seconds = time.time() - started
    return summary


def problem(attack: Attack, result: Result | None, output: str) -> str:
    """What is wrong with ``result`` (and the kept ``output``) for ``attack``, or ""."""
    if result is None:
        return "no result"
    wrong = []
    if attack.shows and attack.shows not in output:
        wrong.append(f"its output does not say {attack.shows!r}")
    if attack.never and attack.never in output:
        wrong.append(f"its output says {attack.never!r}")
    if result.outcome not in attack.outcome.split(" or "):
        wrong.append(f"outcome {result.outcome} ({result.reason})")
    if result.counted_score != attack.score:
        wrong.append(f"score {result.counted_score:g} (checks: {result.score:g}), expected "
                     f"{attack.score:g}")
    flagged = result.needs_human
    if attack.needs_human is not None and flagged != attack.needs_human:
        wrong.append("flagged for a human" if flagged else "not flagged for a human")
    return "; ".join(wrong)


# ---------------------------------------------------------------- grading

def grade(workspace: Workspace, downloads: dict[str, dict[str, bytes]], sandboxed: bool,
          beside: dict[str, str] | None = None) -> int:
    """Collect each lesson's files as its LMS download, put ``beside`` (path under submitted/
    -> text) next to them, and grade them all in one batch; 1 if that aborted, else 0."""
    expected = {(name.split("_", 1)[0], lesson) for lesson, files in downloads.items()
                for name in files}
    students = sorted({student for student, _ in expected})
    options = ["--workers", "1", "--cell-timeout", str(CELL_TIMEOUT), "--budget",
               str(BUDGET)] + ([] if sandboxed else ["--no-sandbox"])
    with tempfile.TemporaryDirectory() as folder:
        try:
            for lesson, files in downloads.items():
                download = Path(folder) / f"lms-download-{lesson}.zip"
                with zipfile.ZipFile(download, "w") as archive:
                    for name, data in files.items():
                        archive.writestr(f"submissions/{name}", data)
                cli.main(["--workspace", str(workspace.root), "collect", str(download),
                          "--lesson", lesson, "--format", "files"])
            for path, text in (beside or {}).items():
                (workspace.submitted / path).parent.mkdir(parents=True, exist_ok=True)
                (workspace.submitted / path).write_text(text)
            cli.main(["--workspace", str(workspace.root), "grade",
                      *[a for lesson in downloads for a in ("--lesson", lesson)],
                      *[a for s in students for a in ("--student", s)], *options])
        except (Exception, SystemExit) as err:  # noqa: BLE001 (an abort is what is counted)
            print(f"grading aborted: {err!r}", file=sys.stderr)
            return 1
    missing = [key for key in expected if not workspace.result_file(*key).is_file()]
    return int(bool(missing))


def honest_submissions(planted: dict[str, str]) -> dict[str, dict[str, bytes]]:
    first = notebook(correct=True)
    first.cells.append(nbformat.v4.new_markdown_cell(f"my notes: {planted['submission']}"))
    second = notebook(answers={"softmax": MISTAKES["softmax"][0],
                                        "scaled_dot_product_attention": None})
    return {LESSON: file_of(HONEST[0], first) | file_of(HONEST[1], second)}


# ---------------------------------------------------------------- what an attacker must not get

def plant_secrets(workspace: Workspace) -> dict[str, str]:
    """Where a secret was put -> the secret."""
    planted = {where: f"planted-{where}-{secrets.token_hex(8)}"
               for where in ("environment", "workspace", "gradebook", "submission")}
    os.environ[ENVIRONMENT_SECRET] = planted["environment"]
    workspace.root.mkdir(parents=True, exist_ok=True)
    (workspace.root / "instructor-notes.txt").write_text(planted["workspace"])
    return planted | {"hidden tests": HIDDEN_TESTS}


def plant_in_gradebook(workspace: Workspace, planted: dict[str, str]) -> None:
    with Gradebook(workspace.db_url, course_id=COURSE_ID) as book:
        book.update_or_create_student("planted", last_name=planted["gradebook"])


def leaked(planted: dict[str, str], workspace: Workspace, received: list[bytes]) -> list[str]:
    """Each planted secret found in what the attackers got back or sent out."""
    returned = [p.read_bytes() for folder in (workspace.results, workspace.feedback,
                                              workspace.report)
                for p in folder.rglob("*") if p.is_file()] + received
    return [where for where, secret in planted.items()
            if any(secret.encode() in data for data in returned)]


class PeakMemory:
    """The peak resident memory of this process (the grader) above what it held at the start,
    sampled every 20 ms while the ``with`` block runs."""

    def __enter__(self):
        self.process = psutil.Process()
        self.baseline = self.peak = self.process.memory_info().rss
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.02)

    def __exit__(self, *exc) -> None:
        self.running = False
        self.thread.join()

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.baseline) / 2**20


class Listener:
    """A loopback server that keeps whatever anyone sends it."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.received: list[bytes] = []
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.running:
            try:
                connection, _ = self.server.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(2)
                try:
                    self.received.append(b"connected:" + connection.recv(1 << 16))
                except OSError:
                    self.received.append(b"connected")

    def stop(self) -> None:
        self.running = False
        self.thread.join()
        self.server.close()


# ---------------------------------------------------------------- after the batch

def instructor_pages(workspace: Workspace, beacon: str) -> tuple[int, list[str]]:
    """How many autograded notebooks there are, and what in their formgrader pages could run,
    load or hide anything (a notebook the formgrader could not render counts too).

    nbconvert renders each cell of a page on its own, so the cells notebooks share (a lesson's
    text) are checked once: one page per lesson and notebook metadata holding every distinct
    cell, which must show all of them (no cell swallowed what follows it). Where that page has
    a problem, each notebook's own page says whose it is."""
    paths = sorted(workspace.autograded.glob("*/*/*.ipynb"))
    found, groups = [], {}
    for path in paths:
        student, lesson = path.parts[-3:-1]
        try:
            node = nbformat.read(path, as_version=4)
        except Exception as error:  # noqa: BLE001 - the formgrader would show an error page
            found.append(f"{student}/{lesson}: not read ({error!r:.80})")
            continue
        key = (lesson, json.dumps(node.metadata, sort_keys=True))
        groups.setdefault(key, []).append((student, node))
    for (lesson, _), members in groups.items():
        shared = page_problems(distinct_cells([node for _, node in members]), lesson, beacon)
        whose = [f"{student}/{lesson}: {problem}" for student, node in members if shared
                 for problem in page_problems(node, lesson, beacon, student)]
        found += whose or [f"{lesson}: {problem}" for problem in shared]
    return len(paths), found


def page_problems(node, lesson: str, beacon: str, student: str = "mallory") -> list[str]:
    try:
        page = formgrade_page(node, lesson=lesson, student=student)
    except Exception as error:  # noqa: BLE001 - the formgrader would show an error page
        return [f"not rendered ({error!r:.80})"]
    swallowed = [] if shows_every_cell(page, node) else ["a cell swallows what follows it"]
    return active_content(page, beacon) + swallowed


def distinct_cells(notebooks: list) -> nbformat.NotebookNode:
    """A notebook with the first one's metadata and every distinct cell of ``notebooks``."""
    cells = {}
    for node in notebooks:
        for cell in node.cells:
            content = {name: value for name, value in cell.items() if name != "id"}
            cells.setdefault(json.dumps(content, sort_keys=True), content)
    union = nbformat.v4.new_notebook(metadata=notebooks[0].metadata)
    union.cells = [nbformat.from_dict({**cell, "id": f"cell-{n}"})
                   for n, cell in enumerate(cells.values())]
    return union


def honest_rows(workspace: Workspace) -> dict[str, tuple]:
    with Gradebook(workspace.db_url, course_id=COURSE_ID) as book:
        rows = {}
        for student in HONEST:
            submission = book.find_submission(LESSON, student)
            rows[student] = tuple(
                (g.name, g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade)
                for nb in submission.notebooks for g in nb.grades)
        return rows


def gradebook_problems(workspace: Workspace, before: dict[str, tuple]) -> list[str]:
    path = Path(workspace.db_url.removeprefix("sqlite:///"))
    with sqlite3.connect(path) as db:
        check = db.execute("PRAGMA integrity_check").fetchone()[0]
    problems = [] if check == "ok" else [f"SQLite integrity check: {check}"]
    after = honest_rows(workspace)
    problems += [f"{student}'s rows changed" for student in HONEST
                 if after[student] != before[student]]
    recorded = gradebook.scores(workspace)
    for result in gradebook.results(workspace):
        book = recorded.get((result.student, result.lesson))
        mine = {e.grade_id: 0.0 if result.held else e.points for e in result.exercises}
        if book != mine:
            problems.append(f"{result.student}: gradebook {book} != result {mine}")
    return problems


def surviving_processes(since: float, recheck_s: float = 1.0) -> list[str]:
    """Processes an attack may have left: started during the suite in another PID namespace
    or below this process, or carrying the attacks' marker, and still running ``recheck_s``
    later (a process that is ending, or a zombie, cannot act). Processes of a sibling of this
    process (another test session running beside it, e.g. a pytest-xdist worker) are theirs."""
    first = _suspects(since)
    time.sleep(recheck_s)
    again = {line.split(":")[0] for line in _suspects(since)}
    return [line for line in first if line.split(":")[0] in again]


def _suspects(since: float) -> list[str]:
    me = psutil.Process()
    mine, own_namespace = {p.pid for p in me.children(recursive=True)}, _pid_namespace("self")
    siblings = {p.pid for p in me.parent().children()} - {me.pid} if me.parent() else set()
    found = []
    for process in psutil.process_iter(["pid", "create_time", "cmdline", "status"]):
        if process.pid == me.pid or process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        command = " ".join(process.info["cmdline"] or [])
        recent = (process.info["create_time"] or 0) >= since
        foreign = _pid_namespace(process.pid) not in (None, own_namespace)
        if MARKER in command or (recent and (foreign and not _below(process, siblings)
                                             or process.pid in mine)):
            found.append(f"{process.pid}: {command[:100]}")
    return found


def _below(process: psutil.Process, ancestors: set[int]) -> bool:
    try:
        return any(parent.pid in ancestors for parent in process.parents())
    except psutil.Error:  # it ended while we looked
        return False


def _pid_namespace(pid) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def fingerprint(root: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file of the course an attacker might rewrite."""
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for folder in PROTECTED for path in sorted((root / folder).rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts
            and ".ipynb_checkpoints" not in path.parts}


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        summary = run_suite(Path(folder))
    print(summary.table())
    return 0 if summary.passed else 1


if __name__ == "__main__":
    sys.exit(main())
