"""Telling every server replica that a write made some cached reads stale.

A ``Store`` write clears its own ``ReadCache``s at once, then ``announce``s the names of those
caches. On one machine nobody else holds a cache and announcing does nothing
(:class:`LocalInvalidations`). With Redis (``RELAYDESK_REDIS_URL``) the names are published on
one pub/sub channel; every replica listens (:class:`RedisInvalidations.listening`) and clears
the same caches on arrival, so a revocation made through any replica or the admin CLI holds
everywhere within one Redis round trip. A lost message (Redis unreachable, a listener
reconnecting) falls back to the caches' own TTL (``cache.READ_CACHE_TTL_S``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from server.instruments import redis_error
from server.tasks import cancel_and_wait

if TYPE_CHECKING:
    import redis.asyncio as redis

log = logging.getLogger(__name__)

CHANNEL: Final = "relaydesk:cache:invalidate"
RETRY_S: Final = 1.0

# Clears the named caches of this process.
Clear = Callable[[Iterable[str]], None]
CacheName = Literal["token", "role", "relay", "desktop"]
CACHE_NAMES: Final[frozenset[str]] = frozenset({"token", "role", "relay", "desktop"})


class Invalidations(Protocol):
    """Where a store announces that some of its caches went stale."""

    async def announce(self, caches: Iterable[CacheName]) -> None:
        """Tell the other holders of these caches (never raises: the TTL is the fallback)."""
        ...


class LocalInvalidations:
    """One process: its own caches were already cleared, nobody else to tell."""

    async def announce(self, caches: Iterable[CacheName]) -> None:
        return None


class RedisInvalidations:
    """Announcements on a Redis pub/sub channel, heard by every replica's listener."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self.origin = secrets.token_hex(6)

    async def announce(self, caches: Iterable[CacheName]) -> None:
        from redis.exceptions import RedisError

        message = json.dumps({"origin": self.origin, "caches": sorted(caches)})
        try:
            await self._client.publish(CHANNEL, message)
        except RedisError:
            redis_error("caches")
            log.warning(
                "cache invalidation not published; other replicas catch up within their cache TTL",
                exc_info=True,
            )

    @contextlib.asynccontextmanager
    async def listening(self, clear: Clear) -> AsyncIterator[None]:
        """Clear caches as other processes announce them, until exit (subscribed on entry)."""
        subscribed = asyncio.Event()
        task = asyncio.create_task(self._listen(clear, subscribed), name="cache-invalidations")
        try:
            waiter = asyncio.create_task(subscribed.wait())
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if task.done():
                task.result()
            yield
        finally:
            await cancel_and_wait(task)

    async def _listen(self, clear: Clear, subscribed: asyncio.Event) -> None:
        from redis.exceptions import RedisError

        while True:
            try:
                async with self._client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    # Whatever was announced while unsubscribed may be missed: start clean.
                    clear(CACHE_NAMES)
                    subscribed.set()
                    async for message in pubsub.listen():
                        self._heard(message, clear)
            except RedisError:
                redis_error("caches")
                log.warning("cache invalidation listener lost Redis; retrying", exc_info=True)
                await asyncio.sleep(RETRY_S)

    def _heard(self, message: Any, clear: Clear) -> None:
        try:
            data = json.loads(message["data"])
            caches = [name for name in data["caches"] if name in CACHE_NAMES]
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring a malformed cache invalidation: %r", message)
            return
        if data.get("origin") != self.origin:
            clear(caches)
