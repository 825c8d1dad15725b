"""The grading sandbox: what student code sees and may do inside it, the limits of the process
that runs a submission, and grading's refusal to run student code where there is no sandbox."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from grader import cli
from grader.course import ROOT
from grader.demo import practice_names, student_notebook
from grader.sandbox import bwrap as sandbox
from grader.sandbox import package
from grader.workspace import Workspace

NO_NAMESPACES = "bwrap: No permissions to create a new namespace, likely because the kernel " \
                "does not allow non-privileged user namespaces."


def run_inside(code: str, disk: int = 2**26, package_root: Path | None = None) -> dict:
    """Run ``code`` (which prints one JSON object) in a fresh sandbox; what it printed."""
    done = subprocess.run(sandbox.sandboxed([sandbox.PYTHON, "-I", "-c", textwrap.dedent(code)],
                                            disk, package_root),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_inside_only_the_python_environment_is_visible_and_nothing_is_writable_but_scratch(
        tmp_path):
    root = package.build(tmp_path / "package")
    seen = run_inside(f"""
        import json, os, sys
        def writable(path):
            try:
                open(path, "w").close()
                return True
            except OSError:
                return False
        sys.path.insert(0, {str(sandbox.INSIDE_PACKAGE)!r})
        import attention_course
        print(json.dumps({{
            "repository": os.listdir({str(ROOT)!r}) if os.path.isdir({str(ROOT)!r}) else [],
            "package": attention_course.__file__,
            "environment": sorted(os.environ),
            "processes": sorted(p for p in os.listdir("/proc") if p.isdigit()),
            "writable": [p for p in ("/submission/x", "/x", "/dev/x", "/tmp/x", "/usr/x",
                                     attention_course.__file__) if writable(p)],
            "uid": os.getuid(),
            "whole package": os.path.exists({str(sandbox.PACKAGE)!r}),
        }}))""", package_root=root)
    assert set(seen["repository"]) <= {".venv"}  # the environment only
    assert seen["package"].startswith(str(sandbox.INSIDE_PACKAGE))  # the lesson's package
    assert not seen["whole package"]
    assert seen["environment"] == sorted(["LANG", "OMP_NUM_THREADS", "PATH", "PWD", "USER"])
    assert len(seen["processes"]) <= 3  # bwrap's init and this python: a PID namespace
    assert seen["writable"] == ["/submission/x"]
    assert seen["uid"] == sandbox.SANDBOX_UID


def test_inside_there_is_no_network():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        seen = run_inside(f"""
            import json, socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
                print(json.dumps("connected"))
            except OSError as err:
                print(json.dumps(type(err).__name__))""")
    assert seen == "ConnectionRefusedError"


def test_the_scratch_space_is_bounded():
    seen = run_inside("""
        import json
        written = 0
        try:
            with open("/submission/fill", "wb") as file:
                while written < 2**28:
                    file.write(b"\\0" * 2**20)
                    file.flush()
                    written += 2**20
        except OSError as err:
            print(json.dumps([written, err.strerror]))""", disk=2**25)
    assert seen[0] <= 2**25 and seen[1] == "No space left on device"


CONFINED = """
import ctypes, json, os, resource, signal, subprocess, sys, threading
sys.path.insert(0, {grader!r})
from confinement import confine, limit_resources
parent = os.getppid()
limit_resources(memory=2**31, cpu_seconds=60, file_size=2**20, open_files=64)
confine()
libc = ctypes.CDLL(None, use_errno=True)

def shmget():
    if libc.shmget(0, 4096, 0o1600) < 0:  # IPC_PRIVATE, IPC_CREAT | 0600
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))

seen = {{}}
for name, attempt in [
        ("fork", os.fork), ("subprocess", lambda: subprocess.run(["true"])),
        ("thread", lambda: threading.Thread(target=print).start()),
        ("allocation", lambda: bytes(2**32)),
        ("big file", lambda: open("{big}", "wb").write(bytes(2**21))),
        ("shared memory", shmget),
        ("signal to the parent", lambda: os.kill(parent, 0)),
        ("signal to everyone", lambda: os.kill(-1, 0)),
        ("the parent's limits", lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE,
                                                          (1, 1))),
        ("the parent's priority", lambda: os.setpriority(os.PRIO_PROCESS, parent, 19)),
        ("the parent's CPUs", lambda: os.sched_setaffinity(parent, {{0}})),
        ("its own signal", lambda: os.kill(os.getpid(), 0)),
        ("its own group's signal", lambda: os.kill(-os.getpid(), 0)),
        ("its own limits", lambda: resource.prlimit(0, resource.RLIMIT_NOFILE, (32, 64))),
        ("its own priority", lambda: os.setpriority(os.PRIO_PROCESS, 0, 5)),
        ("its own CPUs", lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))]:
    try:
        attempt()
        seen[name] = "allowed"
    except (OSError, MemoryError, RuntimeError) as err:
        seen[name] = type(err).__name__
