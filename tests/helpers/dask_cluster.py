"""A throwaway Dask cluster on loopback, started as an instructor starts one, for the tests and
the benchmarks.

    from helpers.dask_cluster import local_cluster

    with local_cluster(folder, workers=2) as cluster:
        cluster.address                      # tcp://127.0.0.1:<port>, for --scheduler
        cluster.scheduler_file               # the scheduler's file, which --scheduler takes too
        cluster.worker_pids()                # once every worker has joined

`dask scheduler` on a free loopback port (its address from its scheduler file), then
``workers`` `dask worker` processes, each under its nanny and with one thread, logs and local
directories in ``folder``. The workers import the course's grader from this checkout
(PYTHONPATH). They are still starting when the ``with`` block begins, so a caller can do other
work meanwhile; on leaving it, failed test or not, every process is stopped (SIGTERM to its
process group, SIGKILL after 15 s), which frees its ports.
"""

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DASK = str(Path(sys.executable).with_name("dask"))
START_SECONDS = 60
ENVIRONMENT = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


@dataclass
class Cluster:
    address: str
    scheduler_file: Path  # what `--scheduler` also takes
    processes: list[subprocess.Popen]  # the scheduler, then the workers' nannies

    def client(self):
        from distributed import Client  # slow to import: only where a cluster is used

        return Client(self.address, timeout=START_SECONDS, set_as_default=False)

    def worker_pids(self) -> dict[str, int]:
        """Worker address -> the worker process's id (its nanny is its parent), once every
        worker has joined."""
        with self.client() as client:
            client.wait_for_workers(len(self.processes) - 1, timeout=START_SECONDS)
            return client.run(os.getpid)


@contextmanager
def local_cluster(folder: Path, workers: int = 2) -> Iterator[Cluster]:
    folder.mkdir(parents=True, exist_ok=True)
    scheduler_file = folder / "scheduler.json"
    processes = [_start([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0",
                         "--no-dashboard", "--scheduler-file", str(scheduler_file)],
                        folder / "scheduler.log")]
    try:
        deadline = time.monotonic() + START_SECONDS
        while not scheduler_file.is_file():
            if time.monotonic() > deadline or processes[0].poll() is not None:
                raise RuntimeError(f"the Dask scheduler did not start:\n"
                                   f"{(folder / 'scheduler.log').read_text()}")
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        for n in range(workers):
            processes.append(_start([DASK, "worker", address, "--nthreads", "1", "--host",
                                     "127.0.0.1", "--no-dashboard", "--local-directory",
                                     str(folder / f"worker-{n}")], folder / f"worker-{n}.log"))
        yield Cluster(address, scheduler_file, processes)
    finally:
        _stop(processes)


def _start(command: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:  # each in a session of its own, stopped with its children
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=ENVIRONMENT,
                                cwd=log.parent, start_new_session=True)


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
