"""``ClusterRouter``: the ``RelayRouter`` of a replica among several (``RELAYDESK_REDIS_URL``).

A relay connected here is served by the local :class:`RelayHub` exactly as on one machine. A
relay held by another live replica is reached through that replica (``server.cluster.peers``);
when it answers "not owner", ownership is read again from Redis and the call retried once.
Ownership is cached here and kept current by the ``owners-changed`` channel and a full refresh
every few heartbeats, so ``is_connected`` and ``capabilities`` stay synchronous.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisError

from server.cluster.channel import FORWARD_KINDS, ForwardKind, NotOwner
from server.cluster.ownership import CHANGED, Owner, Ownership
from server.cluster.peers import Peers
from server.cluster.signing import ClusterSigner
from server.instruments import redis_error
from server.relays.hub import RelayHub, RelayObserver
from server.relays.router import RelayChannel, RelayEndpoint
from server.tasks import cancel_and_wait, stop_if_cancelled
from wire.errors import ErrorCode, OpError
from wire.ids import RelayId
from wire.messages import Event, Hello

log = logging.getLogger(__name__)

Orphaned = Callable[[RelayId], Awaitable[None]]

# Every this many refreshes (heartbeats) the owner records are read in full: thousands of them
# are a noticeable read, and pub/sub keeps the cache current in between.
OWNERS_EVERY = 3
# A dead replica's relays whose rows are marked ``unknown`` at once.
REAP_AT_ONCE = 32


def _unreachable() -> OpError:
    return OpError(ErrorCode.RELAY_UNREACHABLE, "relay is not connected")


class RemoteRelay:
    """A relay held by another replica: channels open there."""

    def __init__(self, router: ClusterRouter, relay_id: RelayId) -> None:
        self._router = router
        self._relay_id = relay_id

    async def open_channel(self, target: dict[str, Any], timeout_s: float = 10.0) -> RelayChannel:
        return await self._router.open_remote_channel(self._relay_id, target, timeout_s)


class ClusterRouter:
    """Routes to this replica's links or to the owner replica."""

    def __init__(
        self,
        links: RelayHub,
        ownership: Ownership,
        peers: Peers,
        *,
        heartbeat_s: float,
        on_orphaned: Orphaned,
        signer: ClusterSigner,
    ) -> None:
        self.links = links
        self.signer = signer
        self.ownership = ownership
        self.peers = peers
        self._heartbeat_s = heartbeat_s
        self._on_orphaned = on_orphaned
        self._owners: dict[RelayId, Owner] = {}
        self._alive: set[str] = {ownership.replica_id}
        # live replica id -> its internal address (refreshed with ``_alive``)
        self._replicas: dict[str, str] = {}
        self.mine: dict[RelayId, Owner] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._reaping: set[asyncio.Task[None]] = set()
        self._owners_due = 0  # refreshes until the owners are read in full again
        self.forwarded: dict[ForwardKind, int] = dict.fromkeys(FORWARD_KINDS, 0)
        links.add_observer(self)

    def add_observer(self, observer: RelayObserver) -> None:
        """Observers hear about relays connecting to this replica."""
        self.links.add_observer(observer)

    @property
    def owned_count(self) -> int:
        """Relays held by live replicas (this one included), per the cache."""
        return sum(1 for o in self._owners.values() if o.replica in self._alive)

    async def redis_ok(self) -> bool:
        try:
            return bool(await self.ownership.client.ping())
        except RedisError:
            redis_error("cluster")
            return False

    @property
    def replica_id(self) -> str:
        return self.ownership.replica_id

    async def replica_url(self, replica: str) -> str | None:
        """Where live replica ``replica`` answers; ``None`` when it is dead or unknown. Read
        from Redis when the cache does not know it (it started since the last heartbeat)."""
        url = self._replicas.get(replica)
        if url is not None:
            return url
        try:
            url = await self.ownership.replica_url(replica)
        except RedisError:
            redis_error("cluster")
            log.warning("could not read replica %s's address", replica, exc_info=True)
            return None
        if url is not None:
            self._replicas[replica] = url
        return url

    def _live_replicas(self, replicas: dict[str, str]) -> None:
        self._replicas = replicas
        self._alive = set(replicas) | {self.replica_id}

    # -- RelayRouter ---------------------------------------------------------------------------

    def _remote(self, relay_id: RelayId) -> Owner | None:
        owner = self._owners.get(relay_id)
        if owner is None or owner.replica == self.replica_id or owner.replica not in self._alive:
            return None
        return owner

    def is_connected(self, relay_id: RelayId) -> bool:
        return self.links.is_connected(relay_id) or self._remote(relay_id) is not None

    def capabilities(self, relay_id: RelayId) -> frozenset[str]:
        if self.links.is_connected(relay_id):
            return self.links.capabilities(relay_id)
        owner = self._remote(relay_id)
        return owner.capabilities if owner else frozenset()

    def get(self, relay_id: RelayId) -> RelayEndpoint:
        if self.links.is_connected(relay_id):
            return self.links.get(relay_id)
        if self._remote(relay_id) is None:
            raise _unreachable()
        return RemoteRelay(self, relay_id)

    async def request(
        self,
        relay_id: RelayId,
        op: str,
        args: dict[str, Any] | None = None,
        timeout_s: float = 30.0,
    ) -> Any:
        if self.links.is_connected(relay_id):
            return await self.links.request(relay_id, op, args, timeout_s)
        owner = self._remote(relay_id)
        for attempt in (1, 2):
            if owner is None:
                raise _unreachable()
            self.forwarded["request"] += 1
            try:
                return await self.peers.request(owner, op, args, timeout_s)
            except NotOwner as err:
                log.info("relay %s: %s (attempt %d)", relay_id, err, attempt)
            owner = await self._reread(relay_id, owner)
            if owner is None and self.links.is_connected(relay_id):
                return await self.links.request(relay_id, op, args, timeout_s)
        raise _unreachable()

    async def open_remote_channel(
        self, relay_id: RelayId, target: dict[str, Any], timeout_s: float
    ) -> RelayChannel:
        owner = self._remote(relay_id)
        for _attempt in (1, 2):
            if owner is None:
                break
            self.forwarded["channel"] += 1
            try:
                return await self.peers.open_channel(owner, target, timeout_s)
            except NotOwner as err:
                log.info("relay %s channel: %s", relay_id, err)
            owner = await self._reread(relay_id, owner)
            if owner is None and self.links.is_connected(relay_id):
                return await self.links.get(relay_id).open_channel(target, timeout_s)
        raise _unreachable()

    async def _reread(self, relay_id: RelayId, stale: Owner) -> Owner | None:
        """The owner per Redis now; ``None`` when it is still ``stale`` or there is none."""
        try:
            fresh = await self.ownership.owner(relay_id)
            self._live_replicas(await self.ownership.replica_urls())
        except RedisError:
            redis_error("cluster")
            log.warning("could not re-read relay %s's owner", relay_id, exc_info=True)
            return None
        self._store_owner(relay_id, fresh)
        owner = self._remote(relay_id)
        if owner is None or (owner.replica, owner.epoch) == (stale.replica, stale.epoch):
            return None
        return owner

    def local_epoch(self, relay_id: RelayId) -> int | None:
        owner = self.mine.get(relay_id)
        return owner.epoch if owner and self.links.is_connected(relay_id) else None

    # -- RelayObserver: claim and release what connects here ----------------------------------

    async def relay_connected(self, relay_id: RelayId, hello: Hello) -> None:
        caps = self.links.capabilities(relay_id)
        try:
            epoch = await self.ownership.claim(relay_id, caps)
        except RedisError:
            redis_error("cluster")
            log.exception("could not record that relay %s is held here", relay_id)
            epoch = 0
        owner = Owner(relay_id, self.replica_id, self.ownership.url, epoch, caps)
        self.mine[relay_id] = owner
        self._owners[relay_id] = owner

    async def relay_disconnected(self, relay_id: RelayId) -> None:
        owner = self.mine.pop(relay_id, None)
        if owner is None:
            return
        if self._owners.get(relay_id) == owner:
            del self._owners[relay_id]
        try:
            await self.ownership.release(owner)
        except RedisError:
            redis_error("cluster")

    async def relay_event(self, relay_id: RelayId, event: Event) -> None:
        return None

    # -- background: heartbeat, refresh, reaping, change notices ------------------------------

    def start(self) -> None:
        """Heartbeat, refresh and hear owner changes until :meth:`stop`. The heartbeat has a
        loop of its own: a refresh or a reap that takes long (thousands of relays moving) must
        never make the others take this replica for dead."""
        self._tasks = [
            asyncio.create_task(
                self._every(self.ownership.heartbeat, "heartbeat"), name="cluster-heartbeat"
            ),
            asyncio.create_task(self._every(self._refresh, "refresh"), name="cluster-refresh"),
            asyncio.create_task(self._listen_forever(), name="cluster-owners"),
        ]

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks, *self._reaping)
        for owner in list(self.mine.values()):
            with contextlib.suppress(RedisError):
                await self.ownership.release(owner)
        with contextlib.suppress(RedisError):
            await self.ownership.leave()
        await self.peers.close()

    async def beat(self) -> None:
        """One heartbeat and one refresh, in order (at start, before serving)."""
        await self.ownership.heartbeat()
        await self._refresh()

    async def _refresh(self) -> None:
        """Find the dead replicas (and start reaping them), keep our claims, refresh the cache
        of owners: in full every ``OWNERS_EVERY`` refreshes or when the live replicas changed
        (between, owner changes arrive through pub/sub). Cheapest first: a refresh that runs
        late under a storm of reconnections still sees the dead in time."""
        alive = set(self._alive)
        self._live_replicas(await self.ownership.replica_urls())
        for dead in await self.ownership.dead_replicas():
            if await self.ownership.take_reaping(dead):
                reaping = asyncio.create_task(self._reap_once(dead), name=f"cluster-reap-{dead}")
                self._reaping.add(reaping)
                reaping.add_done_callback(self._reaping.discard)
        for lost in await self.ownership.renew(self.mine.values()):
            await self._superseded(lost)
        self._owners_due -= 1
        if self._owners_due <= 0 or self._alive != alive:
            self._owners = await self.ownership.owners()
            for relay_id, owner in self.mine.items():
                self._owners.setdefault(relay_id, owner)
            self._owners_due = OWNERS_EVERY

    async def _every(self, step: Callable[[], Awaitable[None]], what: str) -> None:
        while True:
            try:
                await step()
            except RedisError:
                redis_error("cluster")
                log.warning("cluster %s failed (Redis unreachable?)", what, exc_info=True)
            except Exception:
                log.exception("cluster %s failed", what)
            stop_if_cancelled()
            await asyncio.sleep(self._heartbeat_s)

    async def _reap_once(self, replica: str) -> None:
        """:meth:`_reap`; a failure leaves the dead replica listed, for the next refresh."""
        try:
            await self._reap(replica)
        except RedisError:
            redis_error("cluster")
            log.warning("reaping replica %s failed (Redis unreachable?)", replica, exc_info=True)
        except Exception:
            log.exception("reaping replica %s failed", replica)

    async def _reap(self, replica: str) -> None:
        """A dead replica's relays: forget them (their rows go ``unknown``) unless re-owned.
        Released in one round trip, their rows marked ``REAP_AT_ONCE`` relays at a time."""
        held = [o for o in (await self.ownership.owners()).values() if o.replica == replica]
        log.warning("replica %s is dead; %d relays were held there", replica, len(held))
        released = await self.ownership.release_all(held)
        orphans = [o.relay_id for o, gone in zip(held, released, strict=True) if gone]
        for relay_id in orphans:
            self._owners.pop(relay_id, None)
        for start in range(0, len(orphans), REAP_AT_ONCE):
            await asyncio.gather(*map(self._orphaned, orphans[start : start + REAP_AT_ONCE]))
        await self.ownership.forget_replica(replica)

    async def _orphaned(self, relay_id: RelayId) -> None:
        try:
            await self._on_orphaned(relay_id)
        except Exception:
            log.exception("could not mark relay %s's desktops unknown", relay_id)

    async def _superseded(self, owner: Owner) -> None:
        """A newer connection of this relay is owned elsewhere: refuse further work here."""
        if self.mine.get(owner.relay_id) != owner:
            return
        log.info("relay %s: a newer epoch owns it; closing the connection here", owner.relay_id)
        del self.mine[owner.relay_id]
        await self.links.hand_over(owner.relay_id)

    def _store_owner(self, relay_id: RelayId, owner: Owner | None) -> None:
        if owner is None:
            self._owners.pop(relay_id, None)
        else:
            self._owners[relay_id] = owner

    async def _changed(self, relay_id: RelayId) -> None:
        owner = await self.ownership.owner(relay_id)
        self._store_owner(relay_id, owner)
        mine = self.mine.get(relay_id)
        if mine is not None and owner is not None and owner.epoch > mine.epoch:
            await self._superseded(mine)
        if owner is not None and owner.replica not in self._alive:
            self._alive.add(owner.replica)
            self._replicas.setdefault(owner.replica, owner.url)

    async def _listen_forever(self) -> None:
        while True:
            try:
                pubsub = self.ownership.client.pubsub(ignore_subscribe_messages=True)
                async with pubsub:
                    await pubsub.subscribe(CHANGED)
                    async for message in pubsub.listen():
                        data = message.get("data")
                        text = data.decode() if isinstance(data, bytes) else str(data)
                        await self._changed(RelayId(text))
                        stop_if_cancelled()
            except RedisError:
                redis_error("cluster")
                log.warning("owner change notices interrupted; resubscribing", exc_info=True)
                await asyncio.sleep(self._heartbeat_s)
