"""What replicas share of the store's caches, and the Redis client they share it through:
light enough for a command-line process (``relaydesk admin``) that only announces a change.

The Redis client is imported only when Redis is configured."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from server.db.base import StoreBase
from server.db.invalidation import LocalInvalidations, RedisInvalidations

if TYPE_CHECKING:
    import redis.asyncio as redis

# A command on a pooled connection that Redis closed (it restarted) is sent again on a new one,
# after 50 ms and then 100 ms: otherwise the first command after a restart fails (readiness
# included). Timeouts are not retried: a Redis that hangs is reported at once.
_RECONNECT_RETRIES = 2
_MAX_CONNECTIONS = 100


def redis_client(url: str) -> redis.Redis:
    """A client of the Redis at ``url`` that retries a command once Redis has restarted."""
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


@contextlib.asynccontextmanager
async def shared_caches(
    redis_url: str, store: StoreBase, *, listen: bool = True
) -> AsyncIterator[None]:
    """With Redis, announce ``store``'s cache invalidations to every replica (and, when
    ``listen``, clear its caches on theirs) until exit; without, nothing changes."""
    if not redis_url:
        yield
        return

    client = redis_client(redis_url)
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
