"""The connect stream: a WebSocket from the relay, bridged to the local desktop's websockify.

Only the websockify port of the desktop running right now is accepted (``?port=N``); the
helper itself dials its own loopback, so a caller can never use it to reach another port.
Closing the stream closes this bridge only, never the desktop.

x11vnc demands the desktop's VNC secret: the helper authenticates upstream itself, then offers
security type None to the relay's end of the stream (``wire.rfb``), then copies messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp
from aiohttp import web

from host_helper.desktop import LocalDesktops
from relay.desktops.probe import LOOPBACK, PROBE_ERRORS
from wire.errors import ErrorCode, InvalidArgs, OpError, RfbHandshakeError
from wire.rfb import NoneSecurityServer, VncClientHandshake

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
MAX_MESSAGE = 4 * 1024 * 1024


def requested_port(request: web.Request) -> int:
    raw = request.query.get("port", "")
    # ASCII only: str.isdigit() also accepts other scripts' digits, which int() would read.
    # At most five digits: int() of thousands of digits raises (and costs quadratic time).
    if not (len(raw) <= 5 and raw.isascii() and raw.isdigit()) or not 0 < int(raw) < 65536:
        raise InvalidArgs("port", "must be a TCP port number")
    return int(raw)


def check_port(desktops: LocalDesktops, port: int) -> bytes:
    """Port pinning: the current desktop's websockify port, nothing else; its VNC secret."""
    current = desktops.current
    if current is None:
        raise OpError(ErrorCode.NOT_RUNNING, "no local desktop is running")
    if port != current.websockify_port:
        log.warning("connect to port %d refused: not the local desktop's port", port)
        raise OpError(ErrorCode.FORBIDDEN, "only the running local desktop's port may be reached")
    return current.vnc_secret


Socket = web.WebSocketResponse | aiohttp.ClientWebSocketResponse


async def _binary(ws: Socket) -> bytes:
    message = await ws.receive()
    if message.type != aiohttp.WSMsgType.BINARY:
        raise RfbHandshakeError(f"the stream ended during the handshake ({message.type.name})")
    return bytes(message.data)


async def authenticate(upstream: aiohttp.ClientWebSocketResponse, secret: bytes) -> bytes:
    """VNC authentication to x11vnc; returns what x11vnc sent after it."""
    machine = VncClientHandshake(secret)
    while not machine.done:
        machine.receive_data(await _binary(upstream))
        if out := machine.data_to_send():
            await upstream.send_bytes(out)
    return machine.leftover


async def present_none(viewer: web.WebSocketResponse, server_leftover: bytes) -> bytes:
    """Security type None towards the relay's end; returns what it sent after the handshake."""
    machine = NoneSecurityServer()
    await viewer.send_bytes(machine.data_to_send())
    while not machine.done:
        machine.receive_data(await _binary(viewer))
        if out := machine.data_to_send():
            await viewer.send_bytes(out)
    if server_leftover:
        await viewer.send_bytes(server_leftover)
    return machine.leftover


async def _pump(source: Socket, sink: Socket) -> None:
    async for message in source:
        if message.type != aiohttp.WSMsgType.BINARY:
            break
        await sink.send_bytes(message.data)


async def bridge(viewer: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse) -> None:
    """Copy binary messages both ways until either side closes, then close both."""
    tasks = [
        asyncio.create_task(_pump(viewer, upstream), name="connect-up"),
        asyncio.create_task(_pump(upstream, viewer), name="connect-down"),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, *PROBE_ERRORS):
                await task
        await upstream.close()
        await viewer.close()


async def connect(request: web.Request, desktops: LocalDesktops) -> web.StreamResponse:
    """``GET /v1/local/connect?port=N`` (WebSocket)."""
    port = requested_port(request)
    secret = check_port(desktops, port)
    upstream, server_leftover = await _open_upstream(desktops, port, secret)
    viewer = web.WebSocketResponse(max_msg_size=MAX_MESSAGE)
    try:
        await viewer.prepare(request)
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            viewer_leftover = await present_none(viewer, server_leftover)
        if viewer_leftover:
            await upstream.send_bytes(viewer_leftover)
    except (RfbHandshakeError, *PROBE_ERRORS) as err:
        log.warning("connect stream ended during the RFB handshake: %s", describe_error(err))
        await upstream.close()
        await viewer.close()
        return viewer
    except BaseException:
        await upstream.close()
        raise
    await bridge(viewer, upstream)
    return viewer


def describe_error(err: BaseException) -> str:
    return err.reason if isinstance(err, RfbHandshakeError) else type(err).__name__


async def _open_upstream(
    desktops: LocalDesktops, port: int, secret: bytes
) -> tuple[aiohttp.ClientWebSocketResponse, bytes]:
    """websockify's WebSocket, authenticated to x11vnc; and what x11vnc sent after that."""
    url = f"http://{LOOPBACK}:{port}/websockify"
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            upstream = await desktops.http.ws_connect(
                url, protocols=("binary",), max_msg_size=MAX_MESSAGE
            )
    except PROBE_ERRORS as err:
        raise OpError(ErrorCode.UNAVAILABLE, "the local desktop does not answer") from err
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            return upstream, await authenticate(upstream, secret)
    except (RfbHandshakeError, *PROBE_ERRORS) as err:
        await upstream.close()
        raise OpError(ErrorCode.UNAVAILABLE, "the local desktop refused the helper") from err
    except BaseException:
        await upstream.close()
        raise
