"""A throwaway PostgreSQL server, for the tests and the benchmarks.

    from helpers.postgres import throwaway_server

    with throwaway_server() as server:
        url = server.create_database()  # a fresh, empty database: postgresql://postgres@/db_1?host=...
        ...                              # e.g. ATTENTION_COURSE_GRADEBOOK=url

``throwaway_server()`` runs Debian's PostgreSQL binaries (the newest of
/usr/lib/postgresql/<version>/bin, else ``initdb`` on PATH): initdb in a new temporary folder,
then the server, listening only on a Unix socket in that folder (no TCP port), with the
superuser ``postgres`` and trust authentication, and durability off (fsync) since nothing in it
outlives the test. PostgreSQL refuses to run as root: as root, the folder belongs to the
``postgres`` user (``nobody`` where there is none) and the server runs as that user. On leaving
the ``with`` block, failed test or not, the server is stopped (immediate shutdown: clients are
disconnected, nothing is saved) and the folder removed.

``Server.url`` is the URL of the server's ``postgres`` database; ``Server.create_database()``
creates a new database and returns its URL. The URLs are plain ``postgresql://`` ones, as an
instructor writes them (SQLAlchemy reaches them with psycopg 3). Without the binaries,
``PostgresMissing`` says to run ``make postgresql``.
"""

import contextlib
import itertools
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

DEBIAN_BINARIES = Path("/usr/lib/postgresql")
SETTINGS = {"listen_addresses": "", "fsync": "off", "synchronous_commit": "off",
            "full_page_writes": "off", "max_connections": "200"}


class PostgresMissing(RuntimeError):
    """PostgreSQL's server binaries are not installed."""


def binaries() -> Path:
    """The folder of initdb and postgres: Debian's newest version, else the one on PATH."""
    versions = sorted((p for p in DEBIAN_BINARIES.glob("*/bin") if (p / "initdb").is_file()),
                      key=lambda p: [int(n) for n in re.findall(r"\d+", p.parent.name)])
    if versions:
        return versions[-1]
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    raise PostgresMissing(f"PostgreSQL's server is not installed (no {DEBIAN_BINARIES}/<version>"
                          f"/bin/initdb, no initdb on PATH): run `make postgresql`")


class Server:
    """A running throwaway server: its URL, and fresh databases on it."""

    def __init__(self, socket_dir: Path):
        self.socket_dir = socket_dir
        self._names = itertools.count(1)

    def database_url(self, name: str) -> str:
        return f"postgresql://postgres@/{name}?host={self.socket_dir}"

    @property
    def url(self) -> str:
        return self.database_url("postgres")

    def create_database(self) -> str:
        """Create a new, empty database and return its URL."""
        import psycopg

        name = f"db_{next(self._names)}"
        with psycopg.connect(host=str(self.socket_dir), user="postgres", dbname="postgres",
                             autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.database_url(name)


def _server_user() -> tuple[int, int] | None:
    """(uid, gid) to run the server as: None (this user) unless this is root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return entry.pw_uid, entry.pw_gid
    raise PostgresMissing("running as root, and there is no postgres or nobody user to run "
                          "PostgreSQL as")


def _run(command: list[str], user: tuple[int, int] | None, **kwargs) -> subprocess.Popen:
    ids = {"user": user[0], "group": user[1], "extra_groups": []} if user else {}
    return subprocess.Popen(command, **ids, **kwargs)


def _initdb(bin_dir: Path, data: Path, user) -> None:
    done = _run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                 "-E", "UTF8", "--no-sync"], user, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True)
    output, _ = done.communicate(timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"initdb failed:\n{output}")


def _wait_until_ready(process: subprocess.Popen, socket_dir: Path, log: Path,
                      timeout: float = 60.0) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"PostgreSQL stopped at start:\n{log.read_text()}")
        try:
            psycopg.connect(host=str(socket_dir), user="postgres", dbname="postgres").close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL not ready after {timeout:g} s:\n"
                                   f"{log.read_text()}") from None
            time.sleep(0.1)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGQUIT)  # immediate shutdown: nothing in it is kept
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def throwaway_server() -> Iterator[Server]:
    """Start a PostgreSQL server in a temporary folder; stop it and remove the folder after."""
    bin_dir, user = binaries(), _server_user()
    folder = Path(tempfile.mkdtemp(prefix="pg-"))
    try:
        if user:
            os.chown(folder, *user)
        data, log = folder / "data", folder / "server.log"
        _initdb(bin_dir, data, user)
        options = [f"--{key.replace('_', '-')}={value}" for key, value in SETTINGS.items()]
        with log.open("wb") as output:
            process = _run([str(bin_dir / "postgres"), "-D", str(data), "-k", str(folder),
                            *options], user, stdout=output, stderr=subprocess.STDOUT)
        try:
            _wait_until_ready(process, folder, log)
            yield Server(folder)
        finally:
            _stop(process)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
