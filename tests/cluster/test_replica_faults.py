"""Two replicas behind HAProxy on their own PostgreSQL and Redis, which the tests take away and
give back: while one is gone, every request ends with a clear answer (never a hang, never a
500), readiness says which dependency is missing, and no desktop is stopped; once it is back,
every replica serves the relay again with the same desktop session."""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio
import redis.asyncio as redis

from server.cluster.ownership import OWNERS
from tests.cluster.test_replicas import _seed
from tests.support import postgres
from tests.support.haproxy import start_haproxy
from tests.support.processes import ProcessTracker, scaled
from tests.support.redis import RedisServer, start_redis
from tests.support.stack import Seed, ServerProcess, start_relay, start_server, wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.asyncio(loop_scope="module"),
]

# Answers a request may get while a dependency is gone: refused as unavailable, never a 500.
OUTAGE_STATUSES = {200, 502, 503}


@dataclass
class Faults:
    seed: Seed
    replicas: list[ServerProcess]
    balancer: str
    database: postgres.PostgresCluster
    redis_server: RedisServer
    redis: redis.Redis

    async def call(self, base: str, name: str, **args: Any) -> tuple[int, Any]:
        args.setdefault("conversation_id", self.seed.conversation_id)
        headers = {"Authorization": f"Bearer {self.seed.api_token}"}
        async with httpx.AsyncClient(base_url=base, timeout=scaled(30)) as client:
            response = await client.post(f"/api/v1/actions/{name}", json=args, headers=headers)
        return response.status_code, response.json()

    async def ready(self, base: str) -> tuple[int, Any]:
        async with httpx.AsyncClient(base_url=base, timeout=scaled(30)) as client:
            response = await client.get("/readyz")
        return response.status_code, response.json()

    async def owned(self) -> bool:
        try:
            return await self.redis.hget(OWNERS, str(self.seed.relay["relay_id"])) is not None
        except redis.RedisError:
            return False

    async def main_session(self, base: str) -> str | None:
        """The running ``main`` desktop's session as ``base`` lists it (None: not listed)."""
        status, listed = await self.call(base, "desktop_list_active")
        if status != 200:
            return None
        for row in listed["desktops"]:
            if row["slot"] == "main" and row["state"] == "running":
                return str(row["desktop_session_id"])
        return None


@pytest.fixture(scope="module")
def database() -> Iterator[postgres.PostgresCluster]:
    cluster = postgres.start_cluster()
    yield cluster
    cluster.stop()
    shutil.rmtree(cluster.root, ignore_errors=True)


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = start_redis()
    yield server
    server.stop()
    shutil.rmtree(server.root, ignore_errors=True)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def faults(
    tmp_path_factory: pytest.TempPathFactory,
    database: postgres.PostgresCluster,
    redis_server: RedisServer,
) -> AsyncIterator[Faults]:
    root = tmp_path_factory.mktemp("faults")
    seed = await _seed(root / "data", database.create_database("faults"))
    tracker = ProcessTracker(root / "processes")
    env = {
        "RELAYDESK_REDIS_URL": redis_server.url,
        "RELAYDESK_CLUSTER_SECRET": secrets.token_urlsafe(24),
        "RELAYDESK_CLUSTER_HEARTBEAT_S": "0.5",
        "RELAYDESK_CLUSTER_DEAD_AFTER_S": "2",
    }
    client = redis.Redis.from_url(redis_server.url)
    try:
        replicas = [await start_server(tracker.start, seed, env=env) for _ in range(2)]
        _, port = start_haproxy(tracker.start, root, [r.port for r in replicas])
        balancer = f"http://127.0.0.1:{port}"
        start_relay(
            tracker.start,
            seed,
            balancer,
            extra_args=("--stop-desktops-on-exit",),
            env={"RELAYDESK_DESKTOP_APPS": ",", "DISPLAY": ""},
        )
        stack = Faults(seed, replicas, balancer, database, redis_server, client)
        await wait_until(stack.owned, 30, "the relay to be owned by a replica")
        status, started = await stack.call(
            balancer, "desktop_start", relay="relay-1", geometry="800x600", profile="minimal"
        )
        assert status == 200, started
        yield stack
    except BaseException:
        for process in tracker.processes:
            print(f"----- {process.name}: {process.log_tail(3000)}")
        raise
    finally:
        tracker.cleanup()
        await client.aclose()


async def _everyone_serves(faults: Faults, session: str, within_s: float, what: str) -> float:
    """Seconds until every replica lists ``main`` with ``session`` and takes a screenshot."""
    started = time.monotonic()

    async def served() -> bool:
        for replica in faults.replicas:
            if await faults.main_session(replica.url) != session:
                return False
            status, _ = await faults.call(
                replica.url, "screen", relay="relay-1", action="screenshot", format="jpeg"
            )
            if status != 200:
                return False
        return True

    await wait_until(served, within_s, what)
    return time.monotonic() - started


async def test_redis_restarted_empty_every_replica_serves_the_relay_again(faults: Faults) -> None:
    session = await faults.main_session(faults.balancer)
    assert session is not None
    faults.redis_server.stop()
    try:
        for replica in faults.replicas:
            status, body = await faults.call(replica.url, "desktop_list_active")
            assert status in OUTAGE_STATUSES, body
            if status != 200:
                assert body["error"]["code"] in ("unavailable", "relay_unreachable"), body
            status, readiness = await faults.ready(replica.url)
            assert status == 503, readiness
    finally:
        faults.redis_server.start()  # same port, no data: ownership and replicas forgotten
    await _everyone_serves(faults, session, 30, "every replica to serve the relay again")
    await wait_until(faults.owned, 10, "the relay's owner to be written again")
    for replica in faults.replicas:
        status, readiness = await faults.ready(replica.url)
        assert status == 200, readiness


async def test_postgres_away_and_back_stops_nothing(faults: Faults) -> None:
    session = await faults.main_session(faults.balancer)
    assert session is not None
    faults.database.stop()
    try:
        for replica in faults.replicas:
            status, readiness = await faults.ready(replica.url)
            assert status == 503, readiness
            # a read may still come from the store's short-lived caches
            status, body = await faults.call(replica.url, "desktop_list_active")
            assert status in OUTAGE_STATUSES, body
            if status != 200:
                assert body["error"]["code"] == "unavailable", body
            # a start must be recorded: refused while the database is away
            status, body = await faults.call(
                replica.url, "desktop_start", relay="relay-1", slot="outage", profile="minimal"
            )
            assert status == 503, body
            assert body["error"] == {"code": "unavailable", "message": "database is not reachable"}
    finally:
        faults.database.launch()
    await _everyone_serves(faults, session, 30, "every replica to serve the relay again")
    status, listed = await faults.call(faults.balancer, "desktop_list_active")
    assert status == 200
    assert [row["slot"] for row in listed["desktops"]] == ["main"]  # nothing half-started
    for replica in faults.replicas:
        status, readiness = await faults.ready(replica.url)
        assert status == 200, readiness
