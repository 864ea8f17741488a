"""The answering side of the replica link: requests and channels for relays held here, and
screen calls on the revisions this replica issued (``server.cluster.screen``).

A calling replica opens one WebSocket (``LINK_PATH``) and keeps it. The route exists on every
replica but answers only when clustered, and only to an upgrade signed with the cluster secret
(``server.cluster.signing``) for this replica's own internal address, with a nonce no replica
has seen (``server.cluster.nonces``) and the caller's replica id; anything else is closed 4403
before a frame is read. Then this side speaks the relay protocol's relay role: a
``hello``, the caller's ``welcome``, and requests answered concurrently on the same link.

A relay not held here (or held under another epoch) is answered with a ``not_owner`` error, so
the caller re-reads ownership and retries once. A channel is spliced to the relay's channel:
bytes are read from one only when the other has credit for them, so both hops keep the relay
protocol's credit windows and bounded buffers, and a close passes on with its code and reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any, Final

from starlette.routing import BaseRoute, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from server.cluster.channel import (
    LINK_PATH,
    LINK_REPLICA,
    RELAY_CHANNEL,
    RELAY_REQUEST,
    SCREEN_CALL,
    not_owner_error,
)
from server.cluster.screen import caller_from
from server.config import Settings
from server.relays.channel import ServerChannel
from server.relays.endpoint import frame_sender, receive_events
from server.relays.router import RelayChannel
from server.screen.tool import ScreenTool
from wire.connection import Connection, Role, WelcomeReceived
from wire.errors import (
    ChannelCloseCode,
    ChannelClosedError,
    CloseCode,
    ErrorCode,
    OpError,
    ProtocolError,
)
from wire.ids import ChannelId, RelayId
from wire.link import Link
from wire.messages import PROTOCOL_VERSION, Hello, Request

if TYPE_CHECKING:
    from server.cluster.router import ClusterRouter

log = logging.getLogger(__name__)

WELCOME_TIMEOUT_S: Final = 10.0
# Calls one calling replica may have running here at once (each bounded by its own timeout).
MAX_CONCURRENT_CALLS: Final = 1024


def _bad(what: str) -> OpError:
    return OpError(ErrorCode.INVALID_ARGS, f"not a {what}")


class Answering:
    """What one calling replica asks of this one."""

    def __init__(self, cluster: ClusterRouter, screen: ScreenTool) -> None:
        self._cluster = cluster
        self._screen_tool = screen
        self.link: Link | None = None
        self._splices: set[asyncio.Task[None]] = set()

    async def answer(self, request: Request) -> Any:
        args = request.args
        try:
            if request.op == RELAY_REQUEST:
                return await self._relay_request(args)
            if request.op == RELAY_CHANNEL:
                return await self._relay_channel(args)
            if request.op == SCREEN_CALL:
                return await self._screen(args)
        except (KeyError, TypeError, ValueError):
            raise _bad(request.op) from None
        raise OpError(ErrorCode.UNKNOWN_OP, f"unknown op {request.op[:64]!r}")

    def _held(self, args: dict[str, Any]) -> RelayId:
        """The relay ``args`` name, if held here under their epoch; else ``not_owner``."""
        relay_id = RelayId(str(args["relay_id"]))
        local, epoch = self._cluster.local_epoch(relay_id), int(args.get("epoch") or 0)
        if local is None or (epoch and local != epoch):
            raise not_owner_error()
        return relay_id

    async def _relay_request(self, args: dict[str, Any]) -> Any:
        relay_id = self._held(args)
        call = args.get("args")
        return await self._cluster.links.request(
            relay_id,
            str(args["op"]),
            call if isinstance(call, dict) else None,
            float(args["timeout_s"]),
        )

    async def _relay_channel(self, args: dict[str, Any]) -> dict[str, Any]:
        relay_id, link = self._held(args), self.link
        assert link is not None
        channel_id, target = ChannelId(int(args["channel_id"])), args["target"]
        if not isinstance(target, dict) or link.connection.has_channel(channel_id):
            raise _bad(RELAY_CHANNEL)
        relay = await self._cluster.links.get(relay_id).open_channel(
            target, float(args["timeout_s"])
        )
        down = ServerChannel(channel_id, link)
        link.add_channel(down)
        splice = asyncio.create_task(_splice(relay, down), name=f"splice-{channel_id}")
        self._splices.add(splice)
        splice.add_done_callback(self._splices.discard)
        return {}

    async def _screen(self, args: dict[str, Any]) -> Any:
        caller, body = caller_from(args["caller"]), args["body"]
        if not isinstance(body, dict):
            raise _bad(SCREEN_CALL)
        return await self._screen_tool.run(caller, body, forwarded=True)

    async def stop(self) -> None:
        for splice in list(self._splices):
            splice.cancel()
        await asyncio.gather(*self._splices, return_exceptions=True)


async def _splice(relay: RelayChannel, down: ServerChannel) -> None:
    """Bytes both ways until one side closes; then both close with its code and reason."""
    try:
        await asyncio.gather(_pump(relay, down), _pump(down, relay))
    except asyncio.CancelledError:  # the link is going away
        await relay.close(ChannelCloseCode.VIEWER_GONE, "replica link closed")
        raise


async def _pump(source: RelayChannel, sink: RelayChannel) -> None:
    """``source`` to ``sink``, a chunk at a time: the next is read only once ``sink`` took the
    last one (it waits for the far end's credit)."""
    try:
        while True:
            await sink.write(await source.read())
    except ChannelClosedError as ended:
        for channel in (source, sink):
            await channel.close(ended.close_code, ended.reason)


async def _authorized(cluster: ClusterRouter, websocket: WebSocket) -> bool:
    """Signed with the cluster secret, for this replica's own address, with a nonce no
    replica has seen."""
    replica = websocket.headers.get(LINK_REPLICA, "")
    try:
        await cluster.signer.verify(
            "GET", LINK_PATH, websocket.headers, replica.encode(), target=cluster.ownership.url
        )
    except OpError as err:
        log.warning("replica link from %s refused: %s", replica[:32] or "?", err.message)
        return False
    return bool(replica)


async def replica_link(
    websocket: WebSocket, cluster: ClusterRouter | None, screen: ScreenTool, settings: Settings
) -> None:
    """The replica link endpoint: see the module docstring."""
    if cluster is None or not await _authorized(cluster, websocket):
        await websocket.close(CloseCode.VIEWER_FORBIDDEN, "cluster signature")
        return
    await websocket.accept()
    connection = Connection(
        Role.RELAY, max_text=settings.max_text_frame, max_payload=settings.max_channel_frame
    )
    answering = Answering(cluster, screen)
    link = answering.link = Link(
        connection,
        frame_sender(websocket),
        on_request=answering.answer,
        max_concurrency=MAX_CONCURRENT_CALLS,
    )
    replica = websocket.headers[LINK_REPLICA][:32]
    try:
        await _serve(
            websocket, connection, link, settings.max_channel_frame, settings.max_text_frame
        )
    except ProtocolError as err:
        log.warning("replica %s broke the protocol: %s", replica, err.message)
        with contextlib.suppress(RuntimeError, OSError):
            await websocket.close(err.close_code, err.message[:120])
    except TimeoutError:
        log.warning("replica %s sent no welcome within %g s", replica, WELCOME_TIMEOUT_S)
        with contextlib.suppress(RuntimeError, OSError):
            await websocket.close(CloseCode.HELLO_EXPECTED, "no welcome")
    finally:
        await link.shutdown(f"replica {replica} link closed")
        await answering.stop()


async def _serve(
    websocket: WebSocket, connection: Connection, link: Link, max_frame: int, max_text: int
) -> None:
    connection.send_hello(
        Hello(PROTOCOL_VERSION, "replica", max_frame=max_frame, max_text=max_text)
    )
    await link.flush()
    async with asyncio.timeout(WELCOME_TIMEOUT_S):
        events = await receive_events(websocket, connection)
    if not events or not isinstance(events[0], WelcomeReceived):
        return
    try:
        while (events := await receive_events(websocket, connection)) is not None:
            await link.handle(events)
    except WebSocketDisconnect:
        return


def internal_routes(
    cluster: ClusterRouter | None, screen: ScreenTool, settings: Settings
) -> list[BaseRoute]:
    """The replica link (refused on a server that runs alone: ``cluster`` is None)."""

    async def link(websocket: WebSocket) -> None:
        await replica_link(websocket, cluster, screen, settings)

    return [WebSocketRoute(LINK_PATH, link)]
