"""A replica link's upgrade, captured on its way from one replica to another, opens nothing
when replayed: not at another replica (the signature names its target), not at the same one
again, and not with its nonce re-signed for another replica (nonces are remembered in Redis,
one book for the whole cluster). Two server replicas on real PostgreSQL and Redis."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import pytest
import pytest_asyncio
import redis.asyncio as redis

from server.cluster.channel import LINK_PATH, LINK_REPLICA
from server.cluster.nonces import PREFIX
from server.cluster.peers import Peers
from server.cluster.signing import NONCE, SIGNATURE, TIMESTAMP, ClusterSigner, _mac
from tests.cluster.test_replicas import _seed
from tests.support import postgres
from tests.support import redis as redis_support
from tests.support.processes import ProcessTracker
from tests.support.stack import ServerProcess, start_server

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="module")]

postgres_cluster = postgres.postgres_cluster
redis_server = redis_support.redis_server
redis_url = redis_support.redis_url


@dataclass
class Pair:
    r1: ServerProcess
    r2: ServerProcess
    secret: str
    redis: redis.Redis


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pair(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_cluster: postgres.PostgresCluster,
    redis_url: str,
) -> AsyncIterator[Pair]:
    root: Path = tmp_path_factory.mktemp("replay")
    url = postgres_cluster.create_database(f"replay_{secrets.token_hex(4)}")
    seed = await _seed(root / "data", url)
    tracker = ProcessTracker(root / "processes")
    secret = secrets.token_urlsafe(24)
    env = {"RELAYDESK_REDIS_URL": redis_url, "RELAYDESK_CLUSTER_SECRET": secret}
    client = redis.Redis.from_url(redis_url)
    try:
        r1 = await start_server(tracker.start, seed, env=env)
        r2 = await start_server(tracker.start, seed, env=env)
        yield Pair(r1, r2, secret, client)
    except BaseException:
        for process in tracker.processes:
            print(f"----- {process.name}: {process.log_tail(3000)}")
        raise
    finally:
        tracker.cleanup()
        await client.aclose()


async def _captured_upgrade(pair: Pair) -> dict[str, str]:
    """The headers a replica sends to open its link to R2 (recorded on the way out), after
    R2 has accepted them."""
    sent: list[Mapping[str, str]] = []

    async def record(
        session: aiohttp.ClientSession,
        context: SimpleNamespace,
        params: aiohttp.TraceRequestStartParams,
    ) -> None:
        sent.append(dict(params.headers))

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(record)
    peers = Peers(ClusterSigner(pair.secret), "r-test", max_text=1 << 20, max_frame=1 << 20)
    peers._session = aiohttp.ClientSession(trace_configs=[trace])
    try:
        link = await peers._link("r2", pair.r2.url)
        assert not link.closed.is_set(), "R2 accepts the genuine upgrade"
    finally:
        await peers.close()
    (headers,) = sent
    return {name.lower(): value for name, value in headers.items()}


async def _upgrade_status(url: str, headers: Mapping[str, str]) -> int:
    """101 when ``url``'s replica link accepts these headers, else the refusal's status."""
    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(url + LINK_PATH, headers=dict(headers)):
                return 101
        except aiohttp.WSServerHandshakeError as refused:
            return refused.status


async def test_a_captured_upgrade_replayed_to_another_replica_is_refused(pair: Pair) -> None:
    captured = await _captured_upgrade(pair)
    replay = {k: v for k, v in captured.items() if k.startswith("x-relaydesk-")}
    assert await _upgrade_status(pair.r1.url, replay) == 403


async def test_a_captured_upgrade_replayed_to_its_own_replica_is_refused(pair: Pair) -> None:
    captured = await _captured_upgrade(pair)
    replay = {k: v for k, v in captured.items() if k.startswith("x-relaydesk-")}
    assert await _upgrade_status(pair.r2.url, replay) == 403


async def test_a_nonce_is_spent_for_the_whole_cluster(pair: Pair) -> None:
    """A fresh upgrade for R2 is taken once; the same nonce, even correctly signed for R1 (which
    never saw it), is refused there too: the nonce lives in Redis, not in one process."""
    signer = ClusterSigner(pair.secret)
    headers = {**signer.sign("GET", LINK_PATH, b"r9", target=pair.r2.url), LINK_REPLICA: "r9"}
    assert await _upgrade_status(pair.r2.url, headers) == 101
    assert await pair.redis.exists(PREFIX + headers[NONCE]) == 1
    assert await _upgrade_status(pair.r2.url, headers) == 403

    resigned = _signed_with_nonce(pair.secret, headers[NONCE], pair.r1.url)
    assert await _upgrade_status(pair.r1.url, resigned) == 403
    fresh = {**signer.sign("GET", LINK_PATH, b"r9", target=pair.r1.url), LINK_REPLICA: "r9"}
    assert await _upgrade_status(pair.r1.url, fresh) == 101, "R1 still takes a fresh upgrade"


def _signed_with_nonce(secret: str, nonce: str, target: str) -> dict[str, str]:
    """Headers signed for ``target`` that reuse ``nonce`` (only a secret holder can make them)."""
    timestamp = f"{time.time():.3f}"
    mac = _mac(secret.encode(), "GET", LINK_PATH, target, timestamp, nonce, b"r9")
    return {TIMESTAMP: timestamp, NONCE: nonce, SIGNATURE: mac, LINK_REPLICA: "r9"}
