"""Revocation reaches open streams on every replica: two server processes on PostgreSQL and
Redis; a credential revoked through one (or by the admin CLI) ends the event stream it holds on
the other within 2 s."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from server import admin
from server.auth.dependencies import CSRF_HEADER, SESSION_COOKIE
from server.db.migrate import upgrade
from server.db.store import Store
from tests.relaydesk.test_admin_cli import admin_cli
from tests.support import postgres
from tests.support import redis as redis_support
from tests.support.processes import ProcessTracker, scaled
from tests.support.sse import SseStream, open_sse
from tests.support.stack import Seed, ServerProcess, start_server

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.asyncio(loop_scope="module"),
]

postgres_cluster = postgres.postgres_cluster
redis_server = redis_support.redis_server
redis_url = redis_support.redis_url

BOUND_S = 2.0


@dataclass
class Replicas:
    seed: Seed
    a: ServerProcess
    b: ServerProcess
    redis_url: str

    def events(self) -> str:
        return f"/api/v1/events?conversation_id={self.seed.conversation_id}"


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
async def replicas(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_cluster: postgres.PostgresCluster,
    redis_url: str,
) -> AsyncIterator[Replicas]:
    root = tmp_path_factory.mktemp("revocation-replicas")
    database = f"revocation_{secrets.token_hex(4)}"
    seed = await _seed(root / "data", postgres_cluster.create_database(database))
    tracker = ProcessTracker(root / "processes")
    env = {
        "RELAYDESK_REDIS_URL": redis_url,
        "RELAYDESK_CLUSTER_SECRET": secrets.token_urlsafe(24),
        "RELAYDESK_CLUSTER_HEARTBEAT_S": "0.5",
        "RELAYDESK_CLUSTER_DEAD_AFTER_S": "2",
    }
    try:
        a = await start_server(tracker.start, seed, env=env)
        b = await start_server(tracker.start, seed, env=env)
        yield Replicas(seed, a, b, redis_url)
    except BaseException:
        for process in tracker.processes:
            print(f"----- {process.name}: {process.log_tail(3000)}")
        raise
    finally:
        tracker.cleanup()


async def _member_token(seed: Seed, name: str) -> tuple[str, str]:
    store = await Store.open(seed.database_url)
    try:
        user = await admin.create_user(store, name)
        await store.add_member(seed.conversation_id, user["user_id"], "read")
        token, record = await store.create_api_token(user["user_id"], "replicas")
        return token, record.token_id
    finally:
        await store.close()


async def _ended(stream: SseStream, timeout: float) -> list[Any]:
    """The events up to ``access_revoked``, once the stream has ended after it."""
    events: list[Any] = []
    async with asyncio.timeout(timeout):
        while not events or events[-1].event != "access_revoked":
            events.append(await stream.events.get())
        while not stream.response.is_stream_consumed:
            await asyncio.sleep(0.01)
    return events


async def test_a_session_logged_out_through_one_replica_ends_its_stream_on_the_other(
    replicas: Replicas,
) -> None:
    seed = replicas.seed
    credentials = {"username": "alice", "password": seed.user["password"]}
    async with httpx.AsyncClient(base_url=replicas.a.url, timeout=scaled(10)) as on_a:
        assert (await on_a.post("/api/v1/login", json=credentials)).status_code == 200
        csrf = (await on_a.get("/api/v1/me")).json()["csrf_token"]
        cookie = {SESSION_COOKIE: on_a.cookies[SESSION_COOKIE]}
        async with (
            httpx.AsyncClient(base_url=replicas.b.url, cookies=cookie) as on_b,
            open_sse(on_b, replicas.events()) as stream,
        ):
            assert stream.response.status_code == 200
            await stream.next()
            logout = await on_a.post("/api/v1/logout", headers={CSRF_HEADER: csrf})
            assert logout.status_code == 200, logout.text
            logged_out = time.monotonic()
            events = await _ended(stream, scaled(BOUND_S) + 1)
            ended_after = time.monotonic() - logged_out
    print(f"stream on the other replica ended {ended_after:.2f} s after the logout")
    assert ended_after < scaled(BOUND_S)
    assert "signed out" in events[-1].data["reason"]


async def test_a_token_revoked_by_the_cli_ends_its_streams_on_both_replicas(
    replicas: Replicas,
) -> None:
    seed = replicas.seed
    token, token_id = await _member_token(seed, "agent")
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx.AsyncClient(base_url=replicas.a.url, timeout=scaled(10)) as on_a,
        httpx.AsyncClient(base_url=replicas.b.url, timeout=scaled(10)) as on_b,
        open_sse(on_a, replicas.events(), headers) as first,
        open_sse(on_b, replicas.events(), headers) as second,
    ):
        await first.next()
        await second.next()
        # The CLI without Redis: each replica sees the revocation by its own re-check.
        cli = await admin_cli(seed, "revoke-token", token_id)
        assert cli.returncode == 0, cli.stderr
        revoked_at = time.monotonic()
        ends = await asyncio.gather(
            _ended(first, scaled(BOUND_S) + 1), _ended(second, scaled(BOUND_S) + 1)
        )
        assert time.monotonic() - revoked_at < scaled(BOUND_S)
        assert all(events[-1].event == "access_revoked" for events in ends)
