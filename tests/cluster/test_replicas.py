"""Three server replicas on PostgreSQL and Redis behind HAProxy (round robin, no affinity),
a real relay with real desktops: any replica serves the relay, whichever one holds it, and a
guarded click lands through any replica, whichever one took the screenshot."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import secrets
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx
import httpx2
import mcp_types as types
import numpy as np
import psutil
import pytest
import pytest_asyncio
import redis.asyncio as redis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from server import admin
from server.cluster.caches import shared_caches
from server.cluster.channel import NotOwner
from server.cluster.ownership import OWNERS, Owner, parse_owner
from server.cluster.peers import Peers
from server.cluster.signing import ClusterSigner
from server.db.cache import READ_CACHE_TTL_S
from server.db.migrate import upgrade
from server.db.store import Store
from tests.e2e.viewer_stack import capture, without_cursor
from tests.integration.test_viewer_tunnel import (
    full_frame,
    measure,
    open_viewer,
    stalled_viewer,
    until_closed,
)
from tests.support import postgres
from tests.support import redis as redis_support
from tests.support.haproxy import start_haproxy
from tests.support.processes import ManagedProcess, ProcessTracker, scaled
from tests.support.stack import Seed, ServerProcess, start_relay, start_server, wait_until
from tests.support.xrecorder import XRecorder
from wire.errors import CloseCode, ErrorCode, OpError
from wire.ids import RelayId

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.asyncio(loop_scope="module"),
]

# Scrapes of /metrics send it (docs/operations.md#metrics).
METRICS_TOKEN = secrets.token_urlsafe(24)
SCRAPE = {"Authorization": f"Bearer {METRICS_TOKEN}"}

postgres_cluster = postgres.postgres_cluster
redis_server = redis_support.redis_server
redis_url = redis_support.redis_url


@dataclass
class Cluster:
    seed: Seed
    replicas: dict[str, ServerProcess]
    balancer: str
    relay: ManagedProcess
    redis: redis.Redis
    tracker: ProcessTracker

    @property
    def relay_id(self) -> str:
        return str(self.seed.relay["relay_id"])

    async def owner(self) -> str | None:
        """The port of the replica that holds the relay, per Redis (``None``: nobody)."""
        raw = await self.redis.hget(OWNERS, self.relay_id)
        if raw is None:
            return None
        url = str(json.loads(raw)["url"])
        return url.rsplit(":", 1)[1]

    async def call(self, base: str, name: str, **args: Any) -> tuple[int, Any]:
        args.setdefault("conversation_id", self.seed.conversation_id)
        headers = {"Authorization": f"Bearer {self.seed.api_token}"}
        async with httpx.AsyncClient(base_url=base, timeout=scaled(30)) as client:
            response = await client.post(f"/api/v1/actions/{name}", json=args, headers=headers)
        return response.status_code, response.json()

    async def others(self) -> tuple[str, str]:
        """The two replicas that do not hold the relay (as base URLs)."""
        owner = await self.owner()
        rest = [r.url for port, r in self.replicas.items() if port != owner]
        return rest[0], rest[1]


async def _seed(data_dir: Path, url: str) -> Seed:
    data_dir.mkdir(parents=True, exist_ok=True)
    await upgrade(url)
    store = await Store.open(url)
    try:
        user = await admin.create_user(store, "alice", is_admin=True)
        token = await admin.create_token(store, "alice")
        conversation = await admin.create_conversation(store, "Team", ["alice:owner"])
        relay = await admin.add_relay(store, "relay-1", "alice")
        await admin.share_relay(store, relay["relay_id"], conversation["conversation_id"])
    finally:
        await store.close()
    return Seed(data_dir, url, user, token["token"], conversation["conversation_id"], relay)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_cluster: postgres.PostgresCluster,
    redis_url: str,
) -> AsyncIterator[Cluster]:
    root = tmp_path_factory.mktemp("replicas")
    database = f"replicas_{secrets.token_hex(4)}"
    seed = await _seed(root / "data", postgres_cluster.create_database(database))
    tracker = ProcessTracker(root / "processes")
    env = {
        "RELAYDESK_REDIS_URL": redis_url,
        "RELAYDESK_CLUSTER_SECRET": secrets.token_urlsafe(24),
        "RELAYDESK_CLUSTER_HEARTBEAT_S": "0.5",
        "RELAYDESK_CLUSTER_DEAD_AFTER_S": "2",
        "RELAYDESK_METRICS_TOKEN": METRICS_TOKEN,
    }
    client = redis.Redis.from_url(redis_url)
    await client.delete(OWNERS)
    try:
        replicas = {}
        for _ in range(3):
            server = await start_server(tracker.start, seed, env=env)
            replicas[str(server.port)] = server
        _, port = start_haproxy(tracker.start, root, [r.port for r in replicas.values()])
        balancer = f"http://127.0.0.1:{port}"
        # No apps in the desktops: the screen tests' recorder window covers the whole screen.
        relay = start_relay(
            tracker.start,
            seed,
            balancer,
            extra_args=("--stop-desktops-on-exit",),
            env={"RELAYDESK_DESKTOP_APPS": ",", "DISPLAY": ""},
        )
        stack = Cluster(seed, replicas, balancer, relay, client, tracker)
        await wait_until(stack.owner, 30, "the relay to be owned by a replica")
        yield stack
    except BaseException:
        for process in tracker.processes:
            print(f"----- {process.name}: {process.log_tail(3000)}")
        raise
    finally:
        tracker.cleanup()
        await client.aclose()


async def test_a_relay_held_by_one_replica_is_served_by_the_others(cluster: Cluster) -> None:
    b, c = await cluster.others()
    status, started = await cluster.call(b, "desktop_start", slot="main")
    assert status == 200, started
    session = started["desktop"]["desktop_session_id"]

    for base in (b, c, cluster.balancer, cluster.balancer):
        status, listed = await cluster.call(base, "desktop_list_active", probe=True)
        assert status == 200, listed
        assert session in [row["desktop_session_id"] for row in listed["desktops"]]
        assert listed["probes"] == {"relay-1": "ok"}

    status, stopped = await cluster.call(
        c,
        "desktop_stop_confirm",
        relay="relay-1",
        kind="virtual",
        slot="main",
        desktop_session_id=session,
    )
    assert status == 200 and stopped["stopped"] is True, stopped


async def test_a_stale_confirmation_through_another_replica_stops_nothing(
    cluster: Cluster,
) -> None:
    b, c = await cluster.others()
    status, first = await cluster.call(b, "desktop_start", slot="race")
    assert status == 200, first
    stale = {
        "relay": "relay-1",
        "kind": "virtual",
        "slot": "race",
        "desktop_session_id": first["desktop"]["desktop_session_id"],
    }
    status, _ = await cluster.call(c, "desktop_stop_confirm", **stale)
    assert status == 200
    status, second = await cluster.call(c, "desktop_start", slot="race")
    assert status == 200, second
    newer = second["desktop"]["desktop_session_id"]
    status, refused = await cluster.call(b, "desktop_stop_confirm", **stale)
    assert status == 409 and refused["error"]["code"] == "session_conflict", refused
    assert refused["error"]["current_session_id"] == newer
    status, rows = await cluster.call(cluster.balancer, "desktop_status")
    running = [r["desktop_session_id"] for r in rows["desktops"] if r["slot"] == "race"]
    assert running == [newer]
    status, _ = await cluster.call(
        b, "desktop_stop_confirm", relay="relay-1", slot="race", desktop_session_id=newer
    )
    assert status == 200


async def test_the_replica_link_without_the_cluster_secret_is_refused(cluster: Cluster) -> None:
    """Unsigned or forged, the link's upgrade is refused (403) before a frame is read; the
    former HTTP routes are gone."""
    owner = cluster.replicas[str(await cluster.owner())]
    link = "ws" + owner.url[4:] + "/internal/v1/link"
    signer = ClusterSigner(secrets.token_urlsafe(24))  # not the cluster's secret
    forged = {
        **signer.sign("GET", "/internal/v1/link", b"b1", target=owner.url),
        "x-relaydesk-replica": "b1",
    }
    async with aiohttp.ClientSession() as session:
        for headers in ({}, {"x-relaydesk-replica": "b1"}, forged):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(link, headers=headers)
            assert refused.value.status == 403
        async with session.post(owner.url + "/internal/v1/request", json={}) as response:
            assert response.status == 404


async def _owner_record(cluster: Cluster) -> Owner:
    raw = await cluster.redis.hget(OWNERS, cluster.relay_id)
    owner = parse_owner(RelayId(cluster.relay_id), raw) if raw is not None else None
    assert owner is not None
    return owner


def _peers(secret: str) -> Peers:
    return Peers(ClusterSigner(secret), "test-peer", max_text=1 << 24, max_frame=1 << 20)


async def test_one_link_carries_concurrent_calls_and_names_a_stale_owner(cluster: Cluster) -> None:
    """Fifty requests at once travel on one link to the owner, each answered by the relay; an
    epoch the owner does not hold is "not owner"; a malformed call is ``invalid_args``."""
    owner = await _owner_record(cluster)
    secret = cluster.tracker.processes[0].env["RELAYDESK_CLUSTER_SECRET"]  # type: ignore[index]
    peers = _peers(secret)
    try:
        answers = await asyncio.gather(
            *(peers.request(owner, "desktop.status", {}, 10) for _ in range(50))
        )
        assert all(isinstance(a["desktops"], list) for a in answers)
        assert peers.open_links == 1
        with pytest.raises(NotOwner):
            await peers.request(
                dataclasses.replace(owner, epoch=owner.epoch + 1000), "desktop.status", {}, 10
            )
        link = await peers._link(owner.replica, owner.url)
        with pytest.raises(OpError) as bad:
            await link.request("replica.relay_request", {"relay_id": owner.relay_id}, 10)
        assert bad.value.code is ErrorCode.INVALID_ARGS
    finally:
        await peers.close()


async def test_a_signed_link_that_sends_garbage_is_closed_and_nothing_else_is(
    cluster: Cluster,
) -> None:
    """Bad frames on a signed link (not JSON, an unknown message, binary before the welcome)
    close that link with a protocol error; the replica goes on serving other links."""
    owner = await _owner_record(cluster)
    secret = cluster.tracker.processes[0].env["RELAYDESK_CLUSTER_SECRET"]  # type: ignore[index]
    signer = ClusterSigner(secret)
    async with aiohttp.ClientSession() as session:
        for garbage in ("{", '{"type": "nonsense"}', b"\x00" * 64):
            headers = {
                **signer.sign("GET", "/internal/v1/link", b"t1", target=owner.url),
                "x-relaydesk-replica": "t1",
            }
            async with session.ws_connect(owner.url + "/internal/v1/link", headers=headers) as ws:
                hello = await ws.receive(timeout=10)
                assert hello.type is aiohttp.WSMsgType.TEXT and '"hello"' in hello.data
                if isinstance(garbage, bytes):
                    await ws.send_bytes(garbage)
                else:
                    await ws.send_str(garbage)
                closed = await ws.receive(timeout=10)
            assert closed.type is aiohttp.WSMsgType.CLOSE, closed
            refusals = (
                CloseCode.PROTOCOL_ERROR,
                CloseCode.UNSUPPORTED_DATA,
                CloseCode.HELLO_EXPECTED,
            )
            assert ws.close_code in refusals, (garbage, ws.close_code)
    peers = _peers(secret)
    try:
        answer = await peers.request(owner, "desktop.status", {}, 10)
        assert isinstance(answer["desktops"], list)
    finally:
        await peers.close()


async def test_a_replica_without_the_secret_is_told_so(cluster: Cluster) -> None:
    owner = await _owner_record(cluster)
    peers = _peers(secrets.token_urlsafe(24))
    try:
        with pytest.raises(OpError) as refused:
            await peers.request(owner, "desktop.status", {}, 10)
        assert "cluster signature" in refused.value.message
        assert peers.open_links == 0
    finally:
        await peers.close()


async def test_every_replica_reports_readiness_and_metrics(cluster: Cluster) -> None:
    owner = str(await cluster.owner())
    async with httpx.AsyncClient() as client:
        for port, replica in cluster.replicas.items():
            ready = (await client.get(f"{replica.url}/readyz")).json()
            assert (ready["ok"], ready["database"], ready["redis"]) == (True, True, True)
            text = (await client.get(f"{replica.url}/metrics", headers=SCRAPE)).text
            held = "1.0" if port == owner else "0.0"
            assert f"relaydesk_relays_connected {held}" in text
            assert "relaydesk_relays_owned 1.0" in text


async def test_a_viewer_through_another_replica_shows_the_desktop_pixel_exact(
    cluster: Cluster,
) -> None:
    b, c = await cluster.others()
    status, started = await cluster.call(b, "desktop_start", slot="viewed")
    assert status == 200, started
    desktop = started["desktop"]
    socket = "ws" + b[4:] + urlsplit(started["viewer_url"]).path + "websockify"
    async with open_viewer(socket) as client:
        frame = await full_frame(client)
        expected = await asyncio.to_thread(capture, desktop["display"])
        assert frame.shape == expected.shape
        frame, expected = (without_cursor(image, desktop["display"]) for image in (frame, expected))
        assert np.array_equal(frame, expected), "the framebuffer differs from the Xvfb capture"

        ws = client.t._ws  # type: ignore[attr-defined]
        status, _ = await cluster.call(
            c,
            "desktop_stop_confirm",
            relay="relay-1",
            slot="viewed",
            desktop_session_id=desktop["desktop_session_id"],
        )
        assert status == 200
        await until_closed(ws, 10)
        assert ws.close_code == CloseCode.DESKTOP_STOPPED


async def test_a_stalled_viewer_through_another_replica_holds_bounded_memory(
    cluster: Cluster,
) -> None:
    """Credit windows on both hops of a spliced stream: a viewer on a non-owner that asks for
    a flood of full frames (about 160 MB) and never reads makes neither replica hold more than
    its windows, and another viewer of the same desktop through that replica keeps streaming."""
    b, _ = await cluster.others()
    status, started = await cluster.call(b, "desktop_start", slot="stalled")
    assert status == 200, started
    socket = "ws" + b[4:] + urlsplit(started["viewer_url"]).path + "websockify"
    pids = [
        cluster.replicas[str(await cluster.owner())].process.pid,
        cluster.replicas[b.rsplit(":", 1)[1]].process.pid,
    ]

    def rss() -> list[int]:
        return [psutil.Process(pid).memory_info().rss for pid in pids]

    async with open_viewer(socket) as fast:
        assert await measure(fast, 1.0) > 0  # warm-up: the windows have grown
        before = rss()
        async with stalled_viewer(socket):
            for _ in range(2):  # while the stalled viewer is still connected
                assert await measure(fast, 1.0) > 0
            after = rss()
    growth = [(later - earlier) / 2**20 for later, earlier in zip(after, before, strict=True)]
    # A credit window per hop (8 MiB at most) and socket buffers: far below the flood.
    assert all(grown < 48 for grown in growth), f"MiB grown (owner, other): {growth}"
    status, _ = await cluster.call(
        b,
        "desktop_stop_confirm",
        relay="relay-1",
        slot="stalled",
        desktop_session_id=started["desktop"]["desktop_session_id"],
    )
    assert status == 200


async def test_mcp_through_the_balancer_needs_no_affinity(cluster: Cluster) -> None:
    """Stateless MCP: a 2025-era client initializes on one replica and goes on with the others
    (round robin); every replica lists the tools and serves the relay's desktop."""
    b, c = await cluster.others()
    status, started = await cluster.call(b, "desktop_start", slot="mcp")
    assert status == 200, started
    session = started["desktop"]["desktop_session_id"]
    endpoint = f"{cluster.balancer}/api/v1/conversations/{cluster.seed.conversation_id}/mcp"
    headers = {"Authorization": f"Bearer {cluster.seed.api_token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=scaled(30)) as http,
        Client(streamable_http_client(endpoint, http_client=http), mode="legacy") as client,
    ):
        for _ in range(len(cluster.replicas)):
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert "screen" in tools
            listed = await client.call_tool("desktop_list_active", {})
            assert session in _text(listed), listed.content
            shot = await client.call_tool(
                "screen", {"action": "screenshot", "desktop_session_id": session}
            )
            assert not shot.is_error and json.loads(_text(shot))["screen_revision"]
    status, _ = await cluster.call(
        c, "desktop_stop_confirm", relay="relay-1", slot="mcp", desktop_session_id=session
    )
    assert status == 200


