"""One server per SQLite database: an exclusive lock beside the database file.

A second ``relaydesk server`` (or ``relaydesk up``) on the same SQLite database would mark the
running server's desktops ``unknown`` and rotate what it relies on; it must refuse before it
touches anything. PostgreSQL serves several replicas at once, so it is never locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Final

from server.db.engine import is_sqlite, normalize_url
from server.db.errors import DatabaseInUse

LOCK_SUFFIX: Final = ".server-lock"


def sqlite_path(database_url: str) -> Path | None:
    """The file of a file-backed SQLite database, else None (PostgreSQL, in-memory)."""
    url = normalize_url(database_url)
    if not is_sqlite(url) or not url.database or url.database == ":memory:":
        return None
    return Path(url.database).expanduser().resolve()


class ServerLock:
    """Held for the life of the server process; released when it exits, however it exits."""

    def __init__(self, database: Path) -> None:
        self.database = database
        self.path = database.with_name(database.name + LOCK_SUFFIX)
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`DatabaseInUse` (never waits)."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip()
            os.close(fd)
            raise DatabaseInUse(self.database, holder) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)

    def check_free(self) -> None:
        """Raise :class:`DatabaseInUse` if a server holds the lock now (takes nothing)."""
        self.acquire()
        self.release()


def lock_for(database_url: str) -> ServerLock | None:
    """The lock a server on ``database_url`` must hold (None: no lock needed)."""
    database = sqlite_path(database_url)
    return ServerLock(database) if database is not None else None
