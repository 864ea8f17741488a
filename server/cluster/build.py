"""The one place that chooses the ``RelayRouter``: the hub itself on one machine, the
``ClusterRouter`` when replicas share Redis (``RELAYDESK_REDIS_URL``)."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

from server.cluster.ownership import Ownership
from server.cluster.peers import Peers
from server.cluster.router import ClusterRouter
from server.cluster.signing import ClusterSigner
from server.config import Settings
from server.relays.hub import RelayHub
from server.relays.router import RelayRouter


@dataclass(frozen=True)
class Routing:
    """The router callers use, and the cluster side when there is one."""

    router: RelayRouter
    cluster: ClusterRouter | None


@contextlib.asynccontextmanager
async def routing(settings: Settings, hub: RelayHub) -> AsyncIterator[Routing]:
    """Build the router; a clustered one heartbeats until exit, then hands its relays back."""
    if not settings.clustered:
        yield Routing(hub, None)
        return
    import redis.asyncio as redis

    settings.check()
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=5.0)
    replica_id = secrets.token_hex(6)
    ownership = Ownership(
        client, replica_id, settings.advertised_url(), settings.cluster_dead_after_s
    )
    signer = ClusterSigner(settings.cluster_secret)
    cluster = ClusterRouter(
        hub, ownership, Peers(signer), heartbeat_s=settings.cluster_heartbeat_s,
        on_orphaned=hub.forget_remote, signer=signer,
    )  # fmt: skip
    await cluster.beat()
    cluster.start()
    try:
        yield Routing(cluster, cluster)
    finally:
        await cluster.stop()
        await client.aclose()
