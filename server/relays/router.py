"""``RelayRouter``: how a request or a byte stream reaches a relay, wherever it is connected.

Two implementations side by side, chosen in one place (:func:`server.cluster.build.routing`):
:class:`server.relays.hub.RelayHub` for one process (the relay's link is here or nowhere), and
:class:`server.cluster.router.ClusterRouter` for several replicas sharing Redis (a relay held by
another replica is reached through that replica's internal channel). Callers see one interface.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from wire.errors import ChannelCloseCode
from wire.frames import Payload
from wire.ids import RelayId

if TYPE_CHECKING:
    from server.relays.hub import RelayObserver


class RelayChannel(Protocol):
    """An ordered byte stream to one relay-side target, flow-controlled end to end."""

    async def read(self) -> Payload:
        """Next chunk; raises ``ChannelClosedError`` once closed and drained."""
        ...

    async def write(self, data: Payload) -> None:
        """Send ``data``, waiting while the far end cannot take more."""
        ...

    async def close(
        self, code: ChannelCloseCode = ..., reason: str = ..., *, tell_peer: bool = ...
    ) -> None:
        """Close (idempotent)."""
        ...


class RelayEndpoint(Protocol):
    """One relay, reachable for channels."""

    async def open_channel(
        self, target: dict[str, Any], timeout_s: float = ...
    ) -> RelayChannel: ...


class RelayRouter(Protocol):
    """Every server part that talks to relays does it through this."""

    def add_observer(self, observer: RelayObserver) -> None:
        """Hear about relays connecting to, and leaving, this process."""
        ...

    def is_connected(self, relay_id: RelayId) -> bool: ...

    def capabilities(self, relay_id: RelayId) -> frozenset[str]: ...

    def get(self, relay_id: RelayId) -> RelayEndpoint:
        """The relay, or ``relay_unreachable``."""
        ...

    async def request(
        self,
        relay_id: RelayId,
        op: str,
        args: dict[str, Any] | None = None,
        timeout_s: float = ...,
    ) -> Any: ...
