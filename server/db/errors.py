"""Errors the ``Store`` raises; database driver errors never leave ``server.db``.

Tree (under ``wire.errors.RelaydeskError``)::

    StoreError          a store operation could not be carried out
    ├── NotFound        the named user, conversation or relay does not exist
    ├── AlreadyExists   a unique name (username, relay name) is taken
    ├── InvalidValue    a value breaks the data model's rules (bad role, empty password)
    ├── StoreUnavailable  the database cannot be reached
    ├── DatabaseInUse   another server holds the SQLite database (``server.db.lock``)
    └── SchemaMismatch  the schema is not at the revision this code needs
"""

from __future__ import annotations

from pathlib import Path

from wire.errors import ErrorCode, RelaydeskError


class StoreError(RelaydeskError):
    """A store operation could not be carried out."""


class NotFound(StoreError):
    """The named entity does not exist."""

    code = ErrorCode.NOT_FOUND

    def __init__(self, entity: str, key: str) -> None:
        self.entity = entity
        self.key = key
        super().__init__(f"{entity} {key!r} not found")


class AlreadyExists(StoreError):
    """A unique name is already taken."""

    code = ErrorCode.INVALID_ARGS

    def __init__(self, entity: str, name: str) -> None:
        self.entity = entity
        self.name = name
        super().__init__(f"{entity} {name!r} already exists")


class InvalidValue(StoreError):
    """A value breaks a rule of the data model."""

    code = ErrorCode.INVALID_ARGS

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        super().__init__(f"{field}: {problem}")


class StoreUnavailable(StoreError):
    """The database cannot be reached."""

    code = ErrorCode.UNAVAILABLE

    def default_message(self) -> str:
        return "database is not reachable"


class SchemaMismatch(StoreError):
    """The database schema is not at the revision this version of relaydesk needs."""

    code = ErrorCode.UNAVAILABLE

    def __init__(self, current: str | None, expected: str | None) -> None:
        self.current = current
        self.expected = expected
        super().__init__(
            f"database schema is at revision {current or 'none'}, expected {expected}; "
            "run `relaydesk db upgrade`"
        )


class DatabaseInUse(StoreError):
    """Another relaydesk server holds the SQLite database."""

    code = ErrorCode.UNAVAILABLE

    def __init__(self, database: Path, holder: str) -> None:
        self.database = database
        who = f"pid {holder}" if holder else "another process"
        super().__init__(
            f"another relaydesk server ({who}) is already running on {database}; "
            "stop it first, or give this one its own RELAYDESK_DATA_DIR"
        )
