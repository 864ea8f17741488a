"""Alembic environment for relaydesk (SQLite via aiosqlite, PostgreSQL via asyncpg).

``server.db.migrate`` runs it with a shared connection in ``config.attributes``; the
``alembic`` command line runs it with ``-x url=…`` or ``RELAYDESK_DATABASE_URL``.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy import Connection

from server.db.engine import create_engine
from server.db.models import Base

config = context.config
target_metadata = Base.metadata


def _database_url() -> str:
    url = config.attributes.get("database_url") or context.get_x_argument(as_dictionary=True).get(
        "url"
    )
    return str(url or os.environ.get("RELAYDESK_DATABASE_URL", ""))


def _run_on(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_online() -> None:
    engine = create_engine(_database_url())
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_on)
            await connection.commit()
    finally:
        await engine.dispose()


def _run_offline() -> None:
    context.configure(url=_database_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    _run_offline()
elif (shared := config.attributes.get("connection")) is not None:
    _run_on(shared)
else:
    asyncio.run(_run_online())
