"""The one place that chooses what replicas share: the ``RelayRouter`` (the links themselves on one
machine, the ``ClusterRouter`` when replicas share Redis, ``RELAYDESK_REDIS_URL``), where screen
calls on another replica's revision go (nowhere, or that replica) and where login failures
are counted (this process, or Redis). Who hears of a store's cache invalidations (nobody else,
or every replica) is chosen in ``server.cluster.caches``, which the admin commands load alone.

The Redis client, the ownership records and the peers' HTTP client are imported only when
Redis is configured: a single server never loads them, and answers sooner after a restart."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from server.auth.ratelimit import LoginRateLimiter
from server.cluster.caches import redis_client
from server.cluster.screen import ScreenForwarding
from server.cluster.signing import ClusterSigner
from server.config import Settings
from server.relays.hub import RelayHub
from server.relays.router import RelayRouter
from server.screen.tool import RevisionIssuers

if TYPE_CHECKING:
    from server.cluster.router import ClusterRouter


@dataclass(frozen=True)
class Routing:
    """The router callers use, the cluster side when there is one, and where the screen tool
    sends calls on other replicas' revisions."""

    router: RelayRouter
    cluster: ClusterRouter | None
    issuers: RevisionIssuers | None = None


@contextlib.asynccontextmanager
async def routing(settings: Settings, links: RelayHub) -> AsyncIterator[Routing]:
    """Build the router; a clustered one heartbeats until exit, then hands its relays back."""
    if not settings.clustered:
        yield Routing(links, None)
        return

    from server.cluster.nonces import RedisNonces
    from server.cluster.ownership import Ownership
    from server.cluster.peers import Peers
    from server.cluster.router import ClusterRouter

    settings.check()
    client = redis_client(settings.redis_url)
    replica_id = secrets.token_hex(6)
    ownership = Ownership(
        client, replica_id, settings.advertised_url(), settings.cluster_dead_after_s
    )
    signer = ClusterSigner(settings.cluster_secret, nonces=RedisNonces(client))
    cluster = ClusterRouter(
        links,
        ownership,
        Peers(
            signer,
            replica_id,
            max_text=settings.max_text_frame,
            max_frame=settings.max_channel_frame,
        ),
        heartbeat_s=settings.cluster_heartbeat_s,
        on_orphaned=links.forget_remote,
        signer=signer,
    )
    await cluster.beat()
    cluster.start()
    try:
        yield Routing(cluster, cluster, ScreenForwarding(cluster))
    finally:
        await cluster.stop()
        await client.aclose()


@contextlib.asynccontextmanager
async def login_limits(settings: Settings) -> AsyncIterator[LoginRateLimiter]:
    """The login rate limiter (per address): one budget in Redis for all replicas, else this
    process's."""
    failures, window_s = settings.login_max_failures, settings.login_window_s
    if not settings.clustered:
        yield LoginRateLimiter.in_process(failures, window_s)
        return

    from server.auth.redis_windows import RedisWindow

    client = redis_client(settings.redis_url)
    try:
        yield LoginRateLimiter(RedisWindow(client, "address", failures, window_s))
    finally:
        await client.aclose()
