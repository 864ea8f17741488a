"""The connect stream: a WebSocket from the relay, bridged to the local desktop's websockify.

Only the websockify port of the desktop running right now is accepted (``?port=N``); the
helper itself dials its own loopback, so a caller can never use it to reach another port.
Closing the stream closes this bridge only, never the desktop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp
from aiohttp import web

from host_helper.desktop import LocalDesktops
from host_helper.probe import LOOPBACK, PROBE_ERRORS
from wire.errors import ErrorCode, InvalidArgs, OpError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
MAX_MESSAGE = 4 * 1024 * 1024


def requested_port(request: web.Request) -> int:
    raw = request.query.get("port", "")
    # ASCII only: str.isdigit() also accepts other scripts' digits, which int() would read.
    if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) < 65536:
        raise InvalidArgs("port", "must be a TCP port number")
    return int(raw)


def check_port(desktops: LocalDesktops, port: int) -> None:
    """Port pinning: the current desktop's websockify port, nothing else."""
    current = desktops.port_of_current()
    if current is None:
        raise OpError(ErrorCode.NOT_RUNNING, "no local desktop is running")
    if port != current:
        log.warning("connect to port %d refused: not the local desktop's port", port)
        raise OpError(ErrorCode.FORBIDDEN, "only the running local desktop's port may be reached")


async def _pump(
    source: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
    sink: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
) -> None:
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
    check_port(desktops, port)
    url = f"http://{LOOPBACK}:{port}/websockify"
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            upstream = await desktops.http.ws_connect(
                url, protocols=("binary",), max_msg_size=MAX_MESSAGE
            )
    except PROBE_ERRORS as err:
        raise OpError(ErrorCode.UNAVAILABLE, "the local desktop does not answer") from err
    viewer = web.WebSocketResponse(max_msg_size=MAX_MESSAGE)
    try:
        await viewer.prepare(request)
    except BaseException:
        await upstream.close()
        raise
    await bridge(viewer, upstream)
    return viewer
