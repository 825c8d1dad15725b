"""Collect on each LMS's download, built in the test from the released notebooks and named as
each LMS documents (see grader/intake/formats/): nobody is silently dropped, merged or graded under
another id, every file has a row in the table, and the exit status is 1 exactly when something
was skipped."""

import json
import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from grader import cli
from grader.course import ROOT, lesson_names
from grader.intake.errors import Skip
from grader.intake.students import folder_id, name_variants, squash
from grader.timestamps import TIMESTAMP_FORMAT, parse_time
from grader.workspace import Workspace, folder_digest

L01, L02 = lesson_names()[:2]
T1, T2, T3 = (2024, 3, 1, 9, 0, 0), (2024, 3, 2, 9, 0, 0), (2024, 3, 3, 9, 0, 0)


def notebook(lesson: str, marker: str) -> bytes:
    """The released notebook of ``lesson`` with a note from its student (so every file differs)."""
    data = json.loads((ROOT / "notebooks" / lesson / f"{lesson}.ipynb").read_text())
    data["cells"].append({"cell_type": "markdown", "metadata": {}, "source": f"by {marker}"})
    return json.dumps(data).encode()


def zip_of(path: Path, files: dict[str, bytes | tuple[bytes, tuple]]) -> Path:
    """A zip of ``files`` (name -> bytes, or (bytes, entry time)); one time for all by default,
    as a download that stamps every entry with its own time."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            data, when = data if isinstance(data, tuple) else (data, (2024, 3, 9, 12, 0, 0))
            archive.writestr(zipfile.ZipInfo(name, when), data)
    return path


def run(workspace: Workspace, source: Path, *options: str, capsys) -> tuple[int, str]:
    """``python -m grader collect`` in this process: (exit status, what it printed)."""
    try:
        status = cli.main(["--workspace", str(workspace.root), "collect", str(source), *options])
    except SystemExit as end:
        status = end.code
    return status, capsys.readouterr().out


def rows(out: str, file: str) -> list[str]:
    found = [line for line in out.splitlines() if line.startswith(file + "  ")]
    assert found, f"no row for {file!r} in\n{out}"
    return found


def row(out: str, file: str) -> str:
    (line,) = rows(out, file)
    return line


def cell(line: str, text: str) -> bool:
    return f"  {text}  " in f"{line}  "


def submitted(workspace: Workspace) -> dict[tuple[str, str], bytes]:
    return {(p.parent.parent.name, p.parent.name): p.read_bytes()
            for p in workspace.submitted.glob("*/*/*.ipynb")}


def marker(data: bytes) -> str:
    return json.loads(data)["cells"][-1]["source"]


def timestamp(workspace: Workspace, student: str, lesson: str) -> str | None:
    path = workspace.submitted / student / lesson / "timestamp.txt"
    return path.read_text() if path.is_file() else None


def roster(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- Canvas

CANVAS = {
    "smithbob_1001_5001_02_scaled_dot_product.ipynb": notebook(L02, "bob one"),
    "smithbob_1002_5002_02_scaled_dot_product.ipynb": notebook(L02, "bob two"),
    "o_brienpat_LATE_1003_5003_Copy of 02_scaled_dot_product.ipynb": notebook(L02, "pat"),
    "müllerjörg_1004_5004_02_scaled_dot_product-1.ipynb": notebook(L02, "jörg"),
    "anon_Xy12Z_5006_02_scaled_dot_product.ipynb": notebook(L02, "anonymous"),
    "leeann_1005_5005_answers.pdf": b"%PDF-1.4",
}


def test_canvas_ids_anchor_the_parse_and_nobody_is_lost_or_merged(tmp_path, capsys):
    workspace = Workspace(tmp_path / "course")
    status, out = run(workspace, zip_of(tmp_path / "submissions.zip", CANVAS), capsys=capsys)
    got = submitted(workspace)
    assert {student for student, _ in got} == {"1001", "1002", "1003", "1004", "anon_Xy12Z"}
    assert marker(got["1001", L02]) == "by bob one" and marker(got["1002", L02]) == "by bob two"
    assert marker(got["1003", L02]) == "by pat" and marker(got["1004", L02]) == "by jörg"
    pat = row(out, "o_brienpat_LATE_1003_5003_Copy of 02_scaled_dot_product.ipynb")
    assert cell(pat, "1003") and cell(pat, "renamed") and "LATE" in pat
    plain = row(out, "smithbob_1001_5001_02_scaled_dot_product.ipynb")
    assert cell(plain, "collected")  # the LMS's prefix is not a rename
    # the student who uploaded only a PDF is not silently dropped
    assert cell(row(out, "leeann_1005_5005_answers.pdf"), "skipped")
    assert status == 1
    # Canvas stamps every entry with the download's time: no submission time is made up
    assert timestamp(workspace, "1001", L02) is None
    manifest = json.loads(workspace.manifest.read_text())
    assert manifest["submissions"][f"1003/{L02}"]["late"] is True


def test_canvas_with_a_roster_never_merges_two_students_of_one_name(tmp_path, capsys):
    download = zip_of(tmp_path / "submissions.zip",
                      {k: v for k, v in CANVAS.items() if not k.startswith(("anon", "lee"))})
    two_bobs = roster(tmp_path / "roster.csv", "id,name\ns1,Bob Smith\ns2,Bob Smith\n"
                                               "s3,Pat O'Brien\ns4,Jörg Müller\n")
    workspace = Workspace(tmp_path / "two-bobs")
    status, out = run(workspace, download, "--roster", str(two_bobs), capsys=capsys)
    assert status == 1
    assert set(submitted(workspace)) == {("s3", L02), ("s4", L02)}
    for bob in ("smithbob_1001_5001", "smithbob_1002_5002"):
        line = row(out, f"{bob}_02_scaled_dot_product.ipynb")
        assert cell(line, "skipped") and "ambiguous" in line

    one_bob = roster(tmp_path / "one-bob.csv", "id,name\ns1,Bob Smith\ns3,Pat O'Brien\n"
                                               "s4,Jorg Muller\n")
    workspace = Workspace(tmp_path / "one-bob")
    status, out = run(workspace, download, "--roster", str(one_bob), capsys=capsys)
    assert status == 1 and ("s1", L02) not in submitted(workspace)  # two accounts, one name
    assert "not merged" in row(out, "smithbob_1001_5001_02_scaled_dot_product.ipynb")
    assert set(submitted(workspace)) == {("s3", L02), ("s4", L02)}  # accents folded: Jörg

    with_ids = roster(tmp_path / "ids.csv", "id,name,lms_id\ns1,Bob Smith,1001\n"
                                            "s2,Bob Smith,1002\ns3,Pat O'Brien,\n")
    workspace = Workspace(tmp_path / "with-ids")
    status, out = run(workspace, download, "--roster", str(with_ids), capsys=capsys)
    got = submitted(workspace)
    assert marker(got["s1", L02]) == "by bob one" and marker(got["s2", L02]) == "by bob two"
    assert "not on the roster" in row(out, "müllerjörg_1004_5004_02_scaled_dot_product-1.ipynb")
    assert status == 1

    # one Bob known by his Canvas id: he is collected; the other, matching by name only, is not
    half = roster(tmp_path / "half.csv", "id,name,lms_id\ns1,Bob Smith,1001\n")
    workspace = Workspace(tmp_path / "half")
    status, out = run(workspace, download, "--roster", str(half), capsys=capsys)
    assert marker(submitted(workspace)["s1", L02]) == "by bob one"
    assert "not merged" in row(out, "smithbob_1002_5002_02_scaled_dot_product.ipynb")

    # two accounts the roster gives to one student: merged, and the table says so
    both = roster(tmp_path / "both.csv", "id,name,lms_id\ns1,Bob Smith,1001;1002\n")
    workspace = Workspace(tmp_path / "both")
    status, out = run(workspace, download, "--roster", str(both), capsys=capsys)
    merged = [row(out, f"smithbob_{ids}_02_scaled_dot_product.ipynb")
              for ids in ("1001_5001", "1002_5002")]
    assert all(cell(line, "merged") or cell(line, "superseded") for line in merged)
    assert any(cell(line, "merged") for line in merged)
    assert {s for s, _ in submitted(workspace)} == {"s1"}


def test_a_name_matched_account_cannot_take_over_a_student_in_a_later_lesson(tmp_path, capsys):
    workspace = Workspace(tmp_path / "course")
    one_bob = roster(tmp_path / "roster.csv", "id,name\ns1,Bob Smith\n")
    first = zip_of(tmp_path / "01.zip", {
        "smithbob_1001_5001_01_embeddings.ipynb": notebook(L01, "bob one")})
    assert run(workspace, first, "--roster", str(one_bob), capsys=capsys)[0] == 0
    second = zip_of(tmp_path / "02.zip", {
        "smithbob_1002_5002_02_scaled_dot_product.ipynb": notebook(L02, "bob two")})
    status, out = run(workspace, second, "--roster", str(one_bob), capsys=capsys)
    assert status == 1 and set(submitted(workspace)) == {("s1", L01)}
    assert "Canvas user 1001" in row(out, "smithbob_1002_5002_02_scaled_dot_product.ipynb")


# ---------------------------------------------------------------- Moodle

def test_moodle_folders_and_flat_names(tmp_path, capsys):
    folders = zip_of(tmp_path / "folders.zip", {
        "Bob Smith_55_assignsubmission_file/02_scaled_dot_product.ipynb":
            (notebook(L02, "bob"), T1),
        "Zoë Ñandú_56_assignsubmission_file/lesson two/Copy of 02_scaled_dot_product.ipynb":
            (notebook(L02, "zoë"), T1),
        "Ann Lee_57_assignsubmission_file/02_scaled_dot_product.ipynb": (notebook(L02, "old"), T1),
        "Ann Lee_57_assignsubmission_file/02_scaled_dot_product (1).ipynb":
            (notebook(L02, "new"), T2),
        "Ann Lee_57_assignsubmission_file/readme.txt": (b"hello", T1),
    })
    workspace = Workspace(tmp_path / "course")
    status, out = run(workspace, folders, capsys=capsys)
    got = submitted(workspace)
    assert set(got) == {("bob-smith", L02), ("zoe-nandu", L02), ("ann-lee", L02)}
    assert marker(got["ann-lee", L02]) == "by new"
    old = row(out, "Ann Lee_57_assignsubmission_file/02_scaled_dot_product.ipynb")
    assert cell(old, "superseded") and "newer" in old
    assert "written as 'zoe-nandu'" in row(
        out, "Zoë Ñandú_56_assignsubmission_file/lesson two/Copy of 02_scaled_dot_product.ipynb")
    assert cell(row(out, "Ann Lee_57_assignsubmission_file/readme.txt"), "ignored")
    assert status == 0
    assert timestamp(workspace, "ann-lee", L02).endswith(" UTC")

    flat = zip_of(tmp_path / "flat.zip", {
        "Bob Smith_55_assignsubmission_file_02_scaled_dot_product.ipynb": notebook(L02, "bob"),
        "Ann Lee_57_assignsubmission_file_Copy of 02_scaled_dot_product.ipynb":
            notebook(L02, "ann"),
        "Bob Smith_58_assignsubmission_file_02_scaled_dot_product.ipynb": notebook(L02, "bob 2"),
    })
    workspace = Workspace(tmp_path / "flat")
    status, out = run(workspace, flat, capsys=capsys)
    assert status == 1 and set(submitted(workspace)) == {("ann-lee", L02)}
    for participant in (55, 58):  # two Bob Smiths: neither is merged into the other
        line = row(out, f"Bob Smith_{participant}_assignsubmission_file_02_scaled_dot_product"
                        f".ipynb")
        assert cell(line, "skipped") and "ambiguous" in line


# ---------------------------------------------------------------- Gradescope

GRADESCOPE_METADATA = """\
submission_101:
  :submitters:
  - :name: Bob Smith
    :sid: '100'
    :email: bob@example.edu
  :created_at: 2024-03-01 10:15:30.123456000 -08:00
  :score: !ruby/object:BigDecimal 18:0.1e2
