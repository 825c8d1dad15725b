"""The autograder's parts on their own: which file is the notebook, the settings, the zip,
the check that the unprivileged user cannot read the autograder's files."""

import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import pytest
from conftest import LESSON

from grader.gradescope import unprivileged
from grader.gradescope.finding import find_notebook
from grader.gradescope.settings import Settings, SettingsError
from grader.sandbox import bwrap

OURS = Path(__file__).parents[2] / "notebooks" / LESSON / \
    f"{LESSON}.ipynb"
OTHER = OURS.parents[1] / "02_scaled_dot_product" / "02_scaled_dot_product.ipynb"


@pytest.mark.parametrize("files, name, note, problem", [
    ({"01_embeddings.ipynb": OURS, "notes.ipynb": OTHER}, "01_embeddings.ipynb", "", ""),
    ({"Copy of it (1).ipynb": OURS, "lesson 2.ipynb": OTHER}, "Copy of it (1).ipynb",
     "graded Copy of it (1).ipynb (expected 01_embeddings.ipynb)", ""),
    ({"work/mine.ipynb": b"{", ".ipynb_checkpoints/x.ipynb": OURS}, "work/mine.ipynb",
     "graded work/mine.ipynb", ""),
    ({"a.ipynb": OURS, "b.ipynb": OURS}, "01_embeddings.ipynb", "",
     "several notebooks of this lesson (a.ipynb, b.ipynb)"),
    ({"a.ipynb": OTHER, "b.ipynb": b"{"}, "01_embeddings.ipynb", "",
     "none of them is this lesson's (a.ipynb, b.ipynb)"),
    ({}, "01_embeddings.ipynb", "", "no notebook in the submission (no file at all)"),
])
def test_the_notebook_is_found_by_name_then_content(tmp_path, files, name, note, problem):
    for path, data in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(data.read_bytes() if isinstance(data, Path) else data)
    found = find_notebook(tmp_path, LESSON)
    assert (found.name, found.problem[:len(problem)]) == (name, problem)
    assert found.note.startswith(note) and (found.data is None) == bool(problem)


def test_settings_refuse_what_gradescope_would_not_take():
    with pytest.raises(SettingsError, match="after_published"):
        Settings(LESSON, hidden_tests="later")
    with pytest.raises(SettingsError, match="within the budget"):
        Settings(LESSON, cell_timeout=900)


def test_the_zip_holds_its_lesson_only_and_runnable_scripts(autograder_zip):
    archive = zipfile.ZipFile(autograder_zip)
    names = set(archive.namelist())
    assert {"setup.sh", "run_autograder", "gradescope.json"} <= names
    assert {n.split("/")[1] for n in names if n.startswith("solutions/")} == {LESSON}
    assert not any("__pycache__" in n or n.startswith("tests/") for n in names)
    for script in ("setup.sh", "run_autograder"):
        assert archive.getinfo(script).external_attr >> 16 & 0o111
        subprocess.run(["bash", "-n"], input=archive.read(script), check=True)


def test_a_readable_secret_is_found_before_student_code_runs(monkeypatch, python_for_all,
                                                            student_user):
    """In a folder the user can reach (pytest's own is root's alone)."""
    monkeypatch.setattr(bwrap, "PYTHON", python_for_all)
    entry = unprivileged.account(student_user)
    folder = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        folder.chmod(0o755)
        shown, kept = folder / "shown", folder / "kept"
        unprivileged.protect((kept,))
        shown.mkdir(mode=0o755)
        assert unprivileged.exposed(entry, (shown, kept)) == [str(shown)]
        assert os.stat(kept).st_mode & 0o777 == 0o700
    finally:
        shutil.rmtree(folder)
    with pytest.raises(unprivileged.NotConfined, match="root"):
        unprivileged.account("root")
