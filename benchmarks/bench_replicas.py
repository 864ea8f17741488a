"""Replicas: a request for a relay held by another replica vs one held by the replica asked.

Replica A (the real server app, in this process) on PostgreSQL and Redis holds a real relay; a
second ``ClusterRouter`` B, holding no relay, reaches it through A's internal channel. The same
request (``ping``, the empty op) is timed through A's hub (owner-local) and through B
(forwarded: signed HTTP to A, then A's hub), interleaved in one run.
Target: added p50 (B - A) ≤ 1 ms on loopback.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import redis.asyncio as redis

from benchmarks.common import parser, percentile, summary
from server.cluster.ownership import OWNERS, Ownership
from server.cluster.peers import Peers
from server.cluster.router import ClusterRouter
from server.cluster.signing import ClusterSigner
from server.relays.hub import RelayHub
from tests.cluster.test_replicas import _seed
from tests.support.postgres import PostgresCluster, start_cluster
from tests.support.processes import ProcessTracker
from tests.support.redis import RedisServer, start_redis
from tests.support.stack import inprocess_server, start_relay, wait_until
from wire.ids import RelayId


async def _ms(call: Any) -> float:
    start = time.perf_counter()
    await call
    return (time.perf_counter() - start) * 1000


async def run(count: int, pg: PostgresCluster, rd: RedisServer) -> int:
    root = Path(tempfile.mkdtemp(prefix="relaydesk-bench-replicas-"))
    tracker = ProcessTracker(root / "processes")
    secret = secrets.token_urlsafe(24)
    client = redis.Redis.from_url(rd.url)
    try:
        seed = await _seed(root / "data", pg.create_database("bench_replicas"))
        async with inprocess_server(seed, redis_url=rd.url, cluster_secret=secret) as (app, url):
            start_relay(tracker.start, seed, url)
            relay_id = RelayId(seed.relay["relay_id"])
            owner = app.state.services.links
            await wait_until(lambda: owner.is_connected(relay_id), 30, "the relay")
            await wait_until(lambda: client.hget(OWNERS, relay_id), 30, "the relay's owner")
            signer = ClusterSigner(secret)
            other = ClusterRouter(
                RelayHub(cast(Any, None)), Ownership(client, "bench-b", "http://127.0.0.1:9", 5.0),
                Peers(signer), heartbeat_s=1.0, on_orphaned=_ignore, signer=signer,
            )  # fmt: skip
            await other.beat()
            for _ in range(50):
                await owner.request(relay_id, "ping"), await other.request(relay_id, "ping")
            local_ms, forwarded_ms = [], []
            for _ in range(count):
                local_ms.append(await _ms(owner.request(relay_id, "ping")))
                forwarded_ms.append(await _ms(other.request(relay_id, "ping")))
            await other.peers.close()
        print(summary("owner-local request (ping)", local_ms))
        print(summary("forwarded request (ping)", forwarded_ms))
        added = percentile(forwarded_ms, 0.5) - percentile(local_ms, 0.5)
        print(f"added by forwarding, p50: {added:.3f} ms")
        print(f"target added p50 <= 1 ms: {'met' if added <= 1.0 else 'NOT met'}")
        return 0
    finally:
        tracker.cleanup()
        await client.aclose()
        shutil.rmtree(root, ignore_errors=True)


async def _ignore(relay_id: RelayId) -> None:
    return None


def main() -> int:
    args = parser(__doc__ or "").parse_args()
    pg, rd = start_cluster(), start_redis()
    try:
        return asyncio.run(run(100 if args.quick else 1000, pg, rd))
    finally:
        rd.stop()
        pg.stop()
        shutil.rmtree(pg.root, ignore_errors=True)
        shutil.rmtree(rd.root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
