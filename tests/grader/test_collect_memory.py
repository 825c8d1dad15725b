"""Collect bounds what it holds in memory, whatever a download says: zip bombs built here
(notebooks of highly compressible bytes, a zip entry whose header lies about its size, a bzip2
entry, a student's zip of such notebooks, JSON made of nothing but structure, a download of more
files than a class hands in, sparse files in an exchange folder) are collected by
``python -m grader collect`` in a process of its own, whose peak resident memory (its own VmHWM)
must stay under ``LIMIT_MIB`` above that of collecting an ordinary class. Each refused file keeps
a row saying why, and the honest students of the same download are collected."""

import json
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.course import ROOT, lesson_names

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # GiB of bombs through collect
L02 = lesson_names()[1]
MiB = 1 << 20
LIMIT_MIB = 256
NOTEBOOK_MIB = 63  # just under what collect reads of one notebook (64 MiB)


def notebook(marker: str, padding: int = 0) -> bytes:
    """The released lesson-02 notebook with a note; ``padding`` spaces in one more cell."""
    data = json.loads((ROOT / "notebooks" / L02 / f"{L02}.ipynb").read_text())
    data["cells"].append({"cell_type": "markdown", "metadata": {}, "source": f"by {marker}"})
    if padding:
        data["cells"].insert(0, {"cell_type": "markdown", "metadata": {}, "source": ""})
    text = json.dumps(data).encode()
    if not padding:
        return text
    return text.replace(b'"source": ""', b'"source": "' + b" " * (padding - len(text)) + b'"',
                        1)


