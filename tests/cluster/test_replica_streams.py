"""Three replicas behind HAProxy, seen by subscribers and members: an event stream opened on any
replica carries what happened through any other, a stream resumed on another replica replays
what it missed, and a read-only member is refused input on every replica alike."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from server import admin
from server.db.store import Store
from tests.cluster.test_replicas import Cluster, cluster, postgres_cluster, redis_server, redis_url
from tests.support.processes import scaled
from tests.support.sse import SseEvent, SseStream, open_sse

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.asyncio(loop_scope="module"),
]

__all__ = ["cluster", "postgres_cluster", "redis_server", "redis_url"]

INVENTORY = "desktop_inventory_changed"


def _events_url(cluster: Cluster, base: str) -> str:
    return f"{base}/api/v1/events?conversation_id={cluster.seed.conversation_id}"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _change_of(stream: SseStream, session: str, state: str) -> SseEvent:
    """The first inventory event that reports ``session`` in ``state``."""
    while True:
        event = await stream.next(timeout=30)
        if event.event != INVENTORY:
            continue
        changed = event.data.get("changed") or []
        if any(c.get("desktop_session_id") == session and c.get("state") == state for c in changed):
            return event


@contextlib.asynccontextmanager
async def _streams(cluster: Cluster, client: httpx.AsyncClient) -> AsyncIterator[list[SseStream]]:
    """One event stream on each replica, each past its opening snapshot."""
    async with contextlib.AsyncExitStack() as stack:
        streams = []
        for server in cluster.replicas.values():
            url, headers = _events_url(cluster, server.url), _auth(cluster.seed.api_token)
            stream = await stack.enter_async_context(open_sse(client, url, headers))
            assert stream.response.status_code == 200
            snapshot = await stream.next(timeout=30)
            assert (snapshot.event, snapshot.id) == (INVENTORY, None)
            streams.append(stream)
        yield streams


async def _start(cluster: Cluster, base: str, slot: str) -> str:
    status, body = await cluster.call(
        base, "desktop_start", relay="relay-1", slot=slot, geometry="800x600", profile="minimal"
    )
    assert status == 200, body
    return str(body["desktop"]["desktop_session_id"])


async def _stop(cluster: Cluster, base: str, slot: str, session: str) -> None:
    status, body = await cluster.call(
        base,
        "desktop_stop_confirm",
        relay="relay-1",
        kind="virtual",
        slot=slot,
        desktop_session_id=session,
    )
    assert status == 200 and body["stopped"] is True, body


async def test_a_stream_on_every_replica_carries_a_start_made_through_another(
    cluster: Cluster,
) -> None:
    owner = await cluster.owner()
    non_owner = next(s.url for port, s in cluster.replicas.items() if port != owner)
    async with httpx.AsyncClient(timeout=scaled(30)) as client, _streams(cluster, client) as live:
        session = await _start(cluster, non_owner, "streams")
        running = [await _change_of(stream, session, "running") for stream in live]
        # one event, the same id everywhere: the streams read one shared history
        assert len({event.id for event in running}) == 1 and running[0].id
        await _stop(cluster, cluster.balancer, "streams", session)
        stopped = [await _change_of(stream, session, "stopped") for stream in live]
        assert len({event.id for event in stopped}) == 1


async def test_a_stream_resumed_on_another_replica_replays_what_it_missed(
    cluster: Cluster,
) -> None:
    first, second = list(cluster.replicas.values())[:2]
    headers = _auth(cluster.seed.api_token)
    async with httpx.AsyncClient(timeout=scaled(30)) as client:
        async with open_sse(client, _events_url(cluster, first.url), headers) as stream:
            await stream.next(timeout=30)  # the snapshot
            session = await _start(cluster, cluster.balancer, "resume")
            seen = await _change_of(stream, session, "running")
        # while nobody listens: the desktop stops
        await _stop(cluster, cluster.balancer, "resume", session)
        resumed_headers = {**headers, "Last-Event-ID": str(seen.id)}
        async with open_sse(client, _events_url(cluster, second.url), resumed_headers) as again:
            assert again.response.status_code == 200
            missed = await _change_of(again, session, "stopped")
    assert missed.id is not None and _order(missed.id) > _order(str(seen.id))


def _order(event_id: str) -> tuple[int, int]:
    ms, seq = event_id.split("-")
    return int(ms), int(seq)


async def _reader(cluster: Cluster) -> tuple[str, str]:
    """A member with the read role in a conversation the relay is shared with: its token and
    that conversation's id."""
    store = await Store.open(cluster.seed.database_url)
    try:
        await admin.create_user(store, "reader")
        token = await admin.create_token(store, "reader")
        conversation = await admin.create_conversation(
            store, "Watchers", ["alice:owner", "reader:read"]
        )
        await admin.share_relay(store, "relay-1", conversation["conversation_id"])
    finally:
        await store.close()
    return str(token["token"]), str(conversation["conversation_id"])


async def _as(base: str, token: str, name: str, **args: Any) -> tuple[int, Any]:
    async with httpx.AsyncClient(base_url=base, timeout=scaled(30)) as client:
        response = await client.post(f"/api/v1/actions/{name}", json=args, headers=_auth(token))
    return response.status_code, response.json()


async def test_a_read_member_sees_but_is_refused_input_on_every_replica(cluster: Cluster) -> None:
    token, conversation = await _reader(cluster)
    for server in cluster.replicas.values():
        status, listed = await _as(
            server.url, token, "desktop_list_active", conversation_id=conversation
        )
        assert (status, listed["ok"]) == (200, True), (server.url, listed)
        for name, args in (
            ("desktop_start", {"relay": "relay-1", "slot": "reader"}),
            ("screen", {"relay": "relay-1", "action": "screenshot"}),
        ):
            status, body = await _as(server.url, token, name, conversation_id=conversation, **args)
            assert (status, body["error"]["code"]) == (403, "forbidden"), (server.url, name, body)
            assert "needs role write" in body["error"]["message"]
    # nothing was started for the reader anywhere
    status, listed = await cluster.call(cluster.balancer, "desktop_list_active")
    assert status == 200
    assert all(row["slot"] != "reader" for row in listed["desktops"])
