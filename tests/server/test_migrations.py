"""Alembic on both engines: upgrades are repeatable and match the models exactly."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, inspect, text

from server.db.engine import create_engine
from server.db.errors import AlreadyExists, SchemaMismatch, StoreUnavailable
from server.db.migrate import alembic_config, current_revision, head_revision, upgrade
from server.db.models import Base
from server.db.store import Store
from tests.support import postgres
from tests.support.postgres import PostgresCluster
from tests.support.processes import free_port

pytestmark = pytest.mark.integration

# Fixtures shared with the other server suites.
postgres_cluster = postgres.postgres_cluster


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database with no tables at all."""
    if request.param == "sqlite":
        # A directory that does not exist yet: upgrade must create it.
        return f"sqlite+aiosqlite:///{tmp_path / 'new' / 'dir' / 'relaydesk.db'}"
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    return cluster.create_database(f"m_{uuid.uuid4().hex[:16]}")


def _diff(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, Base.metadata))


def _tables(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names())


async def _inspect(url: str) -> tuple[set[str], list[Any]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(_tables), await conn.run_sync(_diff)
    finally:
        await engine.dispose()


async def test_upgrade_twice_matches_models(empty_database_url: str) -> None:
    assert await current_revision(empty_database_url) is None
    await upgrade(empty_database_url)
    await upgrade(empty_database_url)  # already at head: a no-op
    assert await current_revision(empty_database_url) == head_revision() == "0004"
    tables, diff = await _inspect(empty_database_url)
    assert tables == set(Base.metadata.tables) | {"alembic_version"}
    assert diff == []


async def test_store_works_after_upgrade(empty_database_url: str) -> None:
    await upgrade(empty_database_url)
    store = await Store.open(empty_database_url)
    try:
        assert await store.ping()
        assert await store.list_users() == []
    finally:
        await store.close()


async def test_upgrade_accepts_plain_driver_names(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    await upgrade(url)
    assert await current_revision(url) == head_revision()


async def test_open_refuses_an_unmigrated_database(empty_database_url: str) -> None:
    with pytest.raises(SchemaMismatch, match="relaydesk db upgrade") as caught:
        await Store.open(empty_database_url)
    assert caught.value.current is None
    assert caught.value.expected == head_revision()


async def test_open_unreachable_database_fails_clearly() -> None:
    with pytest.raises(StoreUnavailable):
        await Store.open(f"postgresql+asyncpg://nobody@127.0.0.1:{free_port()}/none")


def test_downgrade_and_upgrade_through_alembic_commands(tmp_path: Path) -> None:
    # Outside an event loop, env.py runs its own: the path an operator's script takes.
    url = f"sqlite+aiosqlite:///{tmp_path / 'cmd.db'}"
    command.upgrade(alembic_config(url), "head")
    command.downgrade(alembic_config(url), "base")
    assert asyncio.run(_inspect(url))[0] == {"alembic_version"}
    command.upgrade(alembic_config(url), "head")
    assert asyncio.run(_inspect(url))[1] == []


# -- 0002: users.disabled_at, relays.co_located ---------------------------------------------

_SEED_0001 = (
    "INSERT INTO users (id, username, password_hash, is_admin, created_at) "
    "VALUES ('u1', 'alice', 'x', false, '2026-01-01 00:00:00')",
    "INSERT INTO relays (id, name, owner_id, token_hash, connected, capabilities, created_at) "
    "VALUES ('r1', 'lab', 'u1', 'h', false, '[]', '2026-01-01 00:00:00')",
)


async def _execute(url: str, *statements: str) -> list[Any]:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            results = [await conn.execute(text(sql)) for sql in statements]
            return [row for result in results if result.returns_rows for row in result.all()]
    finally:
        await engine.dispose()


async def test_0002_upgrades_a_database_with_data_and_downgrades_again(
    empty_database_url: str,
) -> None:
    url = empty_database_url
    await upgrade(url, "0001")
    await _execute(url, *_SEED_0001)
    await upgrade(url)
    store = await Store.open(url)
    try:
        [user] = await store.list_users()
        [relay] = await store.list_relays()
        assert (user.username, user.disabled_at) == ("alice", None)
        assert (relay.name, relay.co_located) == ("lab", False)
        await store.disable_user(user.user_id)
        await store.set_relay_co_located(relay.relay_id, True)
    finally:
        await store.close()
    await asyncio.to_thread(command.downgrade, alembic_config(url), "0001")
    assert await current_revision(url) == "0001"
    rows = await _execute(url, "SELECT username FROM users", "SELECT name FROM relays")
    assert [tuple(row) for row in rows] == [("alice",), ("lab",)]


# -- 0003: api_tokens.expires_at, read_only, conversation_id ----------------------------------

_SEED_0002_TOKEN = (
    "INSERT INTO api_tokens (id, user_id, name, token_hash, created_at) "
    "VALUES ('t1', 'u1', 'old', 'h1', '2026-01-01 00:00:00')"
)


async def test_0003_keeps_old_tokens_unscoped_and_downgrades_again(
    empty_database_url: str,
) -> None:
    url = empty_database_url
    await upgrade(url, "0002")
    await _execute(url, *_SEED_0001, _SEED_0002_TOKEN)
    await upgrade(url)
    store = await Store.open(url)
    try:
        [old] = await store.list_api_tokens()
        assert (old.name, old.expires_at, old.read_only, old.conversation_id) == (
            "old",
            None,
            False,
            None,
        )
        [user] = await store.list_users()
        _token, scoped = await store.create_api_token(
            user.user_id, "scoped", read_only=True, conversation_id="c" * 32
        )
        assert (scoped.read_only, scoped.conversation_id) == (True, "c" * 32)
    finally:
        await store.close()
    await asyncio.to_thread(command.downgrade, alembic_config(url), "0002")
    assert await current_revision(url) == "0002"
    rows = await _execute(url, "SELECT name FROM api_tokens ORDER BY name")
    assert [tuple(row) for row in rows] == [("old",), ("scoped",)]


# -- 0004: desktop_snapshots ------------------------------------------------------------------


async def test_0004_keeps_snapshots_per_conversation_and_downgrades_again(
    empty_database_url: str,
) -> None:
    url = empty_database_url
    await upgrade(url)
    store = await Store.open(url)
    try:
        user = await store.create_user("owner", "a long enough password")
        relay, _token = await store.add_relay("relay-1", user.user_id)
        mine = await store.create_conversation("mine", [(user.user_id, "owner")])
        other = await store.create_conversation("other", [(user.user_id, "owner")])
        meta = {"profile": "standard", "geometry": "1280x800", "depth": 24, "apps": ["xterm"]}
        saved = await store.add_snapshot(
            snapshot_id="a" * 32,
            conversation_id=mine.conversation_id,
            name="base",
            relay_id=relay.relay_id,
            meta={**meta, "windows": [{"app": "xterm", "x": 1, "y": 2, "width": 3, "height": 4}]},
            created_by="owner",
        )
        assert (saved.name, saved.apps, saved.size_bytes) == ("base", ("xterm",), 0)
        with pytest.raises(AlreadyExists):
            await store.add_snapshot(
                snapshot_id="b" * 32,
                conversation_id=mine.conversation_id,
                name="base",
                relay_id=relay.relay_id,
                meta=meta,
                created_by="owner",
            )
        assert await store.snapshot_named(other.conversation_id, "base") is None
        assert [s.name for s in await store.snapshots_of(mine.conversation_id)] == ["base"]
        assert await store.snapshots_of(other.conversation_id) == []
        assert await store.delete_snapshot(other.conversation_id, "base") is False
        assert await store.delete_snapshot(mine.conversation_id, "base") is True
        assert await store.snapshots_of(mine.conversation_id) == []
    finally:
        await store.close()
    await asyncio.to_thread(command.downgrade, alembic_config(url), "0003")
    assert await current_revision(url) == "0003"
