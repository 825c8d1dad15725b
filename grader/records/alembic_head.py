"""nbgrader's schema revision, read once, in the process.

Every time nbgrader creates a gradebook it stamps the schema with its migrations' head revision,
which it asks of the `alembic` command (a new process, a second or more on a busy machine). The
answer is a property of the installed nbgrader: this module reads it from nbgrader's own
migration scripts with alembic's Python API, once per process, and gives nbgrader that instead
(``install``: ``database.prepare`` and ``release.generate`` call it before nbgrader creates a
gradebook). A test compares the answer with the command's.
"""

import functools

import nbgrader.api
from alembic.config import Config
from alembic.script import ScriptDirectory
from nbgrader.dbutil import ALEMBIC_DIR


@functools.cache
def head_revision() -> str:
    """The head revision of nbgrader's migrations, as `alembic heads` prints it."""
    config = Config()
    config.set_main_option("script_location", ALEMBIC_DIR)
    return ScriptDirectory.from_config(config).get_current_head()


ASKS_THE_COMMAND = nbgrader.api.get_alembic_version  # what nbgrader would run


def install() -> None:
    """From now on, nbgrader stamps a new gradebook with ``head_revision``."""
    nbgrader.api.get_alembic_version = head_revision
