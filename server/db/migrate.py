"""Run Alembic programmatically: no ``alembic.ini``, the URL comes from the caller."""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text

import migrations
from server.db.engine import create_engine

# Serialises concurrent upgrades from several server replicas on PostgreSQL.
_PG_MIGRATION_LOCK = 0x52444B4D  # "RDKM"


def alembic_config(database_url: str = "") -> Config:
    """Alembic configuration pointing at the ``migrations`` package."""
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    # Passed as an attribute: a URL may contain '%', which Config options interpolate.
    config.attributes["database_url"] = database_url
    return config


async def upgrade(database_url: str, revision: str = "head") -> None:
    """Upgrade the database to ``revision``; a no-op when it is already there."""
    engine = create_engine(database_url)
    try:
        async with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                await conn.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK}
                )
            await conn.run_sync(_upgrade_on, alembic_config(database_url), revision)
    finally:
        await engine.dispose()


async def current_revision(database_url: str) -> str | None:
    """The revision the database is at, or None for an empty database."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(revision_of)
    finally:
        await engine.dispose()


@functools.cache
def head_revision() -> str | None:
    """The newest revision shipped with this version of relaydesk."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def _upgrade_on(connection: Connection, config: Config, revision: str) -> None:
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


def revision_of(connection: Connection) -> str | None:
    """The revision recorded in the database on ``connection``."""
    return MigrationContext.configure(connection).get_current_revision()


__all__ = ["alembic_config", "current_revision", "head_revision", "revision_of", "upgrade"]