submission_102:
  :submitters:
  - :name: Ann Lee
    :sid: '200'
    :email: ann@example.edu
  - :name: Chen Wei
    :sid: '201'
    :email: chen@example.edu
  :created_at: 2024-03-02 08:00:00.000000000 +00:00
submission_103:
  :submitters: []
"""


def test_gradescope_export_with_group_submissions_and_times(tmp_path, capsys):
    root = "assignment_4242_export"
    export = zip_of(tmp_path / "export.zip", {
        f"{root}/submission_metadata.yml": GRADESCOPE_METADATA.encode(),
        f"{root}/submission_101/02_scaled_dot_product.ipynb": notebook(L02, "bob"),
        f"{root}/submission_102/Copy of 02_scaled_dot_product.ipynb": notebook(L02, "group"),
        f"{root}/submission_103/02_scaled_dot_product.ipynb": notebook(L02, "nobody"),
        f"__MACOSX/{root}/._submission_metadata.yml": b"\0",
    })
    workspace = Workspace(tmp_path / "course")
    status, out = run(workspace, export, capsys=capsys)
    got = submitted(workspace)
    assert set(got) == {("100", L02), ("200", L02), ("201", L02)}  # never "02"
    assert marker(got["200", L02]) == marker(got["201", L02]) == "by group"
    group = rows(out, f"{root}/submission_102/Copy of 02_scaled_dot_product.ipynb")
    assert len(group) == 2 and all("group submission" in line for line in group)
    assert timestamp(workspace, "100", L02) == "2024-03-01 18:15:30.123456 UTC"
    assert cell(row(out, f"{root}/submission_103/02_scaled_dot_product.ipynb"), "skipped")
    assert status == 1


# ---------------------------------------------------------------- Google Classroom / Drive

def test_classroom_and_drive_names_and_folders(tmp_path, capsys):
    download = zip_of(tmp_path / "drive.zip", {
        "Bob Smith - 02_scaled_dot_product.ipynb": notebook(L02, "bob"),
        "Ann Lee - Copy of 02_scaled_dot_product.ipynb": notebook(L02, "ann"),
        "张伟 - 02_scaled_dot_product.ipynb": notebook(L02, "zhang"),
        "Chen Wei/02_scaled_dot_product.ipynb": notebook(L02, "chen"),
    })
    workspace = Workspace(tmp_path / "course")
    status, out = run(workspace, download, capsys=capsys)
    got = submitted(workspace)
    assert status == 0 and len(got) == 4
    assert {"bob-smith", "ann-lee", "chen-wei"} <= {student for student, _ in got}
    zhang = row(out, "张伟 - 02_scaled_dot_product.ipynb")
    (zhang_id,) = {student for student, _ in got} - {"bob-smith", "ann-lee", "chen-wei"}
    assert zhang_id.isascii() and zhang_id.startswith("xn--") and "written as" in zhang
    assert cell(row(out, "Ann Lee - Copy of 02_scaled_dot_product.ipynb"), "renamed")

    class_list = roster(tmp_path / "roster.csv",
                        "student_id,first_name,last_name\ns1,Bob,Smith\ns2,Ann,Lee\n"
                        "s3,Wei,Chen\ns4,伟,张\n")
    workspace = Workspace(tmp_path / "with-roster")
    status, out = run(workspace, download, "--roster", str(class_list), capsys=capsys)
    assert status == 0 and {s for s, _ in submitted(workspace)} == {"s1", "s2", "s3", "s4"}
    assert marker(submitted(workspace)["s3", L02]) == "by chen"  # "Chen Wei" = Wei Chen


# ---------------------------------------------------------------- nbgrader's exchange

def test_nbgrader_exchange_inbound_keeps_the_newest_with_its_timestamp(tmp_path, capsys):
    inbound = tmp_path / "exchange" / "attention-step-by-step" / "inbound"
    submissions = {
        "s07+02_scaled_dot_product+2024-03-01 10:00:00.000000 UTC+4f2a9c": ("first", None),
        "s07+02_scaled_dot_product+2024-03-02 11:30:00.250000 UTC+8e1b7d":
            ("second", "2024-03-02 11:30:00.250000 UTC"),
        "s08+02_scaled_dot_product+2024-03-01 12:00:00.000000 UTC": ("eight", None),
    }
    for folder, (who, stamp) in submissions.items():
        (inbound / folder).mkdir(parents=True)
        (inbound / folder / "02_scaled_dot_product.ipynb").write_bytes(notebook(L02, who))
        if stamp:
            (inbound / folder / "timestamp.txt").write_text(stamp)
        (inbound / folder / "submission_secret.txt").write_text(f"secret of {who}")
    workspace = Workspace(tmp_path / "course")
    status, out = run(workspace, inbound, capsys=capsys)
    got = submitted(workspace)
    assert status == 0 and set(got) == {("s07", L02), ("s08", L02)}
    assert marker(got["s07", L02]) == "by second"
    assert timestamp(workspace, "s07", L02) == "2024-03-02 11:30:00.250000 UTC"
    assert timestamp(workspace, "s08", L02) == "2024-03-01 12:00:00.000000 UTC"
    for student, who in (("s07", "second"), ("s08", "eight")):  # for fetch_feedback
        kept = workspace.submitted / student / L02 / "submission_secret.txt"
        assert kept.read_text() == f"secret of {who}"
    first = "s07+02_scaled_dot_product+2024-03-01 10:00:00.000000 UTC+4f2a9c/"
    assert cell(row(out, first + "02_scaled_dot_product.ipynb"), "superseded")
    # known by the same hash as before collect read folders a chunk at a time
    assert folder_digest(inbound) in json.loads(workspace.manifest.read_text())["archives"]


# ---------------------------------------------------------------- this course's own naming

def test_files_keep_the_newest_never_unpack_a_zip_as_other_students_and_refuse_bad_ids(
        tmp_path, capsys):
    nested = tmp_path / "nested.zip"
    zip_of(nested, {"bob_02_scaled_dot_product.ipynb": (notebook(L02, "in the zip"), T1),
                    "s10_01_embeddings.ipynb": (notebook(L01, "also in the zip"), T2)})
    stranger = json.loads(notebook(L02, "stranger"))
    for entry in stranger["cells"]:
        if "nbgrader" in entry["metadata"]:
            entry["metadata"]["nbgrader"]["grade_id"] = "another_course_" + \
                entry["metadata"]["nbgrader"]["grade_id"]
    download = zip_of(tmp_path / "class.zip", {
        "submissions/s07_02_scaled_dot_product.ipynb": (notebook(L02, "old"), T1),
        "submissions/s07_02_scaled_dot_product (1).ipynb": (notebook(L02, "new"), T2),
        "submissions/s09_my work.zip": (nested.read_bytes(), T3),
        "submissions/.._02_scaled_dot_product.ipynb": (notebook(L02, "dots"), T1),
        "submissions/" + "x" * 80 + "_02_scaled_dot_product.ipynb": (notebook(L02, "long"), T1),
        "submissions/bell\x07_02_scaled_dot_product.ipynb": (notebook(L02, "bell"), T1),
        "submissions/s11_02_scaled_dot_product.ipynb": (json.dumps(stranger).encode(), T1),
        "submissions/s12_02_scaled_dot_product.ipynb": (b"", T1),
        "submissions/s13_homework.ipynb": (b"{", T1),
        "submissions/s14_01_embeddings.ipynb": (notebook(L01, "s14"), T1),
        "s15/02_scaled_dot_product/02_scaled_dot_product.ipynb": (notebook(L02, "s15"), T1),
        "submissions/.ipynb_checkpoints/s07_02_scaled_dot_product-checkpoint.ipynb":
            (notebook(L02, "autosave"), T3),
    })
    workspace = Workspace(tmp_path / "course")
    status, out = run(workspace, download, capsys=capsys)
    got = submitted(workspace)
    assert status == 1
    assert marker(got["s07", L02]) == "by new"
    assert cell(row(out, "submissions/s07_02_scaled_dot_product.ipynb"), "superseded")
    assert cell(row(out, "submissions/s07_02_scaled_dot_product (1).ipynb"), "renamed")
    # the nested zip is s09's, whatever names are inside it
    assert marker(got["s09", L02]) == "by in the zip"
    assert marker(got["s09", L01]) == "by also in the zip"
    assert not {"bob", "s10"} & {student for student, _ in got}
    inner = row(out, "submissions/s09_my work.zip!bob_02_scaled_dot_product.ipynb")
    assert cell(inner, "s09") and "'bob_02_scaled_dot_product.ipynb'" in inner
    assert cell(row(out, "submissions/s09_my work.zip"), "unpacked")
    for bad in (".._02", "x" * 80 + "_02", "bell\x07_02"):
        assert cell(row(out, f"submissions/{bad}_scaled_dot_product.ipynb"), "skipped")
    assert not (workspace.root / "submitted" / "..").resolve().joinpath(L02).exists()
    assert "no lesson" in row(out, "submissions/s11_02_scaled_dot_product.ipynb")
    # unreadable: filed under the lesson its name says, for grading to report; else skipped
    assert got["s12", L02] == b"" and "grading will say" in row(
        out, "submissions/s12_02_scaled_dot_product.ipynb")
    assert cell(row(out, "submissions/s13_homework.ipynb"), "skipped")
    assert marker(got["s14", L01]) == "by s14" and marker(got["s15", L02]) == "by s15"
    assert cell(row(out, "submissions/.ipynb_checkpoints/s07_02_scaled_dot_product-checkpoint"
                         ".ipynb"), "ignored")
    assert {student for student, _ in got} == {"s07", "s09", "s12", "s14", "s15"}


def test_a_damaged_entry_is_skipped_and_the_class_is_still_collected(tmp_path, capsys):
    damaged = notebook(L02, "damaged")
    download = zip_of(tmp_path / "class.zip", {"s07_02.ipynb": damaged,
                                               "s08_02.ipynb": notebook(L02, "fine")})
    raw = download.read_bytes()
    at = raw.index(damaged) + len(damaged) // 2
    download.write_bytes(raw[:at] + bytes([raw[at] ^ 1]) + raw[at + 1:])  # its CRC fails
    workspace = Workspace(tmp_path / "course")
    status, out = run(workspace, download, capsys=capsys)
    assert status == 1 and set(submitted(workspace)) == {("s08", L02)}
    assert "cannot be read" in row(out, "s07_02.ipynb")


def test_lesson_option_refuses_another_lessons_notebook_and_files_unreadable_ones(
        tmp_path, capsys):
    download = zip_of(tmp_path / "02.zip", {
        "s07_02.ipynb": notebook(L02, "s07"), "s08_homework.ipynb": notebook(L01, "wrong"),
        "s09_homework.ipynb": b"{ half"})
    workspace = Workspace(tmp_path / "course")
    status, out = run(workspace, download, "--lesson", L02, capsys=capsys)
    assert status == 1 and set(submitted(workspace)) == {("s07", L02), ("s09", L02)}
    assert f"holds lesson {L01}" in row(out, "s08_homework.ipynb")


# ---------------------------------------------------------------- collecting again

def test_a_second_download_adds_and_supersedes_and_makes_no_phantom_students(tmp_path, capsys):
    workspace = Workspace(tmp_path / "course")
    first = zip_of(tmp_path / "first.zip", {
        "Ann Lee_57_assignsubmission_file/02_scaled_dot_product.ipynb":
            (notebook(L02, "ann 1"), T1),
        "Bob Smith_55_assignsubmission_file/02_scaled_dot_product.ipynb":
            (notebook(L02, "bob"), T1),
    })
    assert run(workspace, first, capsys=capsys)[0] == 0
    before = submitted(workspace)
    status, out = run(workspace, first, capsys=capsys)
    assert status == 0 and "collected before" in out and submitted(workspace) == before
    # Moodle's participant ids differ per download; the names carry over
    second = zip_of(tmp_path / "second.zip", {
        "Ann Lee_91_assignsubmission_file/02_scaled_dot_product.ipynb":
            (notebook(L02, "ann 2"), T2),
        "Bob Smith_92_assignsubmission_file/02_scaled_dot_product.ipynb":
            (notebook(L02, "bob"), T1),
        "Cy Young_93_assignsubmission_file/02_scaled_dot_product.ipynb":
            (notebook(L02, "cy"), T2),
    })
    status, out = run(workspace, second, capsys=capsys)
    got = submitted(workspace)
    assert status == 0 and set(got) == {("ann-lee", L02), ("bob-smith", L02), ("cy-young", L02)}
    assert marker(got["ann-lee", L02]) == "by ann 2"
    assert cell(row(out, "Bob Smith_92_assignsubmission_file/02_scaled_dot_product.ipynb"),
                "unchanged")
    older = zip_of(tmp_path / "older.zip", {
        "Ann Lee_57_assignsubmission_file/02_scaled_dot_product.ipynb":
            (notebook(L02, "ann 0"), (2024, 2, 1, 9, 0, 0)),
        "Cy Young_93_assignsubmission_file/notes.txt": (b"notes", T1),
    })
    status, out = run(workspace, older, capsys=capsys)
    assert marker(submitted(workspace)["ann-lee", L02]) == "by ann 2"
    assert cell(row(out, "Ann Lee_57_assignsubmission_file/02_scaled_dot_product.ipynb"),
                "superseded")
    assert status == 1  # Cy's notes alone are no notebook: said so, not passed over
    assert len(list(workspace.submitted.iterdir())) == 3
    # a notebook removed by hand comes back when the download is read again on purpose
    (workspace.submitted / "bob-smith" / L02 / f"{L02}.ipynb").unlink()
    status, out = run(workspace, second, capsys=capsys)
    assert "collected before" in out and ("bob-smith", L02) not in submitted(workspace)
    status, out = run(workspace, second, "--again", capsys=capsys)
    assert status == 0 and set(submitted(workspace)) == {
        ("ann-lee", L02), ("bob-smith", L02), ("cy-young", L02)}
    assert cell(row(out, "Bob Smith_92_assignsubmission_file/02_scaled_dot_product.ipynb"),
                "collected")
    assert cell(row(out, "Cy Young_93_assignsubmission_file/02_scaled_dot_product.ipynb"),
                "unchanged")


# ---------------------------------------------------------------- ids, names, the command

def test_zip_names_written_as_utf8_without_the_flag_are_read_as_utf8(tmp_path, capsys):
    name = "Zoë Ñandú_56_assignsubmission_file_02_scaled_dot_product.ipynb"
    placeholder = "x" * len(name.encode("utf-8"))
    download = zip_of(tmp_path / "moodle.zip", {placeholder: notebook(L02, "zoë")})
    raw = download.read_bytes()
    download.write_bytes(raw.replace(placeholder.encode(), name.encode("utf-8")))
    with zipfile.ZipFile(download) as archive:
        assert archive.namelist() != [name]  # what zipfile makes of it: cp437
    workspace = Workspace(tmp_path / "course")
    status, out = run(workspace, download, capsys=capsys)
    assert status == 0 and cell(row(out, name), "zoe-nandu")


@pytest.mark.parametrize(("raw", "expected"), [
    ("s07", "s07"), ("jane.doe@example.edu", "jane.doe@example.edu"), ("Zoë", "Zoe"),
    ("bob smith", "bob-smith")])
def test_folder_ids(raw, expected):
    assert folder_id(raw)[0] == expected


@pytest.mark.parametrize("raw", ["", ".", "..", "a/b", "a\\b", "tab\there", "x" * 65])
def test_ids_that_cannot_be_folders_are_refused(raw):
    with pytest.raises(Skip):
        folder_id(raw)


def test_names_match_in_any_order_case_and_accents():
    assert squash("O_Brien, Pat") in name_variants("Pat O'Brien")
    assert squash("müllerjörg") in name_variants("Jorg Muller")
    assert squash("Smith, Bob") in name_variants("Bob Smith")


def test_python_m_grader_collect_prints_the_table_and_fails_on_a_skip(tmp_path):
    download = zip_of(tmp_path / "download.zip", {
        "smithbob_1001_5001_02_scaled_dot_product.ipynb": notebook(L02, "bob"),
        "leeann_1005_5005_answers.pdf": b"%PDF-1.4"})
    done = subprocess.run([sys.executable, "-m", "grader", "--workspace",
                           str(tmp_path / "course"), "collect", str(download), "--dry-run"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["file", "student", "lesson", "outcome", "submitted", "details"]
    assert cell(row(done.stdout, "smithbob_1001_5001_02_scaled_dot_product.ipynb"), "1001")
    assert cell(row(done.stdout, "leeann_1005_5005_answers.pdf"), "skipped")
    assert not (tmp_path / "course").exists()  # a dry run writes nothing


def test_times_are_written_as_nbgrader_reads_them():
    when = datetime(2024, 3, 1, 18, 15, 30, 123456, tzinfo=UTC)
    text = when.strftime(TIMESTAMP_FORMAT)
    assert text == "2024-03-01 18:15:30.123456 UTC"
    assert parse_time(text) == when


# ---------------------------------------------------------------- a stray notebook

def untitled() -> bytes:
    """What JupyterLab's "New notebook" saves: no nbgrader cells, nothing of the lesson."""
    return json.dumps({"cells": [{"cell_type": "code", "execution_count": None, "metadata": {},
                                  "outputs": [], "source": ""}],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()


STRAYS = {  # a file a student may hand in beside the lesson's notebook -> why it is no notebook
    "Untitled.ipynb": untitled(),
    "Untitled1.ipynb": notebook(L01, "another lesson"),
    "Untitled2.ipynb": notebook(L02, "half")[:5000],  # saved halfway: not JSON
}


@pytest.mark.parametrize("stray", STRAYS)
@pytest.mark.parametrize("stray_first", [False, True], ids=["stray-after", "stray-before"])
def test_a_stray_notebook_never_replaces_the_lessons_one_in_a_canvas_download(
        tmp_path, capsys, stray, stray_first):
    files = [(f"smithbob_1001_5001_{L02}.ipynb", notebook(L02, "bob")),
             (f"smithbob_1001_5002_{stray}", STRAYS[stray])]
    download = zip_of(tmp_path / "submissions.zip", dict(files[::-1] if stray_first else files))
    workspace = Workspace(tmp_path / "course")
    status, out = run(workspace, download, "--lesson", L02, capsys=capsys)
    assert marker(submitted(workspace)["1001", L02]) == "by bob"
    assert cell(row(out, f"smithbob_1001_5001_{L02}.ipynb"), "collected")
    line = row(out, f"smithbob_1001_5002_{stray}")
    assert cell(line, "superseded") or cell(line, "skipped"), line
    if cell(line, "superseded"):  # it says why: the other one is the lesson's notebook
        assert "holds the lesson's nbgrader cells" in line, line
    else:
        assert f"holds lesson {L01}" in line, line
    assert status == (1 if stray == "Untitled1.ipynb" else 0)


def test_a_notebook_with_the_lessons_cells_wins_whatever_the_times(tmp_path, capsys):
    download = zip_of(tmp_path / "class.zip", {
        f"s07_{L02}.ipynb": (notebook(L02, "s07"), T1),
        "s07_Untitled.ipynb": (untitled(), T3),  # newer, but not the lesson's
        f"s08_{L02}.ipynb": (notebook(L02, "s08 old"), T1),
        f"s08_{L02} (1).ipynb": (notebook(L02, "s08 new"), T2),
        "s08_Untitled.ipynb": (STRAYS["Untitled2.ipynb"], T3),
        "s09_Untitled.ipynb": (untitled(), T1),  # all s09 handed in: collected, for grading
    })
    workspace = Workspace(tmp_path / "course")
    status, out = run(workspace, download, "--lesson", L02, capsys=capsys)
    got = submitted(workspace)
    assert status == 0
    assert marker(got["s07", L02]) == "by s07" and marker(got["s08", L02]) == "by s08 new"
    assert got["s09", L02] == untitled()
    for stray in ("s07_Untitled.ipynb", "s08_Untitled.ipynb"):
        line = row(out, stray)
        assert cell(line, "superseded") and "holds the lesson's nbgrader cells" in line, line
    assert "not valid JSON" in row(out, "s08_Untitled.ipynb")
    assert cell(row(out, f"s08_{L02}.ipynb"), "superseded")  # newest of the two with cells


def test_a_later_download_without_the_lessons_cells_never_replaces_one_with_them(
        tmp_path, capsys):
    workspace = Workspace(tmp_path / "course")
    first = zip_of(tmp_path / "first.zip", {f"s07_{L02}.ipynb": (notebook(L02, "s07"), T1),
                                            "s08_Untitled.ipynb": (untitled(), T1)})
    assert run(workspace, first, "--lesson", L02, capsys=capsys)[0] == 0
    second = zip_of(tmp_path / "second.zip", {
        "s07_Untitled.ipynb": (untitled(), T3),
        "s07_Untitled1.ipynb": (STRAYS["Untitled2.ipynb"], T3),
        f"s08_{L02}.ipynb": (notebook(L02, "s08"), (2024, 2, 1, 9, 0, 0)),  # older, but real
    })
    status, out = run(workspace, second, "--lesson", L02, capsys=capsys)
    got = submitted(workspace)
    assert status == 0
    assert marker(got["s07", L02]) == "by s07"  # kept: the one collected before is the lesson's
    line = next(line for name in ("s07_Untitled.ipynb", "s07_Untitled1.ipynb")
                for line in rows(out, name) if not cell(line, "superseded") or "first.zip" in line)
    assert cell(line, "superseded") and "first.zip" in line and \
        "holds the lesson's nbgrader cells" in line, out
    assert marker(got["s08", L02]) == "by s08"  # the lesson's notebook replaces the stray
    assert "replaces" in row(out, f"s08_{L02}.ipynb")