def _text(result: types.CallToolResult) -> str:
    return next(c.text for c in result.content if isinstance(c, types.TextContent))


@dataclass
class Watched:
    """A desktop started for a test, with an X client recording every input event on it."""

    session: str
    recorder: XRecorder


@contextlib.asynccontextmanager
async def _watched(cluster: Cluster, base: str, slot: str) -> AsyncIterator[Watched]:
    status, started = await cluster.call(base, "desktop_start", slot=slot)
    assert status == 200, started
    desktop = started["desktop"]
    recorder = await asyncio.to_thread(XRecorder, desktop["display"], scaled(10))
    try:
        yield Watched(desktop["desktop_session_id"], recorder)
    finally:
        recorder.stop()
        await cluster.call(
            base,
            "desktop_stop_confirm",
            relay="relay-1",
            slot=slot,
            desktop_session_id=desktop["desktop_session_id"],
        )


def _presses(events: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    return [(ev["x"], ev["y"], ev["button"]) for ev in events if ev["type"] == "ButtonPress"]


async def _screenshot(cluster: Cluster, base: str, session: str) -> str:
    status, shot = await cluster.call(
        base, "screen", action="screenshot", desktop_session_id=session
    )
    assert status == 200, shot
    return str(shot["screen_revision"])


async def _click(cluster: Cluster, base: str, session: str, revision: str) -> tuple[int, Any]:
    return await cluster.call(
        base,
        "screen",
        action="click",
        x=400,
        y=300,
        desktop_session_id=session,
        expected_screen_revision=revision,
    )


async def _metric(base: str, line_start: str) -> float:
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{base}/metrics", headers=SCRAPE)).text
    return next(
        float(line.split()[-1]) for line in text.splitlines() if line.startswith(line_start)
    )


async def test_a_guarded_click_through_another_replica_lands_or_is_refused_when_stale(
    cluster: Cluster,
) -> None:
    """Screenshots through B, clicks through C; neither holds the relay, so the click goes
    C → B (which keeps the capture and runs the guard) → the owner → the relay."""
    b, c = await cluster.others()
    async with _watched(cluster, b, "guarded") as desktop:
        forwarded = await _metric(c, 'relaydesk_forwarded_requests_total{kind="screen"}')
        revision = await _screenshot(cluster, b, desktop.session)
        status, clicked = await _click(cluster, c, desktop.session, revision)
        assert status == 200, clicked
        assert clicked["guard"]["checked"] is True
        assert _presses(desktop.recorder.drain()) == [(400, 300, 1)]
        assert await _metric(c, 'relaydesk_forwarded_requests_total{kind="screen"}') > forwarded

        revision = await _screenshot(cluster, b, desktop.session)
        desktop.recorder.paint(360, 270, 80, 60, 0xFFFFFF)  # a dialog appeared under the target
        status, refused = await _click(cluster, c, desktop.session, revision)
        assert (status, refused["error"]["code"]) == (409, "stale_screen"), refused
        assert refused["error"]["screen_revision"] == revision
        assert "take a new screenshot" in refused["error"]["message"]
        assert desktop.recorder.drain() == []


async def _me(client: httpx.AsyncClient, base: str, token: str) -> int:
    response = await client.get(f"{base}/api/v1/me", headers={"Authorization": f"Bearer {token}"})
    return response.status_code


async def test_revoking_a_token_on_one_replica_takes_effect_on_the_others_at_once(
    cluster: Cluster, redis_url: str
) -> None:
    # The admin CLI's way: a store of its own that announces its writes on Redis.
    store = await Store.open(cluster.seed.database_url)
    b, c = await cluster.others()
    try:
        async with shared_caches(redis_url, store, listen=False), httpx.AsyncClient() as client:
            token, record = await store.create_api_token(cluster.seed.user["user_id"], "soon")
            for base in (b, c):  # each replica now holds the token in its read cache
                assert await _me(client, base, token) == 200
            await admin.revoke_token(store, record.token_id)
            revoked_at = time.monotonic()
            refused: dict[str, float] = {}
            while len(refused) < 2 and time.monotonic() - revoked_at < scaled(1):
                for base in (b, c):
                    if base not in refused and await _me(client, base, token) == 401:
                        refused[base] = time.monotonic() - revoked_at
    finally:
        await store.close()
    print(f"revocation seen after (s): {refused}")
    assert set(refused) == {b, c}
    # Told, not timed out: well before the read cache would have forgotten the token by
    # itself (READ_CACHE_TTL_S); the time it took is printed (8 to 32 ms on a quiet host).
    assert max(refused.values()) < READ_CACHE_TTL_S / 4, refused


async def _failures_until_refused(bases: list[str], username: str, source: str) -> int:
    """Wrong passwords for ``username`` from loopback address ``source``, round robin over
    ``bases``, until one is refused."""
    transport = httpx.AsyncHTTPTransport(local_address=source)
    async with httpx.AsyncClient(transport=transport, timeout=scaled(10)) as client:
        for attempt in range(1, 40):
            base = bases[attempt % len(bases)]
            body = {"username": username, "password": "wrong"}
            response = await client.post(f"{base}/api/v1/login", json=body)
            if response.status_code == 429:
                return attempt - 1
            assert response.status_code == 401, response.text
    raise AssertionError("never rate limited")


async def test_failed_logins_over_three_replicas_hit_the_limit_at_the_same_count_as_on_one(
    cluster: Cluster,
) -> None:
    """Counted per client address, in Redis: two addresses, one on one replica, one spread."""
    bases = [r.url for r in cluster.replicas.values()]
    suffix = secrets.token_hex(4)
    on_one = await _failures_until_refused(bases[:1], f"guess-one-{suffix}", "127.0.0.2")
    spread = await _failures_until_refused(bases, f"guess-all-{suffix}", "127.0.0.3")
    assert on_one == spread == 20  # RELAYDESK_LOGIN_MAX_FAILURES' default


async def test_the_owner_killed_rows_go_unknown_then_heal_nothing_stopped(
    cluster: Cluster,
) -> None:
    b, _ = await cluster.others()
    status, started = await cluster.call(b, "desktop_start", slot="survivor")
    assert status == 200, started
    session = started["desktop"]["desktop_session_id"]
    dead_port = str(await cluster.owner())
    dead = cluster.replicas.pop(dead_port)
    dead.process.send_signal(signal.SIGKILL)
    seen_unknown = False

    async def reowned() -> bool:
        nonlocal seen_unknown
        _, rows = await cluster.call(b, "desktop_status")
        states = {r["desktop_session_id"]: r["state"] for r in rows.get("desktops", [])}
        seen_unknown = seen_unknown or states.get(session) == "unknown"
        owner = await cluster.owner()
        return owner not in (None, dead_port) and states.get(session) == "running"

    await wait_until(reowned, 30, "the relay to reconnect to a live replica", interval=0.1)
    for base in [r.url for r in cluster.replicas.values()]:
        status, listed = await cluster.call(base, "desktop_list_active", probe=True)
        assert status == 200, listed
        assert [r["desktop_session_id"] for r in listed["desktops"]] == [session]
    assert cluster.relay.is_alive()
    status, _ = await cluster.call(
        b, "desktop_stop_confirm", relay="relay-1", slot="survivor", desktop_session_id=session
    )
    assert status == 200
    print(f"rows seen unknown while the relay was away: {seen_unknown}")


async def test_a_click_on_a_dead_replicas_screenshot_is_an_expired_revision(
    cluster: Cluster,
) -> None:
    """The replica that took the screenshot was killed: a click through another one is
    ``revision_expired`` (take a new screenshot) and nothing reaches the desktop."""
    owner = str(await cluster.owner())
    issuer_port = next(port for port in cluster.replicas if port != owner)
    issuer, entry = cluster.replicas[issuer_port].url, cluster.replicas[owner].url
    async with _watched(cluster, entry, "orphaned") as desktop:
        revision = await _screenshot(cluster, issuer, desktop.session)
        cluster.replicas.pop(issuer_port).process.send_signal(signal.SIGKILL)
        status, refused = await _click(cluster, entry, desktop.session, revision)
        assert (status, refused["error"]["code"]) == (409, "revision_expired"), refused
        assert refused["error"]["reason"] == "replica_gone"
        assert "take a new one" in refused["error"]["message"]
        assert desktop.recorder.drain() == []
