"""The student's process without bubblewrap: as a user that cannot read the autograder's files.

A Gradescope container may not let bubblewrap make its namespaces. Then the warm runner (and the
process it forks for the submission) runs as an unprivileged user instead of root, with the same
confinement as everywhere (``sandbox.confinement``: resource limits, the seccomp filter), while
the checks run in this process, as root, as they always do. What that user may read is the
Python environment, and the stage: the runner's three files and the lesson's package as
``sandbox.package`` builds it (no exercise reference, no check), root's and read-only; it
writes only its scratch folder. The course's source (references, hidden tests), the submission
as handed in and the results are root's alone (``Layout.secrets``), and ``exposed`` asks the
kernel, as that user, before any student code runs.

What this does not give, that bubblewrap does: the network, other processes' command lines, and
the rest of the file system stay as visible as to any user of the container.
"""

import os
import pwd
import shutil
import subprocess
from pathlib import Path

from ..sandbox import bwrap
from ..sandbox.client import Limits, Runner

# drop to (uid, gid) with no supplementary group, then exec the rest of the command line
DROP = ("import os, sys; os.setgroups([]); os.setgid(int(sys.argv[2])); "
        "os.setuid(int(sys.argv[1])); os.execv(sys.argv[3], sys.argv[3:])")
# as that user: print each path it may read or search
PROBE = ("import os, sys; [print(p) for p in sys.argv[1:] "
         "if os.access(p, os.R_OK) or os.access(p, os.X_OK)]")


class NotConfined(Exception):
    """The student's process could not be kept from the autograder's files; says why."""


def account(user: str) -> pwd.struct_passwd:
    """The unprivileged user; NotConfined if it is missing or is root."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise NotConfined(f"there is no user {user!r} to run student code as (setup.sh creates "
                          f"it: useradd --system {user})") from None
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise NotConfined(f"user {user!r} is root or in root's group")
    return entry


def as_user(entry: pwd.struct_passwd, command: list[str]) -> list[str]:
    """``command`` run as ``entry``'s user and group, with no other group."""
    return [bwrap.PYTHON, "-I", "-c", DROP, str(entry.pw_uid), str(entry.pw_gid), *command]


def protect(secrets: tuple[Path, ...]) -> None:
    """Make each secret folder root's alone."""
    for path in secrets:
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, 0, 0, follow_symlinks=False)
        os.chmod(path, 0o700, follow_symlinks=False)


def exposed(entry: pwd.struct_passwd, paths: tuple[Path, ...]) -> list[str]:
    """The ``paths`` that ``entry``'s user may read or search, asked of the kernel as that
    user."""
    done = subprocess.run(as_user(entry, [bwrap.PYTHON, "-I", "-c", PROBE, *map(str, paths)]),
                          capture_output=True, text=True, timeout=60, env={}, cwd="/")
    if done.returncode != 0:
        raise NotConfined(f"could not run a process as {entry.pw_name}: {done.stderr.strip()}")
    return done.stdout.split()


def prepare_stage(stage: Path) -> None:
    """A fresh stage, root's and readable by all, with the runner's files."""
    if stage.is_symlink() or stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(mode=0o755, parents=True)
    (stage / "runner").mkdir(mode=0o755)
    for name in bwrap.RUNNER_FILES:
        shutil.copy(bwrap.GRADER / name, stage / "runner" / name)
        os.chmod(stage / "runner" / name, 0o644)


class UnprivilegedRunner(Runner):
    """A warm runner started as ``entry``'s user, from the stage's copy of its files, with its
    scratch folder that user's own."""

    def __init__(self, stage: Path, limits: Limits, entry: pwd.struct_passwd):
        super().__init__(stage / "worker-0", limits, sandboxed=False)
        self.entry = entry

    def command(self, package_root: Path) -> list[str]:
        self.scratch.mkdir(mode=0o700, exist_ok=True)
        os.chown(self.scratch, self.entry.pw_uid, self.entry.pw_gid)
        runner = self.scratch.parent / "runner" / "runner.py"
        return as_user(self.entry, [bwrap.PYTHON, "-I", str(runner), "--scratch",
                                    str(self.scratch), "--package-root", str(package_root)])
