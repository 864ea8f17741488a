"""A throw-away PostgreSQL for the tests, and migrated databases on both engines.

One cluster per test session, started from Debian's PostgreSQL binaries in a temporary
directory on a free loopback port (as the ``postgres`` system user when we are root),
probed until it accepts connections, and stopped by the pid we started. A missing
PostgreSQL fails the tests that need it; it is never skipped.

Fixtures: ``postgres_cluster`` (session), ``database_url`` (a migrated database with no rows,
parametrised over ``sqlite`` and ``postgres``). Import them into a test module, or list
this module in ``pytest_plugins``.
"""

from __future__ import annotations

import asyncio
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from server.db.migrate import upgrade
from server.db.models import Base
from tests.support.processes import POLL_INTERVAL_S, free_port, scaled

START_TIMEOUT_S = scaled(30.0)
STOP_TIMEOUT_S = scaled(15.0)
TEST_DB = "relaydesk_test"
INITDB_ARGS = ("-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-sync")
# Durability is worthless for a throw-away cluster; speed is not.
SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


class PostgresUnavailable(RuntimeError):
    """PostgreSQL could not be found or started; the message says what to install or fix."""


def find_bindir() -> Path:
    """The newest ``/usr/lib/postgresql/<version>/bin`` with initdb and postgres."""
    override = os.environ.get("RELAYDESK_PG_BINDIR")
    candidates = [override] if override else glob.glob("/usr/lib/postgresql/*/bin")
    usable = [Path(c) for c in candidates if (Path(c) / "initdb").exists()]
    if not usable:
        raise PostgresUnavailable(
            "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin; "
            "install them with `apt-get install postgresql` or set RELAYDESK_PG_BINDIR"
        )
    return max(usable, key=lambda p: _version_key(p.parent.name))


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


@dataclass
class PostgresCluster:
    """One private PostgreSQL server process and the databases made on it."""

    bindir: Path
    root: Path
    port: int
    run_as: str | None
    process: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    def url(self, database: str, driver: str = "postgresql+asyncpg") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        self._run("initdb", "-D", str(self.data_dir), *INITDB_ARGS)
        self.launch()

    def launch(self) -> None:
        """Start the server on the existing data directory (again, after :meth:`stop`)."""
        argv = [str(self.bindir / "postgres"), "-D", str(self.data_dir), "-p", str(self.port)]
        settings = {**SERVER_SETTINGS, "unix_socket_directories": str(self.root)}
        for name, value in settings.items():
            argv += ["-c", f"{name}={value}"]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                user=self.run_as,
                process_group=0,
            )
        self._wait_ready()

    def stop(self) -> None:
        """Fast shutdown of exactly the server we started."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)  # PostgreSQL's "fast" shutdown
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)

    def create_database(self, name: str) -> str:
        """Create an empty database; returns its asyncpg URL."""
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def empty_tables(self, database: str) -> None:
        """Delete every row the models define (faster than a new database per test)."""
        tables = ", ".join(f'"{name}"' for name in Base.metadata.tables)
        self.psql(f"TRUNCATE {tables} RESTART IDENTITY CASCADE", database)

    def psql(self, sql: str, database: str = "postgres") -> str:
        address = ["-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", database]
        return self._run(
            "psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", *address, "-c", sql
        )

    def _run(self, tool: str, *args: str) -> str:
        result = subprocess.run(
            [str(self.bindir / tool), *args],
            capture_output=True,
            user=self.run_as,
            timeout=START_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            raise PostgresUnavailable(
                f"{tool} failed ({result.returncode}): {result.stderr.decode(errors='replace')}"
            )
        return result.stdout.decode()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._accepts_connections():
            if self.process is None or self.process.poll() is not None:
                raise PostgresUnavailable(f"postgres exited early:\n{self._log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise PostgresUnavailable(f"postgres not ready in time:\n{self._log_tail()}")
            time.sleep(POLL_INTERVAL_S)  # interval between probes, not a readiness guess

    def _accepts_connections(self) -> bool:
        probe = subprocess.run(
            [str(self.bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
            check=False,
            timeout=STOP_TIMEOUT_S,
        )
        return probe.returncode == 0

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"


def _service_user() -> str | None:
    """Run PostgreSQL as ``postgres`` when we are root (it refuses to run as root)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as err:
        raise PostgresUnavailable(
            "running as root but there is no 'postgres' system user to run PostgreSQL as"
        ) from err
    return "postgres"


def start_cluster() -> PostgresCluster:
    """Initialise and start a fresh cluster with one migrated database for the tests."""
    run_as = _service_user()
    root = Path(tempfile.mkdtemp(prefix="relaydesk-pg-"))
    if run_as:
        shutil.chown(root, user=run_as, group=run_as)
    cluster = PostgresCluster(find_bindir(), root, free_port(), run_as)
    try:
        cluster.start()
        asyncio.run(upgrade(cluster.create_database(TEST_DB)))
    except BaseException:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
        raise
    return cluster


# Shared by every module that imports the fixture, so a session starts one cluster.
_shared: list[PostgresCluster] = []


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """The session's throw-away PostgreSQL (started on first use)."""
    if not _shared:
        _shared.append(start_cluster())
    yield _shared[0]
    if _shared:
        cluster = _shared.pop()
        cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file that tests copy instead of migrating each time."""
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    asyncio.run(upgrade(f"sqlite+aiosqlite:///{path}"))
    return path


def _sqlite_copy(template: Path, directory: Path) -> str:
    target = directory / "relaydesk.db"
    shutil.copyfile(template, target)
    return f"sqlite+aiosqlite:///{target}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated database with no rows, on each engine (tests do not run in parallel)."""
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        return _sqlite_copy(template, tmp_path)
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    cluster.empty_tables(TEST_DB)
    return cluster.url(TEST_DB)
