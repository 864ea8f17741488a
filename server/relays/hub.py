"""Which relays are connected, and how to reach them (the in-process ``RelayRouter``).

One server process holds the live links of the relays connected to it. A newer authenticated
connection for the same relay replaces the older one at once (closed with 4009, not waited
for). Observers (the inventory) hear about connects, disconnects and events.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from server.relays.link import RelayLink
from server.tasks import cancel_and_wait
from wire.errors import CloseCode, ErrorCode, OpError
from wire.ids import RelayId
from wire.messages import Event, Hello

log = logging.getLogger(__name__)


PRESENCE_INTERVAL_S = 10.0


class RelayObserver(Protocol):
    """Hears what relays say about themselves (implemented by the inventory)."""

    async def relay_connected(self, relay_id: RelayId, hello: Hello) -> None: ...

    async def relay_disconnected(self, relay_id: RelayId) -> None: ...

    async def relay_event(self, relay_id: RelayId, event: Event) -> None: ...


class PresenceStore(Protocol):
    async def set_relay_presence(
        self,
        relay_id: str,
        *,
        connected: bool,
        relay_version: str | None = None,
        protocol_version: int | None = None,
        capabilities: list[str] | None = None,
    ) -> None: ...

    async def touch_relays(self, relay_ids: list[str]) -> list[str]: ...

    async def authenticate_relay(self, token: str) -> Any: ...


class RelayHub:
    """Live relay links of this server process."""

    def __init__(self, store: PresenceStore) -> None:
        self._store = store
        self._links: dict[RelayId, RelayLink] = {}
        # The token each live link authenticated with: re-checked with presence, so a revoked
        # or rotated token ends its connection (4010) within one presence interval.
        self._tokens: dict[RelayLink, str] = {}
        self._observers: list[RelayObserver] = []
        self._lock = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()  # replaced links being closed

    def add_observer(self, observer: RelayObserver) -> None:
        self._observers.append(observer)

    def is_connected(self, relay_id: RelayId) -> bool:
        return relay_id in self._links

    def get(self, relay_id: RelayId) -> RelayLink:
        """The live link of ``relay_id`` or ``relay_unreachable``."""
        link = self._links.get(relay_id)
        if link is None or link.closed.is_set():
            raise OpError(ErrorCode.RELAY_UNREACHABLE, "relay is not connected")
        return link

    def capabilities(self, relay_id: RelayId) -> frozenset[str]:
        link = self._links.get(relay_id)
        return link.capabilities if link else frozenset()

    @property
    def connected_count(self) -> int:
        return len(self._links)

    def connected_ids(self) -> list[RelayId]:
        """The relays connected to this replica."""
        return list(self._links)

    async def request(
        self,
        relay_id: RelayId,
        op: str,
        args: dict[str, Any] | None = None,
        timeout_s: float = 30.0,
    ) -> Any:
        return await self.get(relay_id).request(op, args, timeout_s)

    async def register(self, link: RelayLink, hello: Hello, token: str) -> None:
        """Make ``link`` (authenticated by ``token``) the relay's live connection, replacing an
        older one."""
        async with self._lock:
            old = self._links.get(link.relay_id)
            self._links[link.relay_id] = link
            self._tokens[link] = token
        if old is not None and old is not link:
            log.info("relay %s reconnected: replacing the older connection", link.relay_id)
            self._close_replaced(old)
        await self._store.set_relay_presence(
            link.relay_id,
            connected=True,
            relay_version=hello.relay_version,
            protocol_version=hello.protocol,
            capabilities=list(hello.capabilities),
        )
        for observer in self._observers:
            await observer.relay_connected(link.relay_id, hello)

    def _close_replaced(self, old: RelayLink) -> None:
        """Close the older connection (4009) without waiting for it: the newer one serves from
        now on, and the older may be a dead TCP connection (its relay killed, a half-open
        path) that would answer nothing before the liveness timeout."""
        self._tokens.pop(old, None)

        async def close() -> None:
            await old.close_transport(CloseCode.REPLACED, "replaced by a newer connection")

        task = asyncio.create_task(close(), name=f"close-replaced-{old.relay_id}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def unregister(self, link: RelayLink) -> None:
        """Forget ``link`` if it is still the live one, and record the relay as gone."""
        async with self._lock:
            self._tokens.pop(link, None)
            current = self._links.get(link.relay_id) is link
            if current:
                del self._links[link.relay_id]
        if not current:
            return
        await self._store.set_relay_presence(link.relay_id, connected=False)
        for observer in self._observers:
            await observer.relay_disconnected(link.relay_id)

    async def hand_over(self, relay_id: RelayId) -> None:
        """A newer connection of the relay is held by another replica: close ours (4009)
        without recording the relay gone, since it is not."""
        async with self._lock:
            link = self._links.pop(relay_id, None)
            if link is not None:
                self._tokens.pop(link, None)
        if link is not None:
            await link.close_transport(CloseCode.REPLACED, "replaced by a newer connection")

    async def forget_remote(self, relay_id: RelayId) -> None:
        """A relay held by a replica that died: record it gone, as if it disconnected here."""
        if relay_id in self._links:
            return
        await self._store.set_relay_presence(relay_id, connected=False)
        for observer in self._observers:
            await observer.relay_disconnected(relay_id)

    async def dispatch_event(self, relay_id: RelayId, event: Event) -> None:
        for observer in self._observers:
            try:
                await observer.relay_event(relay_id, event)
            except Exception:
                log.exception("observer failed on %s from relay %s", event.name, relay_id)

    async def keep_presence(self, interval_s: float = PRESENCE_INTERVAL_S) -> None:
        """Record live relays present and drop those whose token was revoked, every interval."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                revoked = await self.record_presence()
            except Exception:
                log.exception("could not record relay presence")
                continue
            for relay_id in revoked:
                if link := self._links.get(RelayId(relay_id)):
                    await self._revoked(link)
            await self.recheck_tokens()

    async def record_presence(self) -> list[str]:
        """Record the live relays seen and connected (undoing a replica that recorded one gone
        as it reconnected here); return those whose token was revoked. A relay that
        disconnected meanwhile is recorded gone again, after that write."""
        live: list[str] = list(self._links)
        revoked = await self._store.touch_relays(live)
        for relay_id in live:
            if relay_id not in self._links:
                await self._store.set_relay_presence(relay_id, connected=False)
        return revoked

    async def recheck_tokens(self) -> None:
        """Close every live link whose token no longer authenticates it (revoked or rotated).

        All are asked at once, so the store answers them in a few batched queries: one query
        per link, one after the other, took longer than the presence interval with thousands
        of relays connected."""
        links = list(self._tokens.items())
        answers = await asyncio.gather(
            *(self._store.authenticate_relay(token) for _, token in links), return_exceptions=True
        )
        for (link, _), relay in zip(links, answers, strict=True):
            if isinstance(relay, BaseException):
                log.error("could not re-check relay %s's token", link.relay_id, exc_info=relay)
                return
            if link in self._tokens and (relay is None or relay.relay_id != link.relay_id):
                await self._revoked(link)

    async def _revoked(self, link: RelayLink) -> None:
        log.warning("relay %s: token revoked or rotated; closing its connection", link.relay_id)
        self._tokens.pop(link, None)
        await link.close_transport(CloseCode.RELAY_REVOKED, "relay token revoked")

    async def close_all(self, reason: str) -> None:
        """Shutdown: close every relay connection with ``going away``."""
        for link in list(self._links.values()):
            await link.close_transport(CloseCode.GOING_AWAY, reason)
        await cancel_and_wait(*self._closing)
