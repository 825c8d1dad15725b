"""Grading on a Dask cluster: the same grading as ``batch``, one Dask task per submission.

    python -m grader grade --scheduler tcp://host:8786

Each worker keeps warm sandboxed runners (``Runners``, a Dask worker plugin: one runner per task
the worker runs at once, started on first use and stopped when the worker closes). A task
carries all a worker needs (``batch.Handin``: the notebook's bytes; the ``Lesson``: its graded
cells and points) and returns the ``batch.Graded`` result; the checks run in the worker's own
process, the trusted side, as they run in the grader's process locally. Workers see none of the
client's files: the client reads each submission as it sends it, and alone writes results/ and
the gradebook, as results arrive.

A worker that dies (killed, out of memory, its machine gone) takes its current submission with
it; the scheduler runs that task again on another worker (``distributed.scheduler.allowed-
failures``, 3 by default, is how many deaths one task may cause before Dask gives up on it). A
student's code that kills its kernel or its runner kills a sandboxed child of the worker, not
the worker: that is the student's "crashed" outcome, as locally. A submission that was never
graded (Dask gave up on it, a worker could not grade) is not recorded: grading again resumes.
"""

import importlib.util
import itertools
import logging
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from distributed import Client, WorkerPlugin, as_completed, get_worker

from ..course import Lesson
from ..sandbox import bwrap
from ..sandbox.client import Limits, Runner
from ..workspace import ROOT, digest
from .batch import Graded, Handin, grade_safely
from .errors import ClusterError, NotAllGraded
from .submissions import Submission

PLUGIN = "attention-course-runners"
IN_FLIGHT = 64  # submissions sent ahead at least (four per worker thread if that is more)
# what grading on a worker depends on: it must be the client's, byte for byte
COURSE_FILES = ("grader/**/*.py", "src/attention_course/**/*.py", "notebooks/*/*.ipynb")


def course_fingerprint() -> str:
    """A digest of the grader, the course package and the released notebooks."""
    paths = sorted({path for pattern in COURSE_FILES for path in ROOT.glob(pattern)})
    return digest((str(path.relative_to(ROOT)), path.read_bytes()) for path in paths)[:16]


class Runners(WorkerPlugin):
    """A worker's warm sandboxed runners, one per task it runs at once."""

    def __init__(self, limits: Limits, sandboxed: bool, fingerprint: str):
        self.limits, self.sandboxed, self.fingerprint = limits, sandboxed, fingerprint

    @property
    def settings(self) -> tuple:
        return self.limits, self.sandboxed, self.fingerprint

    def setup(self, worker) -> None:
        self.scratch = Path(worker.local_directory) / "grading"
        self.idle: queue.SimpleQueue[Runner] = queue.SimpleQueue()
        self.started: list[Runner] = []
        self.judging, self.lock = threading.Lock(), threading.Lock()
        self.unfit = self.why_unfit()

    def why_unfit(self) -> str | None:
        """Why this worker must not grade (another version of the course, no sandbox), or None."""
        mine = course_fingerprint()
        if mine != self.fingerprint:
            return (f"it has another version of the course (files {mine}, the client's "
                    f"{self.fingerprint}): install the client's commit on every worker")
        if self.sandboxed:
            try:
                bwrap.check(self.limits.disk)
            except bwrap.SandboxUnavailable as err:
                return f"no sandbox: {err}"
        return None

    @contextmanager
    def runner(self) -> Iterator[Runner]:
        """An idle warm runner, or a new one when every runner is busy."""
        try:
            runner = self.idle.get_nowait()
        except queue.Empty:
            with self.lock:
                runner = Runner(self.scratch / f"runner-{len(self.started)}", self.limits,
                                self.sandboxed)
                self.started.append(runner)
        try:
            yield runner
        finally:
            self.idle.put(runner)

    def teardown(self, worker) -> None:
        for runner in self.started:
            runner.close()


class WorkerUnfit(Exception):
    """Raised in a task on a worker that must not grade; the client records nothing for it."""


def grade_on_worker(submission: Handin, lesson: Lesson) -> Graded:
    """A Dask task: grade one submission with one of this worker's warm runners."""
    runners: Runners = get_worker().plugins[PLUGIN]
    if runners.unfit:
        raise WorkerUnfit(runners.unfit)
    with runners.runner() as runner:
        return grade_safely(submission, lesson, runner, runners.judging)


