"""``RelayHub``: a newer connection of a relay replaces the older one at once, even when the
older one is a dead TCP connection that never answers (its relay process was SIGKILLed)."""

from __future__ import annotations

import asyncio
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

    async def set_relay_presence(self, relay_id: str, *, connected: bool, **_: Any) -> None:
        self.calls.append((relay_id, connected))

    async def touch_relays(self, relay_ids: list[str]) -> list[str]:
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

    def __init__(self, *, dead: bool = False) -> None:
        self.dead = dead
        self.relay_id = RELAY
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
