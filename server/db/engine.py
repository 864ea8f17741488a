"""Database URLs and async engines for SQLite (aiosqlite) and PostgreSQL (asyncpg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import URL, event, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

_ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}


def normalize_url(database_url: str) -> URL:
    """Parse ``database_url`` and pick the async driver for a bare ``sqlite``/``postgresql``."""
    url = make_url(database_url)
    driver = _ASYNC_DRIVERS.get(url.drivername)
    return url.set(drivername=driver) if driver else url


def is_sqlite(url: URL) -> bool:
    return url.get_backend_name() == "sqlite"


def ensure_sqlite_parent(url: URL) -> None:
    """Create the directory that will hold a file-backed SQLite database."""
    if is_sqlite(url) and url.database and url.database != ":memory:":
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def create_engine(database_url: str) -> AsyncEngine:
    """An async engine; SQLite gets foreign keys, WAL and a busy timeout on every connection."""
    url = normalize_url(database_url)
    if not is_sqlite(url):
        return create_async_engine(url, pool_pre_ping=True)
    ensure_sqlite_parent(url)
    # One connection: SQLite takes one writer at a time anyway, and queueing in the pool is
    # cheaper and fairer than connections spinning on "database is locked".
    engine = create_async_engine(url, pool_size=1, max_overflow=0, pool_timeout=60)
    event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA journal_mode=WAL")
    # With WAL, NORMAL keeps the database consistent and skips an fsync per commit.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
