"""nbgrader's schema revision, read in the process, is what the `alembic` command answers."""

import os
import sys
from pathlib import Path

from nbgrader.api import Gradebook
from sqlalchemy import text

from grader.records import alembic_head


def test_the_head_revision_is_what_the_alembic_command_says(monkeypatch):
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    assert alembic_head.head_revision() == alembic_head.ASKS_THE_COMMAND()


def test_a_new_gradebook_is_stamped_with_it_without_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no `alembic` to run
    monkeypatch.setattr("nbgrader.api.get_alembic_version", alembic_head.ASKS_THE_COMMAND)
    alembic_head.install()
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gradebook:
        stamped = gradebook.db.execute(text("SELECT version_num FROM alembic_version")).scalar()
    assert stamped == alembic_head.head_revision()
