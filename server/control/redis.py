"""``RedisControlStore``: control records in Redis, shared by every server replica.

One string key per desktop, ``relaydesk:control:<relay_id>:<desktop_session_id>``, holding the
record as compact JSON with a TTL (refreshed by every change; a desktop nobody touched for a
day is forgotten). A change is an optimistic transaction: ``WATCH`` the key, read it, apply the
pure change, ``MULTI``/``SET``/``EXEC``; a concurrent writer makes ``EXEC`` fail and the change
runs again on the newer record. Redis not answering is ``unavailable``: agent input is then
refused rather than let through unchecked. The safety-check requests waiting for a person live
in one hash beside them (:data:`APPROVALS`), so that any replica lists and decides them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import astuple
from typing import Any, Final

import redis.asyncio as redis
from redis.exceptions import RedisError, WatchError

from server.control.model import Cooldown, DesktopControl, DesktopKey, Grant, Person
from server.control.store import Change, T
from server.instruments import redis_error
from wire.errors import ErrorCode, OpError

PREFIX: Final = "relaydesk:control:"
# Pub/sub channel of Stop: each replica cancels its own requests in flight of the agents named.
STOPS_CHANNEL: Final = PREFIX + "stops"
TTL_S: Final = 24 * 3600
# The safety-check requests of every replica (server/control/approvals.py): one hash, the
# request's id to its JSON; each replica prunes what lapsed long ago.
APPROVALS: Final = PREFIX + "approvals"
# HSET of a request, or of a decision only while the kept request is in the state it was
# decided from (ARGV[3]; empty: unconditionally).
PUT_APPROVAL: Final = """
if ARGV[3] ~= '' then
  local kept = redis.call('HGET', KEYS[1], ARGV[1])
  if not kept or cjson.decode(kept)['state'] ~= ARGV[3] then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""
ATTEMPTS: Final = 20
SOCKET_TIMEOUT_S: Final = 5.0


def redis_key(key: DesktopKey) -> str:
    return f"{PREFIX}{key.relay_id}:{key.desktop_session_id}"


def encode(record: DesktopControl) -> str:
    """The record as compact JSON."""
    person = record.person
    data: dict[str, Any] = {
        "person": None
        if person is None
        else [person.name, person.user_id, person.last_input_at, person.held],
        "grants": [astuple(grant) for grant in record.grants.values()],
        "cooldowns": {agent: [c.until, c.by] for agent, c in record.cooldowns.items()},
        "shown": record.shown,
    }
    return json.dumps(data, separators=(",", ":"))


def decode(raw: bytes | str | None) -> DesktopControl:
    """A record written by :func:`encode` (nothing stored: an empty record)."""
    if raw is None:
        return DesktopControl()
    data = json.loads(raw)
    person = data["person"]
    grants = [Grant(*values) for values in data["grants"]]
    return DesktopControl(
        person=None if person is None else Person(*person),
        grants={grant.agent_id: grant for grant in grants},
        cooldowns={agent: Cooldown(*values) for agent, values in data["cooldowns"].items()},
        shown=data["shown"],
    )


def _unreachable(err: RedisError) -> OpError:
    redis_error("control")
    return OpError(ErrorCode.UNAVAILABLE, f"the control state is not reachable ({err})")


class RedisControlStore:
    """A ``ControlStore`` on Redis (``RELAYDESK_REDIS_URL``)."""

    def __init__(self, url: str) -> None:
        self._redis = redis.Redis.from_url(
            url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S
        )
        self._put_approval = self._redis.register_script(PUT_APPROVAL)

    async def read_many(self, keys: Sequence[DesktopKey]) -> list[DesktopControl]:
        if not keys:
            return []
        try:
            values: list[Any] = await self._redis.mget([redis_key(k) for k in keys])
        except RedisError as err:
            raise _unreachable(err) from err
        return [decode(value) for value in values]

    async def change(self, key: DesktopKey, change: Change[T]) -> T:
        name = redis_key(key)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                for _attempt in range(ATTEMPTS):
                    try:
                        return await self._attempt(pipe, name, change)
                    except WatchError:
                        continue
        except RedisError as err:
            raise _unreachable(err) from err
        raise OpError(ErrorCode.BUSY, "the control state of this desktop changes too fast")

    @staticmethod
    async def _attempt(pipe: Any, name: str, change: Change[T]) -> T:
        await pipe.watch(name)
        record, result = change(decode(await pipe.get(name)))
        pipe.multi()
        if record.is_empty():
            pipe.delete(name)
        else:
            pipe.set(name, encode(record), ex=TTL_S)
        await pipe.execute()
        return result

    async def forget(self, key: DesktopKey) -> None:
        try:
            await self._redis.delete(redis_key(key))
        except RedisError as err:
            raise _unreachable(err) from err

    async def announce_stop(self, stop: dict[str, Any]) -> None:
        try:
            await self._redis.publish(STOPS_CHANNEL, json.dumps(stop, separators=(",", ":")))
        except RedisError as err:
            raise _unreachable(err) from err

    async def stops(self) -> AsyncIterator[dict[str, Any]]:
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(STOPS_CHANNEL)
            while True:
                message = await pubsub.get_message(timeout=SOCKET_TIMEOUT_S / 2)
                if message is not None and message.get("type") == "message":
                    yield json.loads(message["data"])
        except RedisError as err:
            raise _unreachable(err) from err
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def approvals(self) -> list[str]:
        try:
            kept = await self._redis.hgetall(APPROVALS)
        except RedisError as err:
            raise _unreachable(err) from err
        return [v.decode() if isinstance(v, bytes) else str(v) for v in kept.values()]

    async def put_approval(self, approval_id: str, record: str, if_state: str | None) -> bool:
        try:
            kept = await self._put_approval(
                keys=[APPROVALS], args=[approval_id, record, if_state or ""]
            )
        except RedisError as err:
            raise _unreachable(err) from err
        return bool(kept)

    async def drop_approvals(self, approval_ids: Sequence[str]) -> None:
        if not approval_ids:
            return
        try:
            await self._redis.hdel(APPROVALS, *approval_ids)
        except RedisError as err:
            raise _unreachable(err) from err

    async def close(self) -> None:
        await self._redis.aclose()
