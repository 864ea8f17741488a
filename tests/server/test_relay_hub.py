"""``RelayHub``: a newer connection of a relay replaces the older one at once, even when the
older one is a dead TCP connection that never answers (its relay process was SIGKILLed)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any, cast

import pytest

from server.relays.hub import RelayHub
from server.relays.link import RelayLink
from wire.errors import CloseCode
from wire.ids import RelayId
from wire.messages import Event, Hello

pytestmark = pytest.mark.unit

RELAY = RelayId("relay-1")


class Presence:
    """The store's presence calls, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []
        self.during_touch: Callable[[], Awaitable[None]] | None = None

    async def set_relay_presence(self, relay_id: str, *, connected: bool, **_: Any) -> None:
        self.calls.append((relay_id, connected))

    async def touch_relays(self, relay_ids: list[str]) -> list[str]:
        self.calls.extend((relay_id, True) for relay_id in relay_ids)
        if self.during_touch is not None:
            await self.during_touch()
        return []

    async def authenticate_relay(self, token: str) -> Any:
        return None


class Observer:
    def __init__(self) -> None:
        self.heard: list[str] = []

    async def relay_connected(self, relay_id: RelayId, hello: Hello) -> None:
        self.heard.append(f"connected {relay_id}")

    async def relay_disconnected(self, relay_id: RelayId) -> None:
        self.heard.append(f"disconnected {relay_id}")

    async def relay_event(self, relay_id: RelayId, event: Event) -> None:
        return None


class FakeLink:
    """A relay link; ``dead``: its transport is gone without a word, closing it never ends."""

    def __init__(self, *, dead: bool = False, relay_id: RelayId = RELAY) -> None:
        self.dead = dead
        self.relay_id = relay_id
        self.closed = asyncio.Event()
        self.close_codes: list[int] = []
        self.capabilities: frozenset[str] = frozenset()

    async def close_transport(self, code: int, reason: str) -> None:
        self.close_codes.append(code)
        if self.dead:
            await asyncio.Event().wait()


def _hello() -> Hello:
    return Hello(protocol=1, relay_version="test")


async def test_a_new_hello_replaces_a_dead_link_at_once() -> None:
    presence, observer = Presence(), Observer()
    hub = RelayHub(presence)
    hub.add_observer(observer)
    old, new = FakeLink(dead=True), FakeLink()
    await hub.register(cast(RelayLink, old), _hello(), "token")

    # Not waited on: the older connection answers nothing, yet the new one serves at once.
    await hub.register(cast(RelayLink, new), _hello(), "token")
    assert hub.get(RELAY) is cast(RelayLink, new)
    assert observer.heard == [f"connected {RELAY}", f"connected {RELAY}"]
    await asyncio.sleep(0)  # let the close of the older connection begin
    assert old.close_codes == [CloseCode.REPLACED]

    # The older connection ending later does not mark the relay gone.
    await hub.unregister(cast(RelayLink, old))
    assert hub.is_connected(RELAY)
    assert presence.calls == [(RELAY, True), (RELAY, True)]
    await hub.close_all("test over")  # also ends the close still waiting on the dead link
    assert new.close_codes == [CloseCode.GOING_AWAY]


async def test_live_relays_are_recorded_connected_and_one_gone_meanwhile_stays_gone() -> None:
    presence = Presence()
    hub = RelayHub(presence)
    link = FakeLink()
    await hub.register(cast(RelayLink, link), _hello(), "token")
    presence.calls.clear()
    assert await hub.record_presence() == []
    assert presence.calls == [(RELAY, True)]  # connected, even if a reaper recorded it gone

    async def disconnects() -> None:
        await hub.unregister(cast(RelayLink, link))

    presence.calls.clear()
    presence.during_touch = disconnects
    await hub.record_presence()
    assert presence.calls[-1] == (RELAY, False)  # whichever write landed last, it is gone


class Tokens(Presence):
    """Relay tokens: each authenticates the relay named after it, unless revoked."""

    def __init__(self, revoked: set[str]) -> None:
        super().__init__()
        self.revoked = revoked
        self.asking = self.most_at_once = 0

    async def authenticate_relay(self, token: str) -> Any:
        self.asking += 1
        self.most_at_once = max(self.most_at_once, self.asking)
        await asyncio.sleep(0)  # a query's round trip
        self.asking -= 1
        return None if token in self.revoked else SimpleNamespace(relay_id=RelayId(token))


async def test_tokens_are_rechecked_all_at_once_and_revoked_ones_closed() -> None:
    store = Tokens(revoked={"relay-2"})
    hub = RelayHub(store)
    links = {name: FakeLink(relay_id=RelayId(name)) for name in ("relay-1", "relay-2", "relay-3")}
    for name, link in links.items():
        await hub.register(cast(RelayLink, link), _hello(), name)
    await hub.recheck_tokens()
    assert store.most_at_once == len(links)  # one batch for the store, not one query each
    assert {name: link.close_codes for name, link in links.items()} == {
        "relay-1": [],
        "relay-2": [CloseCode.RELAY_REVOKED],
        "relay-3": [],
    }
