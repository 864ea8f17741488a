"""Reaching relays for noVNC's files when the server has no tree of its own."""

from __future__ import annotations

from typing import Any, Protocol

from server.relays.router import RelayRouter
from wire.ids import RelayId

ASSET_TIMEOUT_S = 5.0


class RelayList(Protocol):
    async def list_relays(self) -> list[Any]: ...


class HubAssetRelays:
    """Connected relays (by the store's relay list) that announce a capability."""

    def __init__(self, hub: RelayRouter, store: RelayList) -> None:
        self._hub = hub
        self._store = store

    async def connected_with(self, capability: str) -> list[RelayId]:
        relays = await self._store.list_relays()
        ids = [RelayId(relay.relay_id) for relay in relays]
        return [
            r for r in ids if self._hub.is_connected(r) and capability in self._hub.capabilities(r)
        ]

    async def request(self, relay_id: RelayId, op: str, args: dict[str, Any]) -> Any:
        return await self._hub.request(relay_id, op, args, ASSET_TIMEOUT_S)
