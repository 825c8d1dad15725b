"""The gradebook's database: nbgrader's tables and the course's own, on SQLite or PostgreSQL.

The URL is nbgrader's ``db_url`` (``sqlite:///<path>``, or ``postgresql://user@host/db`` through
psycopg 3, the ``postgres`` extra). A URL that cannot be used ends the command with one line
saying why (``GradebookUnavailable``): not a URL, no driver, server unreachable.

Several graders may share one PostgreSQL gradebook, so the database is written one writer at
a time: ``lock(url)`` holds a PostgreSQL advisory lock (released with its connection, so a
grader that dies releases it too; SQLite's own file lock does this job there). The schema is
created once, under that lock, before anything else touches the database (``prepare``):
nbgrader's tables, as its ``Gradebook`` creates them, and the course's own table,
``attention_course_results``, which keeps every result written to the gradebook (the result's
JSON, when, and the digest of the files it was graded from), so any machine can rebuild the
results from the database alone.
"""

import json
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from nbgrader.api import Gradebook
from sqlalchemy import (
    Boolean,
    Column,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    func,
    select,
    text,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError
from sqlalchemy.pool import NullPool

from ..course import COURSE_ID
from . import alembic_head

LOCK_KEY = 0x41747443  # the course's advisory lock ("AttC"), one per database
EXTRA = ("install the course's postgres extra from its checkout: "
         ".venv/bin/python -m pip install -c constraints.txt -e '.[postgres]'")

METADATA = MetaData()
RESULTS = Table(
    "attention_course_results", METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),  # the order written
    Column("student", String(128), nullable=False),
    Column("lesson", String(128), nullable=False),
    Column("recorded", String(40), nullable=False),  # UTC, ISO 8601
    Column("submission", String(64)),  # digest of the submission folder; None: unknown
    Column("lms_late", Boolean, nullable=False, default=False),  # the LMS's LATE, no time
    Column("result", Text, nullable=False),  # Result.to_json()
    Index("ix_attention_course_results_submission", "student", "lesson", "id"))

_prepared: set[str] = set()
_preparing = threading.Lock()


class GradebookUnavailable(SystemExit):
    """The gradebook's URL cannot be used: the command ends with the reason, in one line."""


def shown(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return repr(url)


def engine(url: str):
    """An engine with no pool (each connection is closed when done), or GradebookUnavailable."""
    try:
        return create_engine(url, poolclass=NullPool)
    except NoSuchModuleError:  # before ArgumentError, its base class
        raise GradebookUnavailable(f"gradebook: unknown kind of database in {shown(url)} "
                                   f"(expected sqlite:// or postgresql://)") from None
    except ArgumentError:
        raise GradebookUnavailable(f"gradebook: not a database URL: {shown(url)} (expected "
                                   f"sqlite:///<path> or postgresql://<user>@<host>/<database>)"
                                   ) from None
    except ImportError as err:
        raise GradebookUnavailable(f"gradebook: {shown(url)} needs a database driver that is "
                                   f"not installed ({err.name}): {EXTRA}") from None


def is_postgres(url: str) -> bool:
    try:
        return make_url(url).get_backend_name() == "postgresql"
    except ArgumentError:
        return False


@contextmanager
def _advisory_lock(url: str) -> Iterator[None]:
    if not is_postgres(url):
        yield
        return
    with engine(url).connect() as connection:
        connection = connection.execution_options(isolation_level="AUTOCOMMIT")
        connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": LOCK_KEY})
        try:
            yield
        finally:
            connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": LOCK_KEY})


def prepare(url: str) -> None:
    """Create the schema if it is not there yet (once per database: under the lock) and check
    that the database can be reached; once per URL and process."""
    with _preparing:
        if url in _prepared:
            return
        tables = engine(url)  # GradebookUnavailable for a URL that cannot be used
        alembic_head.install()  # a new gradebook is stamped without running `alembic`
        try:
            with _advisory_lock(url):
                Gradebook(url, course_id=COURSE_ID).close()  # nbgrader's tables, its course
                METADATA.create_all(tables)
        except OperationalError as err:
            reason = str(err.orig or err).strip().splitlines()[0]
            raise GradebookUnavailable(f"gradebook: cannot reach {shown(url)}: {reason}") from None
        _prepared.add(url)


@contextmanager
def lock(url: str) -> Iterator[None]:
    """Be the gradebook's one writer while inside (across processes and machines)."""
    prepare(url)
    with _advisory_lock(url):
        yield


@contextmanager
def gradebook(url: str) -> Iterator[Gradebook]:
    """nbgrader's Gradebook of the course, on a prepared database."""
    prepare(url)
    with Gradebook(url, course_id=COURSE_ID) as book:
        yield book


# -- the course's table of results ---------------------------------------------------------------

def add_entry(book: Gradebook, student: str, lesson: str, entry: dict, lms_late: bool,
              result_json: str) -> None:
    """Add one history entry in the gradebook's transaction (committed with it)."""
    book.db.execute(RESULTS.insert().values(
        student=student, lesson=lesson, recorded=entry["recorded"],
        submission=entry.get("submission"), lms_late=lms_late, result=result_json))


def entries(book: Gradebook, student: str, lesson: str) -> list[dict]:
    """Every entry of one submission, oldest first: {"recorded", "submission", "result",
    "lms_late"}."""
    rows = book.db.execute(select(RESULTS).where(RESULTS.c.student == student,
                                                 RESULTS.c.lesson == lesson)
                           .order_by(RESULTS.c.id))
    return [_entry(row) for row in rows]


def newest(book: Gradebook, keys: Iterable[tuple[str, str]] | None = None
           ) -> dict[tuple[str, str], dict]:
    """(student, lesson) -> its newest entry, for ``keys`` (default: every submission)."""
    rows = book.db.execute(select(RESULTS).where(RESULTS.c.id.in_(_newest_ids())))
    found = {(row.student, row.lesson): _entry(row) for row in rows}
    return found if keys is None else {key: found[key] for key in keys if key in found}


def late_markers(book: Gradebook) -> set[tuple[str, str]]:
    """(student, lesson) whose newest entry carries the LMS's LATE marker."""
    rows = book.db.execute(select(RESULTS.c.student, RESULTS.c.lesson)
                           .where(RESULTS.c.id.in_(_newest_ids()), RESULTS.c.lms_late))
    return {(row.student, row.lesson) for row in rows}


def _newest_ids():
    return select(func.max(RESULTS.c.id)).group_by(RESULTS.c.student,
                                                   RESULTS.c.lesson).scalar_subquery()


def _entry(row) -> dict:
    return {"recorded": row.recorded, "submission": row.submission,
            "result": json.loads(row.result), "lms_late": bool(row.lms_late)}
