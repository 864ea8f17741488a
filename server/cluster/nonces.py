"""The replica link's nonces in Redis: one book for every replica.

A verified request's nonce is written with ``SET key 1 NX EX ttl``: the first replica to write
it admits the request, every later write of the same nonce (a replay, to this replica or to
any other, or after a restart) finds it there and is refused. Redis that does not answer
refuses the request too: a link is never admitted unchecked.
"""

from __future__ import annotations

import logging
from typing import Final

import redis.asyncio as redis
from redis.exceptions import RedisError

from server.instruments import redis_error
from wire.errors import ErrorCode, OpError

log = logging.getLogger(__name__)

PREFIX: Final = "relaydesk:cluster:nonce:"


class RedisNonces:
    """A ``NonceBook`` whose nonces live in Redis for their time to live."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client

    async def first_use(self, nonce: str, ttl_s: int) -> bool:
        try:
            written = await self._client.set(PREFIX + nonce, b"1", nx=True, ex=ttl_s)
        except RedisError as err:
            redis_error("cluster")
            log.warning("replica link nonce not checked: Redis did not answer (%s)", err)
            raise OpError(ErrorCode.FORBIDDEN, "cluster nonce could not be checked") from err
        return bool(written)
