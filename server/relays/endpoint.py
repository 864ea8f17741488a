"""``GET /relay/v1/connect``: authenticate a relay, run the handshake, then pump frames."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from server.config import Settings
from server.db.records import RelayRecord
from server.db.store import Store
from server.relays.capabilities import granted_capabilities
from server.relays.hub import RelayHub
from server.relays.link import RelayLink
from wire import ops
from wire.connection import Connection, HelloReceived, Role
from wire.errors import CloseCode, ErrorCode, OpError, ProtocolError
from wire.ids import RelayId
from wire.link import SendFrame
from wire.messages import SUBPROTOCOL, Request, Welcome

log = logging.getLogger(__name__)

HELLO_TIMEOUT_S = 10.0


async def _server_ops(request: Request) -> Any:
    """Requests a relay may send the server."""
    if request.op == ops.PING.name:
        return {}
    raise OpError(ErrorCode.UNKNOWN_OP, f"unknown op {request.op[:64]!r}")


def _bearer(websocket: WebSocket) -> str:
    header = websocket.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _client(websocket: WebSocket) -> str:
    return websocket.client.host if websocket.client else "?"


def relay_route(store: Store, links: RelayHub, settings: Settings) -> WebSocketRoute:
    """``/relay/v1/connect``: relays that ``store`` knows join ``links``."""

    async def relay_connect(websocket: WebSocket) -> None:
        await serve_relay(websocket, store, links, settings)

    return WebSocketRoute("/relay/v1/connect", relay_connect)


async def serve_relay(
    websocket: WebSocket, store: Store, links: RelayHub, settings: Settings
) -> None:
    """The relay WebSocket endpoint."""
    if SUBPROTOCOL not in websocket.scope.get("subprotocols", []):
        await websocket.close(CloseCode.UNSUPPORTED_PROTOCOL, f"subprotocol {SUBPROTOCOL} required")
        return
    token = _bearer(websocket)
    relay = await store.authenticate_relay(token) if token else None
    await websocket.accept(subprotocol=SUBPROTOCOL)
    if relay is None:
        log.warning(
            "relay connection refused: unknown or revoked token from %s", _client(websocket)
        )
        await websocket.close(CloseCode.UNAUTHORIZED, "unknown or revoked relay token")
        return
    connection = Connection(
        Role.SERVER, max_text=settings.max_text_frame, max_payload=settings.max_channel_frame
    )
    try:
        await _serve(websocket, connection, relay, token, links, settings)
    except ProtocolError as err:
        log.warning("relay %s broke the protocol: %s", relay.name, err.message)
        await _close(websocket, err.close_code, err.message)


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    try:
        await websocket.close(code, reason[:120])
    except (RuntimeError, OSError):
        log.debug("websocket already closed")


async def receive_events(websocket: WebSocket, connection: Connection) -> list[Any] | None:
    """What the next frame from ``websocket`` means to ``connection``; ``None`` once closed."""
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        return None
    if message.get("text") is not None:
        return list(connection.receive_text(message["text"]))
    return list(connection.receive_bytes(message.get("bytes") or b""))


def frame_sender(websocket: WebSocket) -> SendFrame:
    """Writes one frame of a ``Connection`` to ``websocket``."""

    async def send(frame: str | bytes) -> None:
        if isinstance(frame, str):
            await websocket.send_text(frame)
        else:
            await websocket.send_bytes(frame)

    return send


async def _handshake(websocket: WebSocket, connection: Connection) -> HelloReceived | None:
    try:
        async with asyncio.timeout(HELLO_TIMEOUT_S):
            events = await receive_events(websocket, connection)
    except TimeoutError:
        raise ProtocolError(
            f"no hello within {HELLO_TIMEOUT_S:g} s", CloseCode.HELLO_EXPECTED
        ) from None
    if not events:
        return None
    first = events[0]
    assert isinstance(first, HelloReceived)
    return first


async def _serve(
    websocket: WebSocket,
    connection: Connection,
    relay: RelayRecord,
    token: str,
    links: RelayHub,
    settings: Settings,
) -> None:
    hello = await _handshake(websocket, connection)
    if hello is None:
        return
    relay_id = RelayId(relay.relay_id)

    async def close_transport(code: int, reason: str) -> None:
        await _close(websocket, code, reason)

    link = RelayLink(
        relay_id,
        connection,
        frame_sender(websocket),
        capabilities=granted_capabilities(relay, hello.hello.capabilities),
        close_transport=close_transport,
        on_event=links.dispatch_event,
        on_request=_server_ops,
    )
    connection.accept(
        Welcome(relay_id, settings.heartbeat_s, settings.max_channel_frame, settings.max_text_frame)
    )
    await link.flush()
    reason = "disconnected"
    try:
        # Inside the ``try``: a registration that fails half way (its observers store what the
        # hello said) still unregisters the link instead of leaving it connected in name only.
        await links.register(link, hello.hello, token)
        log.info("relay %s connected (version %s)", relay_id, hello.hello.relay_version)
        while (events := await receive_events(websocket, connection)) is not None:
            await link.handle(events)
    except WebSocketDisconnect:
        pass
    except ProtocolError as err:
        reason = f"protocol error: {err.message}"
        raise
    finally:
        await link.hear_out()  # while the relay still counts as connected here
        await links.unregister(link)
        await link.shutdown(reason)
        log.info("relay %s %s", relay_id, reason)
