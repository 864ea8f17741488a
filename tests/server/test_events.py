"""The event stream on both buses: delivery, replay, visibility, pings, chat messages.

A real server runs in-process (uvicorn); inventory changes are fed through the inventory's
authoritative entry points (a relay's start result, its disconnect), as a relay would.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import pytest_asyncio

from server import admin
from server.db.store import Store
from server.events.bus import BusEvent, Feed, create_event_bus, parse_event_id, replay_after
from tests.support.redis import redis_server, redis_url  # noqa: F401 (fixtures)
from tests.support.sse import SseStream, open_sse
from tests.support.stack import Seed, inprocess_server, seed_database, wait_until
from wire.ids import RelayId

pytestmark = pytest.mark.unit

BUSES = ["memory", pytest.param("redis", marks=pytest.mark.redis)]


def _row(session: str, slot: str = "main") -> dict[str, Any]:
    return {
        "desktop_session_id": session,
        "kind": "virtual",
        "slot": slot,
        "started_at": "2026-01-01T00:00:00Z",
        "display": ":1",
    }


async def _other_conversation(seed: Seed) -> tuple[str, str]:
    """A second conversation (no relay shared) with its own member; returns (id, token)."""
    store = await Store.open(seed.database_url)
    try:
        user = await admin.create_user(store, "outsider")
        token = (await admin.create_token(store, "outsider"))["token"]
        conv = await admin.create_conversation(store, "Other", ["outsider:owner", "alice:read"])
        del user
        return conv["conversation_id"], token
    finally:
        await store.close()


@pytest_asyncio.fixture(params=BUSES)
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""
    seed = await seed_database(tmp_path / "data")
    other = await _other_conversation(seed)
    async with (
        inprocess_server(
            seed, redis_url=url, cluster_secret="test-cluster-secret" if url else ""
        ) as (app, base),
        httpx.AsyncClient(base_url=base, timeout=10) as client,
    ):
        yield app, client, seed, other


def _url(conversation_id: str) -> str:
    return f"/api/v1/events?conversation_id={conversation_id}"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _changes(stream: SseStream, count: int) -> list[Any]:
    return [await stream.next(timeout=5) for _ in range(count)]


async def test_the_stream_reads_the_installed_services_only(server: Any) -> None:
    app, client, seed, _ = server
    assert not hasattr(app.state, "store") and not hasattr(app.state, "events")
    async with open_sse(client, _url(seed.conversation_id), _auth(seed.api_token)) as sse:
        assert (await sse.next()).event == "desktop_inventory_changed"


async def test_a_change_reaches_a_subscriber_within_a_second(server: Any) -> None:
    app, client, seed, _ = server
    relay = RelayId(seed.relay["relay_id"])
    async with open_sse(client, _url(seed.conversation_id), _auth(seed.api_token)) as sse:
        snapshot = await sse.next()
        assert (snapshot.event, snapshot.id, snapshot.data["desktops"]) == (
            "desktop_inventory_changed",
            None,
            [],
        )
        began = time.monotonic()
        await app.state.parts.inventory.record_started(relay, _row("a" * 32))
        event = await sse.next(timeout=1.0)
        assert time.monotonic() - began < 1.0
        assert event.event == "desktop_inventory_changed" and event.id
        assert [r["desktop_session_id"] for r in event.data["desktops"]] == ["a" * 32]
        assert event.data["changed"][0]["state"] == "running"


async def test_reconnect_with_last_event_id_gets_exactly_the_missed_events(server: Any) -> None:
    app, client, seed, _ = server
    relay = RelayId(seed.relay["relay_id"])
    async with open_sse(client, _url(seed.conversation_id), _auth(seed.api_token)) as sse:
        await sse.next()  # snapshot
        await app.state.parts.inventory.record_started(relay, _row("b" * 32))
        seen = await sse.next()
    await wait_until(lambda: app.state.parts.bus.fanout.count() == 0, 5, "the feed to be released")
    missed_ids = []
    for n, slot in enumerate(("s1", "s2", "s3")):
        await app.state.parts.inventory.record_started(relay, _row(str(n) * 32, slot))
        await app.state.parts.events.settled()  # one event per change, not a coalesced one
    await app.state.parts.events.publish_conversation(
        seed.conversation_id, "message_created", {"text": "hi"}
    )
    assert seen.id is not None
    headers = {**_auth(seed.api_token), "Last-Event-ID": seen.id}
    async with open_sse(client, _url(seed.conversation_id), headers) as sse:
        replayed = await _changes(sse, 4)
        missed_ids = [e.id for e in replayed]
        await app.state.parts.inventory.record_ended(relay, "b" * 32, "stopped", "test")
        live = await sse.next()
        assert sse.pending() == []
    assert [e.event for e in replayed] == ["desktop_inventory_changed"] * 3 + ["message_created"]
    assert [len(e.data["desktops"]) for e in replayed[:3]] == [2, 3, 4]
    assert replayed[3].data == {"text": "hi"}
    keys = [parse_event_id(i) or (0, 0) for i in missed_ids]
    assert sorted(keys) == keys and seen.id not in missed_ids
    assert live.data["changed"][0]["desktop_session_id"] == "b" * 32


async def test_subscribers_see_only_their_conversation(server: Any) -> None:
    app, client, seed, (other_id, other_token) = server
    relay = RelayId(seed.relay["relay_id"])
    async with (
        open_sse(client, _url(other_id), _auth(other_token)) as outsider,
        open_sse(client, _url(seed.conversation_id), _auth(seed.api_token)) as member,
    ):
        await outsider.next()
        await member.next()
        await app.state.parts.inventory.record_started(relay, _row("c" * 32))
        await member.next()
        await app.state.parts.events.publish_conversation(
            other_id, "message_created", {"text": "x"}
        )
        only = await outsider.next()
        assert only.event == "message_created", "the relay is not shared with 'Other'"


async def test_stream_refuses_missing_conversation_non_members_and_strangers(server: Any) -> None:
    _, client, seed, (_, other_token) = server
    response = await client.get("/api/v1/events", headers=_auth(seed.api_token))
    assert (response.status_code, response.json()["error"]["field"]) == (400, "conversation_id")
    response = await client.get(_url(seed.conversation_id), headers=_auth(other_token))
    assert (response.status_code, response.json()["error"]["code"]) == (403, "forbidden")
    response = await client.get(_url(seed.conversation_id))
    assert response.status_code == 401


async def test_pings_keep_the_stream_alive_and_disconnects_are_cleaned_up(server: Any) -> None:
    app, client, seed, _ = server
    app.state.parts.events.ping_s = 0.2
    async with open_sse(client, _url(seed.conversation_id), _auth(seed.api_token)) as sse:
        await sse.next()
        await wait_until(lambda: len(sse.comments) >= 2, 3, "two keep-alive pings")
        assert app.state.parts.bus.fanout.count() == 1
    await wait_until(lambda: app.state.parts.bus.fanout.count() == 0, 5, "the feed to be released")


async def test_a_relay_disconnect_publishes_unknown_rows(server: Any) -> None:
    app, client, seed, _ = server
    relay = RelayId(seed.relay["relay_id"])
    await app.state.parts.inventory.record_started(relay, _row("d" * 32))
    async with open_sse(client, _url(seed.conversation_id), _auth(seed.api_token)) as sse:
        await sse.next()
        await app.state.parts.inventory.relay_disconnected(relay)
        event = await sse.next(timeout=1.0)
    assert [r["state"] for r in event.data["desktops"]] == ["unknown"]


# -- the bus on its own ------------------------------------------------------------------


@pytest.fixture(params=BUSES)
def bus_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("redis_url")) if request.param == "redis" else ""


async def test_bus_replays_in_order_and_reports_a_gap(bus_url: str) -> None:
    bus = create_event_bus(bus_url, history=5)
    topic = f"t-{time.monotonic_ns()}"
    try:
        # Redis trims approximately (whole nodes of 100), so publish well past the bound
        ids = [await bus.publish(topic, "e", {"n": n}) for n in range(250)]
        feed = await bus.open_feed(topic, ids[247])
        assert ([e.data["n"] for e in feed.replay], feed.complete) == ([248, 249], True)
        await bus.close_feed(feed)
        feed = await bus.open_feed(topic, ids[0])
        assert feed.complete is False and feed.replay == []
        await bus.publish(topic, "e", {"n": 250})
        live = await asyncio.wait_for(feed.next(), 5)
        assert live is not None and live.data == {"n": 250}
        await bus.close_feed(feed)
    finally:
        await bus.close()


def test_a_slow_feed_is_cut_off_instead_of_growing() -> None:
    feed = Feed("t", after=None)
    for n in range(600):
        feed.offer(BusEvent(f"1-{n}", "t", "e", {}))
    assert feed.lagged is True


def test_replay_after_needs_the_last_id_in_history() -> None:
    history = [BusEvent(f"1-{n}", "t", "e", {}) for n in range(3)]
    assert replay_after(history, (1, 1)) == (history[2:], True)
    assert replay_after(history, (0, 9)) == ([], False)
    assert parse_event_id("nope") is None and parse_event_id("12-3") == (12, 3)


async def test_many_feeds_opening_at_once_all_open_and_all_receive(bus_url: str) -> None:
    """More concurrent subscribers than a Redis client has pooled connections by default."""
    bus = create_event_bus(bus_url)
    topic = f"t-{time.monotonic_ns()}"
    try:
        ids = [await bus.publish(topic, "e", {"n": n}) for n in range(5)]
        lasts = [ids[2] if n % 3 == 0 else None for n in range(300)]
        feeds = await asyncio.gather(*(bus.open_feed(topic, last) for last in lasts))
        resumed = [feed for feed, last in zip(feeds, lasts, strict=True) if last]
        assert all([e.data["n"] for e in feed.replay] == [3, 4] for feed in resumed)
        assert all(feed.complete for feed in resumed)
        await bus.publish(topic, "e", {"n": 5})
        live = await asyncio.gather(*(asyncio.wait_for(feed.next(), 5) for feed in feeds))
        assert {event.data["n"] for event in live if event is not None} == {5}
        assert len(live) == 300 and all(event is not None for event in live)
        await asyncio.gather(*(bus.close_feed(feed) for feed in feeds))
        assert cast(Any, bus).fanout.count() == 0
    finally:
        await bus.close()


async def test_many_streams_opening_at_once_all_get_their_snapshot(server: Any) -> None:
    app, shared, seed, _ = server
    # One user holding 150 streams from one address: above the caps this test is not about.
    caps = app.state.parts.streams.limits
    caps.per_principal = caps.per_address = 0
    relay = RelayId(seed.relay["relay_id"])
    url, headers = _url(seed.conversation_id), _auth(seed.api_token)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with (
        httpx.AsyncClient(base_url=shared.base_url, limits=limits) as client,
        contextlib.AsyncExitStack() as streams,
    ):
        opened = await asyncio.gather(
            *(streams.enter_async_context(open_sse(client, url, headers)) for _ in range(150))
        )
        snapshots = await asyncio.gather(*(sse.next() for sse in opened))
        assert {(s.event, s.id) for s in snapshots} == {("desktop_inventory_changed", None)}
        await app.state.parts.inventory.record_started(relay, _row("e" * 32))
        changes = await asyncio.gather(*(sse.next() for sse in opened))
        assert {c.data["changed"][0]["desktop_session_id"] for c in changes} == {"e" * 32}
