"""Relay ownership and replica liveness in Redis.

Keys (prefix ``relaydesk:cluster:``):

- ``replica:<id>``: the replica's internal address, with a TTL of ``dead_after_s`` that every
  heartbeat renews; a replica whose key expired is dead.
- ``replicas``: the set of replica ids ever registered and not yet reaped.
- ``owners``: hash relay id → ``{replica, url, epoch, capabilities}``; ``epochs``: hash relay id →
  the last epoch handed out. Each connection of a relay claims a new, larger epoch; a record is
  only ever changed or removed by a script that compares its epoch, so a newer owner wins.
- ``owners`` channel (pub/sub): the relay id whose owner changed, so caches update at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import redis.asyncio as redis

from wire.ids import RelayId

PREFIX: Final = "relaydesk:cluster:"
OWNERS: Final = PREFIX + "owners"
EPOCHS: Final = PREFIX + "epochs"
REPLICAS: Final = PREFIX + "replicas"
CHANGED: Final = PREFIX + "owners-changed"

# KEYS: owners, epochs; ARGV: relay id, record (without epoch), channel → the new epoch.
_CLAIM = """
local epoch = redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
local record = cjson.decode(ARGV[2])
record['epoch'] = epoch
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(record))
redis.call('PUBLISH', ARGV[3], ARGV[1])
return epoch
"""
# KEYS: owners; ARGV: relay id, replica, epoch, channel → 1 when removed.
_RELEASE = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
local record = cjson.decode(current)
if record['replica'] ~= ARGV[2] or tonumber(record['epoch']) ~= tonumber(ARGV[3]) then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[4], ARGV[1])
return 1
"""
# Re-claim after Redis lost the record (a restart): KEYS: owners, epochs; ARGV: relay id, full
# record, epoch, channel → 1 kept or restored, 0 when a newer epoch owns the relay.
_RENEW = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current then
  local record = cjson.decode(current)
  if tonumber(record['epoch']) > tonumber(ARGV[3]) then return 0 end
  if tonumber(record['epoch']) == tonumber(ARGV[3]) then return 1 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if last < tonumber(ARGV[3]) then redis.call('HSET', KEYS[2], ARGV[1], ARGV[3]) end
redis.call('PUBLISH', ARGV[4], ARGV[1])
return 1
"""


@dataclass(frozen=True)
class Owner:
    """Which replica holds a relay's connection, since which epoch."""

    relay_id: RelayId
    replica: str
    url: str
    epoch: int
    capabilities: frozenset[str]

    def record(self) -> str:
        return json.dumps(
            {
                "replica": self.replica,
                "url": self.url,
                "epoch": self.epoch,
                "capabilities": sorted(self.capabilities),
            }
        )


def parse_owner(relay_id: str, raw: bytes | str) -> Owner | None:
    try:
        data: Any = json.loads(raw)
        caps = data.get("capabilities") or []
        return Owner(
            RelayId(relay_id),
            str(data["replica"]),
            str(data["url"]),
            int(data["epoch"]),
            frozenset(str(c) for c in caps) if isinstance(caps, list) else frozenset(),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Ownership:
    """The Redis side of the cluster: replica liveness and relay owners."""

    def __init__(self, client: redis.Redis, replica_id: str, url: str, dead_after_s: float):
        self.client = client
        self.replica_id = replica_id
        self.url = url
        self._ttl_ms = max(1, int(dead_after_s * 1000))
        self._claim = client.register_script(_CLAIM)
        self._release = client.register_script(_RELEASE)
        self._renew = client.register_script(_RENEW)

    async def heartbeat(self) -> None:
        """Say this replica is alive (and registered) for another ``dead_after_s``."""
        pipe = self.client.pipeline(transaction=False)
        pipe.set(PREFIX + "replica:" + self.replica_id, self.url, px=self._ttl_ms)
        pipe.sadd(REPLICAS, self.replica_id)
        await pipe.execute()

    async def leave(self) -> None:
        await self.client.delete(PREFIX + "replica:" + self.replica_id)
        await self.client.srem(REPLICAS, self.replica_id)

    async def claim(self, relay_id: RelayId, capabilities: frozenset[str]) -> int:
        """Own ``relay_id`` from now on; the epoch of this claim."""
        record = json.dumps(
            {"replica": self.replica_id, "url": self.url, "capabilities": sorted(capabilities)}
        )
        epoch = await self._claim(keys=[OWNERS, EPOCHS], args=[relay_id, record, CHANGED])
        return int(epoch)

    async def release(self, owner: Owner) -> bool:
        """Forget ``owner`` unless a newer epoch (or another replica) owns the relay since."""
        args: list[str | int] = [owner.relay_id, owner.replica, owner.epoch, CHANGED]
        return bool(await self._release(keys=[OWNERS], args=args))

    async def release_all(self, owners: list[Owner]) -> list[bool]:
        """:meth:`release` of each of ``owners``, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for owner in owners:
            args: list[str | int] = [owner.relay_id, owner.replica, owner.epoch, CHANGED]
            await self._release(keys=[OWNERS], args=args, client=pipe)
        return [bool(done) for done in await pipe.execute()]

    async def renew(self, owners: Iterable[Owner]) -> list[Owner]:
        """Restore missing records of ``owners``; return those a newer epoch superseded."""
        owners = list(owners)
        if not owners:
            return []
        current = await self.client.hmget(OWNERS, [o.relay_id for o in owners])
        lost: list[Owner] = []
        for owner, raw in zip(owners, current, strict=True):
            seen = parse_owner(owner.relay_id, raw) if raw is not None else None
            if seen is not None and (seen.replica, seen.epoch) == (owner.replica, owner.epoch):
                continue
            args: list[str | int] = [owner.relay_id, owner.record(), owner.epoch, CHANGED]
            if not await self._renew(keys=[OWNERS, EPOCHS], args=args):
                lost.append(owner)
        return lost

    async def owner(self, relay_id: RelayId) -> Owner | None:
        raw = await self.client.hget(OWNERS, relay_id)
        return parse_owner(relay_id, raw) if raw is not None else None

    async def owners(self) -> dict[RelayId, Owner]:
        raw = await self.client.hgetall(OWNERS)
        parsed = (parse_owner(_text(k), v) for k, v in raw.items())
        return {o.relay_id: o for o in parsed if o is not None}

    async def replica_urls(self) -> dict[str, str]:
        """The live replicas and the internal address of each."""
        members = [_text(m) for m in await self.client.smembers(REPLICAS)]
        if not members:
            return {}
        urls = await self.client.mget([PREFIX + "replica:" + m for m in members])
        return {m: _text(url) for m, url in zip(members, urls, strict=True) if url is not None}

    async def replica_url(self, replica: str) -> str | None:
        """The internal address of ``replica`` while it lives."""
        url = await self.client.get(PREFIX + "replica:" + replica)
        return _text(url) if url is not None else None

    async def alive_replicas(self) -> set[str]:
        return set(await self.replica_urls())

    async def dead_replicas(self) -> set[str]:
        members = {_text(m) for m in await self.client.smembers(REPLICAS)}
        return members - await self.alive_replicas()

    async def take_reaping(self, replica: str) -> bool:
        """One replica reaps a dead one: the first to take this short lock."""
        key = PREFIX + "reaping:" + replica
        return bool(await self.client.set(key, self.replica_id, nx=True, px=self._ttl_ms * 2))

    async def forget_replica(self, replica: str) -> None:
        await self.client.srem(REPLICAS, replica)
