"""A replica stays alive for the others while it reaps: its heartbeat does not wait for a
reap of thousands of relays, and a relay owned again elsewhere is left alone (real Redis; the
relays' desktops are marked by a slow callback)."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any, cast

import pytest
import redis.asyncio as redis

from server.cluster.ownership import OWNERS, PREFIX, Ownership
from server.cluster.peers import Peers
from server.cluster.router import ClusterRouter
from server.cluster.signing import ClusterSigner
from server.relays.hub import RelayHub
from tests.support import redis as redis_support
from wire.ids import RelayId

pytestmark = [pytest.mark.cluster, pytest.mark.redis, pytest.mark.asyncio(loop_scope="module")]

redis_server = redis_support.redis_server
redis_url = redis_support.redis_url

DEAD_AFTER_S = 1.0
ORPHANS = 8
ORPHAN_S = 0.4  # marking one relay's desktops: the whole reap takes 3.2 s, > DEAD_AFTER_S


async def test_a_replica_reaping_for_longer_than_the_dead_bound_stays_alive(
    redis_url: str,
) -> None:
    client = redis.Redis.from_url(redis_url)
    dead = Ownership(client, "dead-" + secrets.token_hex(3), "http://127.0.0.1:9", DEAD_AFTER_S)
    await dead.heartbeat()
    held = [RelayId(f"relay-{secrets.token_hex(4)}-{n}") for n in range(ORPHANS + 1)]
    for relay_id in held:
        await dead.claim(relay_id, frozenset())
    # One relay reconnected to a live replica before the reap: it is not orphaned.
    elsewhere = Ownership(client, "other-" + secrets.token_hex(3), "http://127.0.0.1:9", 60.0)
    await elsewhere.heartbeat()
    await elsewhere.claim(held[-1], frozenset())
    orphaned: list[RelayId] = []

    async def slowly_orphaned(relay_id: RelayId) -> None:
        await asyncio.sleep(ORPHAN_S)
        orphaned.append(relay_id)

    signer = ClusterSigner(secrets.token_urlsafe(24))
    replica = "alive-" + secrets.token_hex(3)
    router = ClusterRouter(
        RelayHub(cast(Any, None)),
        Ownership(client, replica, "http://127.0.0.1:9", DEAD_AFTER_S),
        Peers(signer, replica, max_text=1 << 20, max_frame=1 << 20),
        heartbeat_s=0.2,
        on_orphaned=slowly_orphaned,
        signer=signer,
    )
    await router.beat()
    router.start()
    silent = 0.0
    try:
        async with asyncio.timeout(30):
            while len(orphaned) < ORPHANS:
                if not await client.exists(PREFIX + "replica:" + replica):
                    silent += 0.05
                await asyncio.sleep(0.05)
    finally:
        await router.stop()
        await elsewhere.leave()
        await client.hdel(OWNERS, *held)
        await client.aclose()
    assert sorted(orphaned) == sorted(held[:-1])
    assert silent == 0.0, f"the reaping replica's key was missing for {silent:.2f} s"
