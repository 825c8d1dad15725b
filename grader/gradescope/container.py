"""Gradescope's container approximated on this machine: 768 MB of memory and one core.

Gradescope gives each run half a CPU and 768 MB by default. Here a command runs in a memory
cgroup of its own (cgroup v2 ``memory.max``, or v1 ``memory.limit_in_bytes``), made under this
process's own cgroup, so that it is killed past the limit as it would be there, and its peak is
read back; and on one core (CPU affinity), the nearest to half a CPU that needs no CPU cgroup.
Where no cgroup can be made (not root, or a read-only hierarchy), the command runs without the
memory limit and ``peak_bytes`` is None: the caller says so.
"""

import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

MEMORY = 768 * 10**6  # Gradescope's "768 MB"
CGROUPS = Path("/sys/fs/cgroup")
# cgroup v2 and v1: (hierarchy, the limit's file, the peak's file, the killings' file)
FILES = {"v2": ("", "memory.max", "memory.peak", "memory.events"),
         "v1": ("memory", "memory.limit_in_bytes", "memory.max_usage_in_bytes",
                "memory.failcnt")}


@dataclass(frozen=True)
class Ran:
    completed: subprocess.CompletedProcess
    peak_bytes: int | None  # the cgroup's peak, page cache included; None without a cgroup
    limit_bytes: int | None


def run_limited(command: list[str], env: dict, memory: int = MEMORY, cwd: Path | None = None,
                timeout: float = 600) -> Ran:
    """``command`` under ``memory`` bytes and on one core; its output captured."""
    group, version = make_cgroup(memory)

    def enter() -> None:  # in the child, before exec
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    try:
        completed = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                                   timeout=timeout, preexec_fn=enter)
        peak = int((group / FILES[version][2]).read_text()) if group is not None else None
    finally:
        if group is not None:
            group.rmdir()
    return Ran(completed, peak, memory if group is not None else None)


def make_cgroup(memory: int) -> tuple[Path | None, str | None]:
    """A fresh memory cgroup under this process's own, limited to ``memory`` bytes."""
    for version, (hierarchy, limit, _, _) in FILES.items():
        parent = own_cgroup(version, hierarchy)
        if parent is None:
            continue
        group = parent / f"gradescope-{uuid.uuid4().hex[:8]}"
        try:
            group.mkdir()
            (group / limit).write_text(str(memory))
            return group, version
        except OSError:
            if group.exists():
                group.rmdir()
    return None, None


def own_cgroup(version: str, hierarchy: str) -> Path | None:
    """This process's cgroup folder in the ``version`` hierarchy, if that is mounted here
    (whether a child may be made in it, ``make_cgroup`` finds out)."""
    if version == "v2" and not (CGROUPS / "cgroup.controllers").exists():
        return None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        wanted = controllers == "" if version == "v2" else hierarchy in controllers.split(",")
        folder = CGROUPS / hierarchy / path.lstrip("/")
        if wanted and (folder / "cgroup.procs").exists():
            return folder
    return None
