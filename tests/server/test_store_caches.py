"""The store's read caches, coalesced writes and queued audit rows (``server/db``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from server import admin
from server.db.audit import AuditRow
from server.db.batch import Coalescer
from server.db.cache import ReadCache
from server.db.rows import DesktopRow
from server.db.store import Store
from server.secrets.passwords import fast_hasher
from tests.support import postgres
from wire.ops import DesktopState

pytestmark = pytest.mark.integration

database_url = postgres.database_url
postgres_cluster = postgres.postgres_cluster
sqlite_template = postgres.sqlite_template


class Ticks:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(database_url, password_hasher=fast_hasher())
    yield opened
    await opened.close()


@pytest.fixture
async def outsider(database_url: str) -> AsyncIterator[Store]:
    """Another process's view of the same database (the admin CLI, another replica)."""
    opened = await Store.open(database_url, password_hasher=fast_hasher())
    yield opened
    await opened.close()


def _row(relay_id: str, session: str, state: DesktopState = "running") -> DesktopRow:
    now = "2026-01-01T00:00:00+00:00"
    return DesktopRow(relay_id, session, "virtual", "main", state, now, "alice", now)


# -- ReadCache -------------------------------------------------------------------------


def test_read_cache_expires_and_is_bounded() -> None:
    ticks = Ticks()
    cache: ReadCache[str, int] = ReadCache(ttl_s=2.0, max_entries=2, clock=ticks)
    for key, value in (("a", 1), ("b", 2), ("c", 3)):
        cache.put(key, value, cache.generation)
    assert cache.get("a") == (False, None)  # evicted: at most two entries
    assert cache.get("c") == (True, 3)
    ticks.now += 2.0
    assert cache.get("c") == (False, None)


def test_a_fill_that_raced_a_write_is_not_kept() -> None:
    cache: ReadCache[str, int] = ReadCache()
    generation = cache.generation
    cache.clear()  # a write committed while the read was running
    cache.put("a", 1, generation)
    assert cache.get("a") == (False, None)


# -- tokens, roles, visibility ------------------------------------------------------------


async def test_revoking_a_token_here_takes_effect_at_once(store: Store) -> None:
    alice = await admin.create_user(store, "alice")
    token, record = await store.create_api_token(alice["user_id"])
    assert await store.authenticate_api_token(token) is not None
    assert await store.authenticate_api_token(token) is not None  # cached
    assert await store.revoke_api_token(record.token_id)
    assert await store.authenticate_api_token(token) is None


async def test_a_revocation_elsewhere_takes_effect_within_the_bound(
    store: Store, outsider: Store
) -> None:
    ticks = Ticks()
    store.token_cache = ReadCache(ttl_s=2.0, clock=ticks)
    alice = await admin.create_user(store, "alice")
    token, record = await store.create_api_token(alice["user_id"])
    assert await store.authenticate_api_token(token) is not None
    assert await outsider.revoke_api_token(record.token_id)
    ticks.now += 1.9
    assert await store.authenticate_api_token(token) is not None  # within the bound
    ticks.now += 0.1
    assert await store.authenticate_api_token(token) is None


async def test_disabling_a_user_elsewhere_takes_effect_within_the_bound(
    store: Store, outsider: Store
) -> None:
    ticks = Ticks()
    store.token_cache = ReadCache(ttl_s=2.0, clock=ticks)
    alice = await admin.create_user(store, "alice")
    token, _ = await store.create_api_token(alice["user_id"])
    assert await store.authenticate_api_token(token) is not None
    assert await outsider.disable_user(alice["user_id"])
    ticks.now += 2.0
    assert await store.authenticate_api_token(token) is None


async def test_relay_token_changes_elsewhere_are_seen_at_once(
    store: Store, outsider: Store
) -> None:
    """``authenticate_relay`` is never cached: the old token fails on the very next check."""
    alice = await admin.create_user(store, "alice")
    relay = await admin.add_relay(store, "lab", alice["user_id"])
    assert await store.authenticate_relay(relay["token"]) is not None
    new_token = await outsider.rotate_relay_token(relay["relay_id"])
    assert await store.authenticate_relay(relay["token"]) is None
    assert await store.authenticate_relay(new_token) is not None
    await outsider.revoke_relay(relay["relay_id"])
    assert await store.authenticate_relay(new_token) is None


async def test_role_changes_here_are_seen_at_once(store: Store) -> None:
    alice = await admin.create_user(store, "alice")
    conv = await admin.create_conversation(store, "Team", ["alice:read"])
    conversation_id = conv["conversation_id"]
    assert await store.get_role(conversation_id, alice["user_id"]) == "read"
    await store.add_member(conversation_id, alice["user_id"], "write")
    assert await store.get_role(conversation_id, alice["user_id"]) == "write"


async def test_role_changes_elsewhere_are_seen_within_the_bound(
    store: Store, outsider: Store
) -> None:
    ticks = Ticks()
    store.role_cache = ReadCache(ttl_s=2.0, clock=ticks)
    alice = await admin.create_user(store, "alice")
    conv = await admin.create_conversation(store, "Team", [])
    conversation_id = conv["conversation_id"]
    assert await store.get_role(conversation_id, alice["user_id"]) is None
    await outsider.add_member(conversation_id, alice["user_id"], "owner")
    assert await store.get_role(conversation_id, alice["user_id"]) is None
    ticks.now += 2.0
    assert await store.get_role(conversation_id, alice["user_id"]) == "owner"


