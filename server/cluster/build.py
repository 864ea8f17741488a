"""The one place that chooses what replicas share: the ``RelayRouter`` (the links themselves on one
machine, the ``ClusterRouter`` when replicas share Redis, ``RELAYDESK_REDIS_URL``), where screen
calls on another replica's revision go (nowhere, or that replica), who hears of a store's
cache invalidations (nobody else, or every replica), and where login failures are counted
(this process, or Redis).

The Redis client, the ownership records and the peers' HTTP client are imported only when
Redis is configured: a single server never loads them, and answers sooner after a restart."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from server.auth.ratelimit import LoginRateLimiter
from server.cluster.screen import ScreenForwarding
from server.cluster.signing import ClusterSigner
from server.config import Settings
from server.db.base import StoreBase
from server.db.invalidation import LocalInvalidations, RedisInvalidations
from server.relays.hub import RelayHub
from server.relays.router import RelayRouter
from server.screen.tool import RevisionIssuers

if TYPE_CHECKING:
    import redis.asyncio as redis

    from server.cluster.router import ClusterRouter

# A command on a pooled connection that Redis closed (it restarted) is sent again on a new one,
# after 50 ms and then 100 ms: otherwise the first command after a restart fails (readiness
# included). Timeouts are not retried: a Redis that hangs is reported at once.
_RECONNECT_RETRIES = 2
_MAX_CONNECTIONS = 100


def _redis(url: str) -> redis.Redis:
    import redis.asyncio as redis
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError

    retry = Retry(ExponentialBackoff(cap=0.5, base=0.05), _RECONNECT_RETRIES)
    # A command waits up to 5 s for a pooled connection: the default pool fails at once past
    # its connections in use (thousands of relays claiming at once lost claims that way).
    pool = redis.BlockingConnectionPool.from_url(
        url,
        max_connections=_MAX_CONNECTIONS,
        timeout=5.0,
        socket_timeout=5.0,
        retry=retry,
        retry_on_error=[RedisConnectionError],
    )
    return redis.Redis.from_pool(pool)


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
    client = _redis(settings.redis_url)
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
async def shared_caches(
    redis_url: str, store: StoreBase, *, listen: bool = True
) -> AsyncIterator[None]:
    """With Redis, announce ``store``'s cache invalidations to every replica (and, when
    ``listen``, clear its caches on theirs) until exit; without, nothing changes."""
    if not redis_url:
        yield
        return

    client = _redis(redis_url)
    invalidations = RedisInvalidations(client)
    store.invalidations = invalidations
    try:
        if listen:
            async with invalidations.listening(store.clear_caches):
                yield
        else:
            yield
    finally:
        store.invalidations = LocalInvalidations()
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

    client = _redis(settings.redis_url)
    try:
        yield LoginRateLimiter(RedisWindow(client, "address", failures, window_s))
    finally:
        await client.aclose()
