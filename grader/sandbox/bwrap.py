"""The sandbox student code runs in: bubblewrap (``bwrap``) around the grading runner.

What a submission sees inside is the Python environment and the course package as its lesson's
notebook may see it (``package``: no exercise reference of the lesson, no check), read-only, the
runner's two files, and one private writable tmpfs of bounded size (home, temporary files,
working directory), emptied between submissions. Nothing else of the machine: no network (its
own empty network namespace), no other process (its own PID namespace, which dies with the
grader), none of the grader's environment variables, and not the gradebook, the solutions and
hidden tests, the workspace or other students' files, which are simply not there. The runner
talks to the grader over its stdin and stdout pipes only. ``confinement`` adds the per-process
limits (memory, CPU time, file size, open files, no new processes) from inside.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import attention_course

GRADER = Path(__file__).parent
RUNNER_FILES = ("runner.py", "confinement.py", "framing.py")
# paths in the sandbox: the runner, the submission's scratch space, the lesson's package
INSIDE_RUNNER, INSIDE_SCRATCH = Path("/grader"), Path("/submission")
INSIDE_PACKAGE = Path("/course")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64")  # often links into /usr
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/localtime", "/etc/fonts")
SANDBOX_UID = 1000
PYTHON = os.path.abspath(sys.executable)  # the environment's own, symlinks not followed
PACKAGE = Path(attention_course.__file__).parent.resolve()  # the whole course package: hidden


class SandboxUnavailable(Exception):
    """bubblewrap cannot run here; the message says why and what to do."""


def bwrap() -> str:
    return os.environ.get("ATTENTION_COURSE_BWRAP") or shutil.which("bwrap") or "bwrap"


def runner_command(disk: int, package_root: Path) -> list[str]:
    """The runner, started in a fresh sandbox whose private tmpfs holds ``disk`` bytes, with
    the lesson's package from ``package_root`` (see ``package.build``)."""
    return sandboxed([PYTHON, "-I", str(INSIDE_RUNNER / "runner.py"),
                      "--scratch", str(INSIDE_SCRATCH), "--package-root", str(INSIDE_PACKAGE),
                      "--own-pid-namespace"], disk, package_root)


def sandboxed(command: list[str], disk: int, package_root: Path | None = None) -> list[str]:
    """``command`` wrapped in bubblewrap, seeing and reaching what the module docstring says."""
    isolation = ["--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                 "--new-session", "--cap-drop", "ALL", "--uid", str(SANDBOX_UID),
                 "--gid", str(SANDBOX_UID), "--clearenv"]
    environment = ["--setenv", "PATH", f"{Path(PYTHON).parent}:/usr/bin:/bin",
                   "--setenv", "LANG", "C.UTF-8", "--setenv", "USER", "student",
                   "--setenv", "OMP_NUM_THREADS", "1"]
    trees = _python_trees()
    files = ["--ro-bind", "/usr", "/usr", *_system_links(), *_read_only(trees),
             *_read_only_try(SYSTEM_FILES), "--proc", "/proc", "--dev", "/dev",
             "--size", str(disk), "--tmpfs", str(INSIDE_SCRATCH)]
    if not any(tree.is_relative_to("/tmp") for tree in trees):  # else /tmp stays read-only
        files += ["--symlink", str(INSIDE_SCRATCH / "tmp"), "/tmp"]  # (TMPDIR is in scratch)
    if any(PACKAGE.is_relative_to(tree) for tree in trees):  # installed inside the environment
        files += ["--tmpfs", str(PACKAGE)]
    for name in RUNNER_FILES:
        files += ["--ro-bind", str(GRADER / name), str(INSIDE_RUNNER / name)]
    if package_root is not None:
        files += ["--ro-bind", str(package_root), str(INSIDE_PACKAGE)]
    files += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", str(INSIDE_SCRATCH)]
    return [bwrap(), *isolation, *environment, *files, "--", *command]


def _python_trees() -> list[Path]:
    """The interpreter and its environment; outermost first, no repeats."""
    trees = sorted({Path(p).resolve() for p in (sys.prefix, sys.base_prefix)}
                   | {Path(PYTHON).parent, Path(PYTHON).resolve().parent})
    usr = Path("/usr")
    outermost = []
    for tree in trees:
        if not any(tree.is_relative_to(outer) for outer in [usr, *outermost]):
            outermost.append(tree)
    return outermost


def _system_links() -> list[str]:
    arguments = []
    for path in filter(os.path.lexists, SYSTEM_LINKS):
        if os.path.islink(path):
            arguments += ["--symlink", os.readlink(path), path]
        else:
            arguments += ["--ro-bind", path, path]
    return arguments


def _read_only(paths) -> list[str]:
    return [argument for path in paths for argument in ("--ro-bind", str(path), str(path))]


def _read_only_try(paths) -> list[str]:
    return [argument for path in paths for argument in ("--ro-bind-try", path, path)]


def check(disk: int) -> None:
    """Start one sandbox and confine a process in it, or raise SandboxUnavailable saying why."""
    hidden = [tree for tree in _python_trees()
              for inside in (INSIDE_RUNNER, INSIDE_SCRATCH, INSIDE_PACKAGE)
              if tree.is_relative_to(inside) or inside.is_relative_to(tree)]
    if hidden:
        raise SandboxUnavailable(f"the Python environment lies where the sandbox puts its own "
                                 f"folders ({hidden[0]}; {INSIDE_RUNNER}, {INSIDE_SCRATCH})")
    probe = "import sys; sys.path.append(sys.argv[1]); import confinement as c; " \
            "c.confine()"
    command = sandboxed([PYTHON, "-I", "-c", probe, str(INSIDE_RUNNER)], disk)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SandboxUnavailable(
            f"bubblewrap is not installed ({command[0]} not found): install the Debian or "
            f"Ubuntu package bubblewrap (`make sandbox` does it)") from None
    except subprocess.TimeoutExpired:
        raise SandboxUnavailable("bubblewrap did not start a sandbox within 60 s") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        hint = (". bubblewrap needs unprivileged user namespaces (sysctl "
                "kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 and later also "
                "kernel.apparmor_restrict_unprivileged_userns=0)") if "namespace" in said else ""
        raise SandboxUnavailable(f"bubblewrap cannot start a sandbox here: {said}{hint}")
