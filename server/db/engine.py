"""Database URLs and async engines for SQLite (aiosqlite) and PostgreSQL (asyncpg)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any, Final

from sqlalchemy import URL, event, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from server.instruments import database_error

PRIVATE_DIR_MODE: Final = 0o700
PRIVATE_FILE_MODE: Final = 0o600
_ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}


def normalize_url(database_url: str) -> URL:
    """Parse ``database_url`` and pick the async driver for a bare ``sqlite``/``postgresql``."""
    url = make_url(database_url)
    driver = _ASYNC_DRIVERS.get(url.drivername)
    return url.set(drivername=driver) if driver else url


def is_sqlite(url: URL) -> bool:
    return url.get_backend_name() == "sqlite"


def ensure_sqlite_parent(url: URL) -> None:
    """Create the directory of a file-backed SQLite database: 0700, the database and its WAL
    files 0600 (a database of an earlier run is tightened too)."""
    if not (is_sqlite(url) and url.database and url.database != ":memory:"):
        return
    database = Path(url.database).expanduser()
    database.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    _chmod_if_open(database.parent, PRIVATE_DIR_MODE)
    for suffix in ("", "-wal", "-shm", "-journal"):
        _chmod_if_open(database.with_name(database.name + suffix), PRIVATE_FILE_MODE)
    if not database.exists():
        # SQLite creates the file with the process umask: create it private first.
        os.close(os.open(database, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE))


def _chmod_if_open(path: Path, mode: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        if stat.S_IMODE(path.stat().st_mode) & ~mode:
            path.chmod(mode)


def create_engine(database_url: str) -> AsyncEngine:
    """An async engine; SQLite gets foreign keys, WAL and a busy timeout on every connection."""
    url = normalize_url(database_url)
    if not is_sqlite(url):
        engine = create_async_engine(url, pool_pre_ping=True)
    else:
        ensure_sqlite_parent(url)
        # One connection: SQLite takes one writer at a time anyway, and queueing in the pool
        # is cheaper and fairer than connections spinning on "database is locked".
        engine = create_async_engine(url, pool_size=1, max_overflow=0, pool_timeout=60)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    event.listen(engine.sync_engine, "handle_error", database_error)  # /metrics counts them
    return engine


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA journal_mode=WAL")
    # With WAL, NORMAL keeps the database consistent and skips an fsync per commit.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