def connect(scheduler: str) -> Client:
    """A client of the scheduler at ``scheduler`` (an address, or a scheduler file), within
    Dask's ``distributed.comm.timeouts.connect`` (30 s unless configured)."""
    is_file = not scheduler.startswith(("tcp://", "tls://", "ws://", "wss://", "inproc://")) \
        and Path(scheduler).is_file()
    quiet = logging.getLogger("distributed")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # the one line below says it all
    try:
        if is_file:
            return Client(scheduler_file=scheduler, set_as_default=False)
        return Client(scheduler, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as err:
        raise ClusterError(f"cannot reach the Dask scheduler at {scheduler} "
                           f"({type(err).__name__}: {err})") from None
    finally:
        quiet.setLevel(level)


def prepare(client: Client, limits: Limits, sandboxed: bool) -> None:
    """Give every worker (and every worker that joins later) its runners, unless each already
    has warm ones of these settings; refuse to grade if the scheduler or a worker present now
    cannot."""
    _check_scheduler(client)
    if not client.scheduler_info()["workers"]:
        print(f"waiting for a worker to join the scheduler at {client.scheduler.address}",
              flush=True)
        client.wait_for_workers(1)
    runners = Runners(limits, sandboxed, course_fingerprint())
    try:
        if set(client.run(_settings).values()) != {runners.settings}:
            client.register_plugin(runners, name=PLUGIN)
        unfit = {address: why for address, why in client.run(_unfitness).items() if why}
    except Exception as err:  # raised on a worker: Dask passes it on as a plain Exception
        raise ClusterError(f"a worker cannot load the course's grader ({err}): start each "
                           f"worker from a checkout of the course, with PYTHONPATH at it "
                           f"(docs/instructors/scaling.md)") from None
    if unfit:
        raise ClusterError("; ".join(f"worker {address} cannot grade: {why}"
                                     for address, why in sorted(unfit.items())))


def _check_scheduler(client: Client) -> None:
    """ClusterError unless the scheduler can import the grader: Dask's scheduler unpickles each
    task it is sent (the grader's function and the submission), so it needs the course's
    checkout on its path as the workers do. Asked with the standard library's find_spec, which
    any scheduler can run."""
    if client.run_on_scheduler(importlib.util.find_spec, "grader") is None:
        raise ClusterError(f"the Dask scheduler at {client.scheduler.address} cannot import the "
                           f"grader: start it from a checkout of the course with PYTHONPATH at "
                           f"it, as the workers are (cd attention-course && PYTHONPATH=$PWD "
                           f".venv/bin/dask scheduler; docs/instructors/scaling.md)")


def _settings(dask_worker) -> tuple | None:
    """The settings of this worker's runners, if it has runners that can grade."""
    runners = dask_worker.plugins.get(PLUGIN)
    return None if runners is None or runners.unfit else runners.settings


def _unfitness(dask_worker) -> str | None:
    runners = dask_worker.plugins.get(PLUGIN)
    return "its runners did not start" if runners is None else runners.unfit


def grade_on_cluster(submissions: list[Submission], lessons: dict[str, Lesson], scheduler: str,
                     limits: Limits, sandboxed: bool = True) -> Iterator[tuple[Handin, Graded]]:
    """Grade ``submissions`` on the cluster: each one as its result arrives, with the handin
    it was graded from. Raises ClusterError before grading anything if the cluster cannot
    grade, NotAllGraded at the end if some submissions were not graded. Closing the iterator
    (on Ctrl-C, say) cancels what is left."""
    client = connect(scheduler)
    try:
        prepare(client, limits, sandboxed)
        yield from Batch(client, lessons).run(submissions)
    finally:
        client.close()


class Batch:
    """The submissions on their way through the cluster: at most ``window`` at a time (so the
    client and the scheduler hold a few notebooks, not the class), the next one sent as each
    result comes back."""

    def __init__(self, client: Client, lessons: dict[str, Lesson]):
        threads = sum(client.nthreads().values())
        self.client, self.lessons = client, lessons
        self.window = max(IN_FLIGHT, 4 * threads)
        self.in_flight: dict = {}  # future -> the handin it grades
        self.finished = as_completed(loop=client.loop)

    def run(self, submissions: list[Submission]) -> Iterator[tuple[Handin, Graded]]:
        waiting = iter(submissions)
        lost = []
        try:
            for submission in itertools.islice(waiting, self.window):
                self.send(submission)
            for future in self.finished:
                handin = self.in_flight.pop(future)
                try:
                    graded: Graded = future.result()
                except Exception as err:  # Dask gave up on it, or its worker could not grade
                    lost.append(f"{handin.student} {handin.lesson}: {type(err).__name__}: {err}")
                else:
                    yield handin, graded
                finally:
                    future.release()
                for following in itertools.islice(waiting, 1):
                    self.send(following)
        finally:
            self.client.cancel(list(self.in_flight))
        if lost:
            raise NotAllGraded(lost)

    def send(self, submission: Submission) -> None:
        handin = Handin.read(submission)
        future = self.client.submit(grade_on_worker, handin, self.lessons[submission.lesson],
                                    pure=False)
        self.in_flight[future] = handin
        self.finished.add(future)
