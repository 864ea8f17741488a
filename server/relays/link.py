"""Server end of one relay connection: the shared driver (``wire.link``) plus what only the
server does: name the relay, remember what it may use, open channels to its targets, and close
its transport when the links say so."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from server.relays.channel import ServerChannel, open_channel
from wire import ops
from wire.connection import Connection
from wire.ids import RelayId
from wire.link import AnswerRequest, Link, SendFrame
from wire.messages import Event

EventHandler = Callable[[RelayId, Event], Awaitable[None]]
CloseTransport = Callable[[int, str], Awaitable[None]]


class RelayLink(Link):
    """One authenticated relay connection, seen from the server."""

    peer: ClassVar[str] = "relay"

    def __init__(
        self,
        relay_id: RelayId,
        connection: Connection,
        send: SendFrame,
        *,
        capabilities: frozenset[str],
        close_transport: CloseTransport,
        on_event: EventHandler,
        on_request: AnswerRequest,
    ) -> None:
        async def hear(event: Event) -> None:
            await on_event(relay_id, event)

        super().__init__(connection, send, on_request=on_request, on_event=hear)
        self.relay_id = relay_id
        self.capabilities = capabilities
        self.close_transport = close_transport

    async def open_channel(self, target: dict[str, Any], timeout_s: float = 10.0) -> ServerChannel:
        """Open a relay channel to ``target`` (``ops.CHANNEL_OPEN``); the relay connects before
        it answers."""
        return await open_channel(self, ops.CHANNEL_OPEN.name, {"target": target}, timeout_s)

    async def shutdown(self, reason: str, channel_reason: str = "relay unreachable") -> None:
        await super().shutdown(reason, channel_reason)
