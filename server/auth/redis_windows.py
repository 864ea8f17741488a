"""Login failure windows in Redis: one budget for every server replica.

Each key is a sorted set of failure instants (Redis ``TIME``, so replicas' clocks do not
matter) that keeps only the newest ``limit`` entries and expires with the window. Each call is
one script, so replicas adding and checking at once never miscount.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Final

import redis.asyncio as redis
from redis.exceptions import RedisError

from server.instruments import redis_error
from wire.errors import ErrorCode, OpError

PREFIX: Final = "relaydesk:login:"
_NOW = "local t = redis.call('TIME') local now = tonumber(t[1]) + tonumber(t[2]) / 1000000\n"
# KEYS: window; ARGV: window_s, limit, member.
_ADD = (
    _NOW
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]))
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -tonumber(ARGV[2]) - 1)
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[1]) * 1000))
"""
)
# KEYS: window; ARGV: window_s, limit → seconds to wait (as text), or nil.
_RETRY_AFTER = (
    _NOW
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]))
local limit = tonumber(ARGV[2])
if redis.call('ZCARD', KEYS[1]) < limit then return false end
local oldest = redis.call('ZRANGE', KEYS[1], -limit, -limit, 'WITHSCORES')
return tostring(math.max(0, tonumber(oldest[2]) + tonumber(ARGV[1]) - now))
"""
)


def _unreachable() -> OpError:
    redis_error("logins")
    return OpError(ErrorCode.UNAVAILABLE, "the login rate limit is not reachable")


class RedisWindow:
    """A ``Window`` whose events live in Redis under ``relaydesk:login:<kind>:``."""

    def __init__(self, client: redis.Redis, kind: str, limit: int, window_s: float) -> None:
        self.limit = limit
        self.window_s = window_s
        self._client = client
        self._prefix = f"{PREFIX}{kind}:"
        self._add = client.register_script(_ADD)
        self._retry_after = client.register_script(_RETRY_AFTER)

    def _key(self, key: str) -> str:
        # Hashed: a username or address of any length makes a short key.
        return self._prefix + hashlib.sha256(key.encode()).hexdigest()[:32]

    async def add(self, key: str) -> None:
        args: list[str | float] = [self.window_s, self.limit, secrets.token_hex(8)]
        try:
            await self._add(keys=[self._key(key)], args=args)
        except RedisError as err:
            raise _unreachable() from err

    async def retry_after(self, key: str) -> float | None:
        try:
            wait = await self._retry_after(keys=[self._key(key)], args=[self.window_s, self.limit])
        except RedisError as err:
            raise _unreachable() from err
        return None if wait is None else float(wait)

    async def clear(self, key: str) -> None:
        try:
            await self._client.delete(self._key(key))
        except RedisError as err:
            raise _unreachable() from err