async def test_sharing_here_updates_visibility_and_desktops_at_once(store: Store) -> None:
    await admin.create_user(store, "alice")
    conv = await admin.create_conversation(store, "Team", ["alice:owner"])
    conversation_id = conv["conversation_id"]
    relay = await admin.add_relay(store, "lab", "alice")
    relay_id = relay["relay_id"]
    await store.upsert_desktops([_row(relay_id, "s-1")])
    assert await store.relays_visible_in(conversation_id) == []
    assert not await store.is_relay_visible(relay_id, conversation_id)
    assert await store.visible_desktops(conversation_id) == []
    await store.share_relay(relay_id, conversation_id)
    assert [r.relay_id for r in await store.relays_visible_in(conversation_id)] == [relay_id]
    assert await store.is_relay_visible(relay_id, conversation_id)
    assert [r.desktop_session_id for r in await store.visible_desktops(conversation_id)] == ["s-1"]
    await store.upsert_desktops([_row(relay_id, "s-1", "stopped")])
    assert await store.visible_desktops(conversation_id) == []
    await store.unshare_relay(relay_id, conversation_id)
    assert not await store.is_relay_visible(relay_id, conversation_id)


async def test_a_relays_live_rows_written_here_are_seen_at_once_when_cached(
    store: Store, outsider: Store
) -> None:
    await admin.create_user(store, "alice")
    relay_id = (await admin.add_relay(store, "lab", "alice"))["relay_id"]
    live = ("running", "starting")
    assert await store.cached_desktops_for_relay(relay_id, live) == []
    await store.upsert_desktops([_row(relay_id, "s-1")])
    cached = await store.cached_desktops_for_relay(relay_id, live)
    assert [r.desktop_session_id for r in cached] == ["s-1"]
    await store.upsert_desktops([_row(relay_id, "s-1", "stopped")])
    assert await store.cached_desktops_for_relay(relay_id, live) == []
    # written by another process: the cached answer may lag, the plain read never does
    await outsider.upsert_desktops([_row(relay_id, "s-2")])
    fresh = await store.desktops_for_relay(relay_id, live)
    assert [r.desktop_session_id for r in fresh] == ["s-2"]


# -- coalesced reads and writes -------------------------------------------------------------


async def test_concurrent_calls_share_batches_in_order() -> None:
    batches: list[list[int]] = []

    async def call(items: list[int]) -> list[int]:
        batches.append(items)
        return [item * 10 for item in items]

    coalescer: Coalescer[int, int] = Coalescer(call)
    # Every caller queues before the batch task (created by the first) gets to run.
    assert await asyncio.gather(*(coalescer.submit(n) for n in range(5))) == [0, 10, 20, 30, 40]
    assert await coalescer.submit(7) == 70
    assert batches == [[0, 1, 2, 3, 4], [7]]


async def test_a_failed_batch_fails_each_of_its_callers() -> None:
    async def call(items: list[int]) -> list[int]:
        raise RuntimeError("database gone")

    coalescer: Coalescer[int, int] = Coalescer(call)
    results = await asyncio.gather(coalescer.submit(1), coalescer.submit(2), return_exceptions=True)
    assert [type(r) for r in results] == [RuntimeError, RuntimeError]


async def test_concurrent_presence_and_relay_logins_are_coalesced(store: Store) -> None:
    await admin.create_user(store, "alice")
    relays = [await admin.add_relay(store, f"r{n}", "alice") for n in range(20)]
    found = await asyncio.gather(*(store.authenticate_relay(r["token"]) for r in relays))
    assert [f.relay_id if f else None for f in found] == [r["relay_id"] for r in relays]
    await store.revoke_relay(relays[0]["relay_id"])
    assert await store.authenticate_relay(relays[0]["token"]) is None
    await asyncio.gather(
        *(
            store.set_relay_presence(r["relay_id"], connected=True, relay_version="1")
            for r in relays
        ),
        store.set_relay_presence(relays[1]["relay_id"], connected=False),
    )
    listed = {r.relay_id: r for r in await store.list_relays()}
    assert listed[relays[1]["relay_id"]].connected is False  # the later update wins
    assert all(listed[r["relay_id"]].connected for r in relays[2:])
    assert listed[relays[2]["relay_id"]].relay_version == "1"


# -- queued audit rows ----------------------------------------------------------------------


async def test_queued_audit_rows_are_flushed_on_close_in_order(
    database_url: str, outsider: Store
) -> None:
    store = await Store.open(database_url, password_hasher=fast_hasher())
    for n in range(5):
        await store.queue_audit(AuditRow(op="screen.click", actor="alice", outcome=f"ok-{n}"))
    await store.close()
    rows = await outsider.list_audit()
    assert [row.outcome for row in rows] == [f"ok-{n}" for n in range(5)]


async def test_a_reader_of_this_store_sees_queued_rows(store: Store) -> None:
    await store.queue_audit(
        AuditRow(op="desktop_start", actor="alice", outcome="ok", details={"api_token": "x"})
    )
    rows = await store.list_audit()
    assert [(row.op, row.details) for row in rows] == [
        ("desktop_start", {"api_token": "[redacted]"})
    ]
