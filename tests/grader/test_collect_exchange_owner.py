"""nbgrader's exchange collected from the hub's inbound/ folder, with real Unix users (made here
with useradd, removed after): a submission folder must belong to the account its name gives as
the student, as nbgrader's own collect checks (``check_owner``), so a later folder that another
student makes in the victim's name is skipped, with a row naming its owner, and never replaces
the victim's submission."""

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from grader import cli
from grader.course import ROOT, lesson_names
from grader.workspace import Workspace

L02 = lesson_names()[1]
EARLY, LATE = "2024-03-01 09:00:00.000000 UTC", "2024-03-02 09:00:00.000000 UTC"


def notebook(marker: str) -> bytes:
    data = json.loads((ROOT / "notebooks" / L02 / f"{L02}.ipynb").read_text())
    data["cells"].append({"cell_type": "markdown", "metadata": {}, "source": f"by {marker}"})
    return json.dumps(data).encode()


@pytest.fixture(scope="module")
def users():
    """{"victim": pwd entry, "mallory": pwd entry}: two throwaway accounts of this machine."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("making Unix users needs root and useradd")
    names = {who: f"ac{who[:6]}{os.getpid() % 100000}" for who in ("victim", "mallory")}
    made = []
    try:
        for name in names.values():
            subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin",
                            name], check=True, capture_output=True)
            made.append(name)
        yield {who: pwd.getpwnam(name) for who, name in names.items()}
    finally:
        for name in made:
            subprocess.run(["userdel", name], check=False, capture_output=True)


@pytest.fixture
def inbound():
    """An exchange's inbound/ as nbgrader makes it: every user may create a folder there."""
    root = Path(tempfile.mkdtemp(prefix="exchange-"))
    try:
        root.chmod(0o755)
        (root / "inbound").mkdir()
        (root / "inbound").chmod(0o1733)
        yield root / "inbound"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def submit(inbound: Path, user: pwd.struct_passwd, student: str, stamp: str, marker: str) -> str:
    """What ``nbgrader submit`` leaves, made by ``user``'s own processes: a folder in the name of
    ``student``, the notebook and timestamp.txt."""
    folder = f"{student}+{L02}+{stamp}+{marker.replace(' ', '')}"
    source = inbound.parent / f"{marker}.ipynb"
    source.write_bytes(notebook(marker))
    source.chmod(0o644)
    stamp_file = inbound.parent / f"{marker}.txt"
    stamp_file.write_text(stamp)
    stamp_file.chmod(0o644)
    subprocess.run(["sh", "-c", 'mkdir "$1" && cp "$2" "$1/$4" && cp "$3" "$1/timestamp.txt"',
                    "sh", str(inbound / folder), str(source), str(stamp_file), f"{L02}.ipynb"],
                   user=user.pw_uid, group=user.pw_gid, extra_groups=[], check=True)
    assert (inbound / folder).stat().st_uid == user.pw_uid
    return folder


def collect(workspace: Workspace, source: Path, capsys) -> tuple[int, str]:
    try:
        status = cli.main(["--workspace", str(workspace.root), "collect", str(source)])
    except SystemExit as end:
        status = end.code
    return status, capsys.readouterr().out


def row(out: str, file: str) -> str:
    (line,) = [line for line in out.splitlines() if line.startswith(file + "  ")]
    return line


def marker(workspace: Workspace, student: str) -> str:
    path = workspace.submitted / student / L02 / f"{L02}.ipynb"
    return json.loads(path.read_bytes())["cells"][-1]["source"]


def test_a_folder_made_in_another_students_name_is_skipped(tmp_path, users, inbound, capsys):
    victim, mallory = users["victim"], users["mallory"]
    submit(inbound, victim, victim.pw_name, EARLY, "victim")
    submit(inbound, mallory, mallory.pw_name, EARLY, "mallory")
    forged = submit(inbound, mallory, victim.pw_name, LATE, "forged")  # later: it would win
    workspace = Workspace(tmp_path / "course")
    status, out = collect(workspace, inbound, capsys)
    assert marker(workspace, victim.pw_name) == "by victim"
    assert marker(workspace, mallory.pw_name) == "by mallory"
    line = row(out, f"{forged}/{L02}.ipynb")
    assert "skipped" in line and f"belongs to Unix user {mallory.pw_name!r}" in line, line
    assert status == 1
    # a later collect of the same inbound/ (a second download): still the victim's own
    submit(inbound, mallory, victim.pw_name, "2024-03-03 09:00:00.000000 UTC", "forged again")
    status, out = collect(workspace, inbound, capsys)
    assert marker(workspace, victim.pw_name) == "by victim" and status == 1
    assert timestamp(workspace, victim.pw_name) == EARLY


def test_the_students_own_later_folder_replaces_their_submission(tmp_path, users, inbound,
                                                                 capsys):
    victim = users["victim"]
    submit(inbound, victim, victim.pw_name, EARLY, "first")
    submit(inbound, victim, victim.pw_name, LATE, "second")
    workspace = Workspace(tmp_path / "course")
    status, out = collect(workspace, inbound, capsys)
    assert status == 0 and marker(workspace, victim.pw_name) == "by second"


def test_folders_of_root_and_of_whoever_collects_are_believed(tmp_path, users, inbound,
                                                             capsys):
    """A copy of the exchange the instructor made belongs to them; root may write submitted/
    itself anyway."""
    victim = users["victim"]
    folder = inbound / f"{victim.pw_name}+{L02}+{EARLY}"
    folder.mkdir()
    (folder / f"{L02}.ipynb").write_bytes(notebook("copied"))
    workspace = Workspace(tmp_path / "course")
    status, out = collect(workspace, inbound, capsys)
    assert status == 0 and marker(workspace, victim.pw_name) == "by copied"


def test_a_link_or_a_pipe_in_the_exchange_is_not_read(tmp_path, users, inbound, capsys):
    """A student's folder holding a link to the instructor's files (the solutions), or a named
    pipe that would block a reader forever: neither is read, and collect ends."""
    mallory, victim = users["mallory"], users["victim"]
    folder = submit(inbound, mallory, mallory.pw_name, EARLY, "mallory")
    (inbound / folder / f"{L02}.ipynb").unlink()
    os.symlink(ROOT / "solutions" / L02 / f"{L02}.ipynb", inbound / folder / f"{L02}.ipynb")
    os.lchown(inbound / folder / f"{L02}.ipynb", mallory.pw_uid, mallory.pw_gid)
    piped = submit(inbound, victim, victim.pw_name, EARLY, "victim")
    (inbound / piped / f"{L02}.ipynb").unlink()
    os.mkfifo(inbound / piped / f"{L02}.ipynb")
    workspace = Workspace(tmp_path / "course")
    status, out = collect(workspace, inbound, capsys)
    assert status == 1 and not workspace.submitted.exists()
    assert "symbolic link" in row(out, f"{folder}/{L02}.ipynb")
    assert "not a regular file" in row(out, f"{piped}/{L02}.ipynb")


def timestamp(workspace: Workspace, student: str) -> str:
    return (workspace.submitted / student / L02 / "timestamp.txt").read_text()