def write_stream(archive: zipfile.ZipFile, name: str, size: int, pattern: bytes = b"\0",
                 compression: int = zipfile.ZIP_DEFLATED) -> None:
    """An entry of ``size`` bytes of ``pattern`` written a MiB at a time (never held whole)."""
    info = zipfile.ZipInfo(name, (2024, 3, 1, 9, 0, 0))
    info.compress_type = compression
    block = (pattern * (MiB // len(pattern) + 1))[:MiB]
    with archive.open(info, "w", force_zip64=size > 2**31) as entry:
        for start in range(0, size, MiB):
            entry.write(block[:min(MiB, size - start)])


def lie_about(path: Path, name: str, size: int) -> None:
    """The central directory says ``name`` holds ``size`` bytes."""
    raw = bytearray(path.read_bytes())
    at = raw.find(b"PK\x01\x02")
    while at >= 0:
        length = struct.unpack_from("<H", raw, at + 28)[0]
        if raw[at + 46:at + 46 + length] == name.encode():
            struct.pack_into("<I", raw, at + 24, size)
            path.write_bytes(bytes(raw))
            return
        at = raw.find(b"PK\x01\x02", at + 4)
    raise AssertionError(f"{name} not in {path}")


def honest(archive: zipfile.ZipFile) -> None:
    for student in ("h01", "h02"):
        archive.writestr(zipfile.ZipInfo(f"{student}_{L02}.ipynb", (2024, 3, 1, 9, 0, 0)),
                         notebook(student), zipfile.ZIP_DEFLATED)


def bombs(path: Path) -> Path:
    """One download holding every kind of bomb, and two honest students."""
    big = notebook("big", NOTEBOOK_MIB * MiB)
    inner = path.with_name("inner.zip")
    with zipfile.ZipFile(inner, "w", zipfile.ZIP_STORED) as student_zip:  # stored: 190 MiB
        for n in range(3):
            student_zip.writestr(f"copy {n} of {L02}.ipynb", big)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        honest(archive)
        for n in range(5):  # 5 notebooks of 63 MiB: 0.3 MiB of zip, 315 MiB of notebooks
            archive.writestr(zipfile.ZipInfo(f"s{n:02}_{L02}.ipynb", (2024, 3, 1, 9, 0, 0)),
                             big, zipfile.ZIP_DEFLATED)
        write_stream(archive, f"liar_{L02}.ipynb", 320 * MiB)  # says 2 KiB
        write_stream(archive, f"bzip_{L02}.ipynb", 64 * MiB, compression=zipfile.ZIP_BZIP2)
        write_stream(archive, f"structure_{L02}.ipynb", 48 * MiB, b"[],")  # 16 M lists
        archive.write(inner, "nested_work.zip")
    inner.unlink()
    lie_about(path, f"liar_{L02}.ipynb", 2048)
    lie_about(path, f"bzip_{L02}.ipynb", 2048)
    return path


# ``python -m grader`` that reports its own peak resident memory (VmHWM) as it ends: the peak of
# the program alone (wait4's ru_maxrss would count the test's own memory, copied at the fork)
PEAK_REPORTED = """
import runpy, sys
try:
    runpy.run_module("grader", run_name="__main__", alter_sys=True)
finally:
    with open("/proc/self/status") as status:
        print(next(line for line in status if line.startswith("VmHWM")), file=sys.stderr)
"""


def run_collect(workspace: Path, source: Path, *options: str) -> tuple[float, str, int]:
    """(peak resident memory in MiB, what it printed, exit status) of
    ``python -m grader collect`` in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-c", PEAK_REPORTED, "--workspace", str(workspace), "collect",
         str(source), *options], cwd=ROOT, capture_output=True, text=True, timeout=600)
    (peak,) = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("VmHWM")]
    return int(peak) / 1024, done.stdout + done.stderr, done.returncode


def collect(workspace: Path, source: Path, *options: str) -> tuple[float, str]:
    peak, out, status = run_collect(workspace, source, "--lesson", L02, *options)
    assert status in (0, 1), out
    return peak, out


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> float:
    """collect's peak on an ordinary download of two students."""
    folder = tmp_path_factory.mktemp("baseline")
    with zipfile.ZipFile(folder / "class.zip", "w") as archive:
        honest(archive)
    peak, out = collect(folder / "course", folder / "class.zip")
    assert "2 students' notebooks written" in out, out
    return peak


def line_of(out: str, file: str) -> str:
    found = [line for line in out.splitlines() if line.startswith(file + "  ")]
    assert len(found) == 1, f"no row for {file!r} in\n{out}"
    return found[0]


def test_zip_bombs_cost_collect_a_notebook_at_a_time(tmp_path, baseline):
    download = bombs(tmp_path / "bombs.zip")
    assert download.stat().st_size < 4 * MiB
    peak, out = collect(tmp_path / "course", download)
    print(f"\ncollect on {download.stat().st_size / MiB:.1f} MiB of bombs: peak "
          f"{peak - baseline:.0f} MiB above its baseline ({baseline:.0f} MiB)")
    assert peak - baseline < LIMIT_MIB, out
    submitted = tmp_path / "course" / "submitted"
    for student in ("h01", "h02"):
        assert b"by " + student.encode() in (submitted / student / L02 / f"{L02}.ipynb"
                                             ).read_bytes()
    assert (submitted / "s04" / L02 / f"{L02}.ipynb").stat().st_size == NOTEBOOK_MIB * MiB
    assert "cannot be read" in line_of(out, f"liar_{L02}.ipynb")
    assert "bzip2" in line_of(out, f"bzip_{L02}.ipynb")
    assert "more structure than a notebook" in line_of(out, f"structure_{L02}.ipynb")
    assert "unpacked" in line_of(out, "nested_work.zip")
    inner = [line for line in out.splitlines() if line.startswith("nested_work.zip!")]
    assert len(inner) == 3 and sum("collected" in line or "renamed" in line
                                   for line in inner) == 1, out


def test_a_download_of_more_files_than_a_class_hands_in_is_refused(tmp_path, baseline):
    download = tmp_path / "many.zip"
    with zipfile.ZipFile(download, "w", zipfile.ZIP_STORED) as archive:
        honest(archive)
        for n in range(60_000):
            archive.writestr(zipfile.ZipInfo(f"s{n}_{L02}.ipynb", (2024, 3, 1, 9, 0, 0)), b"{")
    peak, out, status = run_collect(tmp_path / "course", download, "--lesson", L02)
    assert status == 1 and "more files than a class hands in" in out, out[-2000:]
    assert not (tmp_path / "course" / "submitted").exists()
    assert peak - baseline < LIMIT_MIB


def test_sparse_files_in_an_exchange_folder(tmp_path, baseline):
    inbound = tmp_path / "inbound"
    for student in ("h01", "h02"):
        folder = inbound / f"{student}+{L02}+2024-03-01 09:00:00.000000 UTC"
        folder.mkdir(parents=True)
        (folder / f"{L02}.ipynb").write_bytes(notebook(student))
    attacker = inbound / f"s07+{L02}+2024-03-01 10:00:00.000000 UTC"
    attacker.mkdir()
    for name in (f"{L02}.ipynb", "timestamp.txt", "submission_secret.txt", "notes.txt"):
        with (attacker / name).open("wb") as file:
            file.truncate(2048 * MiB)  # 2 GiB each, on no disk
    peak, out, status = run_collect(tmp_path / "course", inbound)
    print(f"\ncollect on an exchange folder of 8 GiB of sparse files: peak "
          f"{peak - baseline:.0f} MiB above its baseline")
    assert peak - baseline < LIMIT_MIB and status == 1, out
    assert "larger than a notebook" in line_of(
        out, f"s07+{L02}+2024-03-01 10:00:00.000000 UTC/{L02}.ipynb")
    assert (tmp_path / "course" / "submitted" / "h02" / L02 / f"{L02}.ipynb").is_file()