print(json.dumps(seen))
"""


def test_a_confined_process_reaches_no_other_process_and_stays_in_its_limits(tmp_path):
    """No new process or thread, no signal, limit, priority or CPU set of another process, no
    System V shared memory; what concerns itself alone still works."""
    code = CONFINED.format(grader=str(ROOT / "grader" / "sandbox"), big=tmp_path / "big")
    done = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)  # its own group, as a submission has
    out, _ = done.communicate(timeout=60)
    assert json.loads(out) == {
        "fork": "PermissionError", "subprocess": "PermissionError", "thread": "RuntimeError",
        "allocation": "MemoryError", "big file": "OSError", "shared memory": "PermissionError",
        "signal to the parent": "PermissionError", "signal to everyone": "PermissionError",
        "the parent's limits": "PermissionError", "the parent's priority": "PermissionError",
        "the parent's CPUs": "PermissionError", "its own signal": "allowed",
        "its own group's signal": "allowed", "its own limits": "allowed",
        "its own priority": "allowed", "its own CPUs": "allowed"}


def test_a_python_environment_below_tmp_keeps_tmp_read_only(monkeypatch):
    """/tmp is normally a link into the private scratch; with the environment below /tmp (a
    clone there, say) it stays the read-only view that holds it, and TMPDIR does the job."""
    def tmp(command: list[str]) -> list[str]:  # what /tmp becomes
        return [command[i + 1] for i, arg in enumerate(command[:-2])
                if arg == "--symlink" and command[i + 2] == "/tmp"]

    monkeypatch.setattr(sandbox, "_python_trees", lambda: [Path("/opt/course/.venv")])
    assert tmp(sandbox.sandboxed(["true"], 2**26)) == [f"{sandbox.INSIDE_SCRATCH}/tmp"]
    monkeypatch.setattr(sandbox, "_python_trees", lambda: [Path("/tmp/clone/.venv")])
    below_tmp = sandbox.sandboxed(["true"], 2**26)
    assert tmp(below_tmp) == [] and "/tmp/clone/.venv" in below_tmp


def test_an_environment_where_the_sandbox_puts_its_folders_is_refused(monkeypatch):
    monkeypatch.setattr(sandbox, "_python_trees", lambda: [Path("/submission/venv")])
    with pytest.raises(sandbox.SandboxUnavailable, match="/submission/venv"):
        sandbox.check(2**26)


def test_without_bubblewrap_the_check_says_how_to_install_it(monkeypatch):
    monkeypatch.setenv("ATTENTION_COURSE_BWRAP", "/nonexistent/bwrap")
    with pytest.raises(sandbox.SandboxUnavailable, match="bubblewrap is not installed"):
        sandbox.check(2**26)


@pytest.fixture
def broken_bwrap(tmp_path, monkeypatch) -> None:
    """A bwrap that fails the way it does where user namespaces are switched off."""
    fake = tmp_path / "bwrap"
    fake.write_text(f"#!/bin/sh\necho '{NO_NAMESPACES}' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("ATTENTION_COURSE_BWRAP", str(fake))


def test_where_bubblewrap_cannot_run_the_check_says_why(broken_bwrap):
    with pytest.raises(sandbox.SandboxUnavailable) as refused:
        sandbox.check(2**26)
    assert NO_NAMESPACES in str(refused.value)
    assert "unprivileged user namespaces" in str(refused.value)


@pytest.mark.slow
def test_grading_refuses_to_run_student_code_unsandboxed_unless_told(broken_bwrap, tmp_path,
                                                                      capsys):
    lesson = "01_embeddings"
    workspace = Workspace(tmp_path / "course")
    submitted = workspace.submitted / "ada" / lesson / f"{lesson}.ipynb"
    submitted.parent.mkdir(parents=True)
    nbformat.write(student_notebook(lesson, dict.fromkeys(practice_names(lesson))), submitted)
    grade = ["--workspace", str(workspace.root), "grade", "--workers", "1"]
    with pytest.raises(SystemExit) as refused:
        cli.main(grade)
    message = str(refused.value)
    assert "Not grading" in message and NO_NAMESPACES in message and "--no-sandbox" in message
    assert not workspace.results.exists()  # nothing ran

    assert cli.main([*grade, "--no-sandbox"]) == 0
    assert "--no-sandbox: student code runs with your rights" in capsys.readouterr().err
    result = json.loads(workspace.result_file("ada", lesson).read_text())
    assert (result["outcome"], result["score"]) == ("graded", result["max_score"])
    assert (workspace.scratch / "worker-0").is_dir()  # it ran on the host, in scratch/


@pytest.mark.slow
def test_the_sandbox_dies_with_the_grader(tmp_path):
    """SIGKILL the grading command mid-submission: nothing it started survives it."""
    lesson = "01_embeddings"
    workspace = Workspace(tmp_path / "course")
    submitted = workspace.submitted / "looper" / lesson / f"{lesson}.ipynb"
    submitted.parent.mkdir(parents=True)
    nbformat.write(student_notebook(lesson, {}, "import time\ntime.sleep(600)"), submitted)
    grader = subprocess.Popen([sys.executable, "-m", "grader", "--workspace",
                               str(workspace.root), "grade", "--workers", "1"], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sandboxed = []
    deadline = time.monotonic() + 120
    while len(sandboxed) < 3 and time.monotonic() < deadline:  # bwrap, its init, the runner...
        time.sleep(0.5)
        sandboxed = psutil.Process(grader.pid).children(recursive=True)
    assert len(sandboxed) >= 3, "the sandbox never started"
    time.sleep(2)  # the submission's process is running its endless cell
    os.kill(grader.pid, signal.SIGKILL)
    grader.wait()
    gone, alive = psutil.wait_procs(sandboxed, timeout=10)
    assert not alive, [p.cmdline() for p in alive]
