"""The answering side of the internal channel: requests and channels for relays held here,
and screen calls on the revisions this replica issued (``server.cluster.screen``).

The routes exist on every replica but answer only when clustered, and only to a request
signed with the cluster secret; anything else is ``403`` (a WebSocket: close 4403) before a
byte of the body is acted on. A relay not held here (or held under another epoch) answers
``not_owner``, so the caller re-reads ownership and retries once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from server.cluster.channel import (
    CHANNEL_CALL,
    CHANNEL_CLOSE_BASE,
    CHANNEL_PATH,
    REQUEST_PATH,
    SCREEN_PATH,
    channel_code_from,
    close_code_for,
)
from server.cluster.screen import caller_from
from server.relays.router import RelayChannel
from server.services import services_of
from wire.errors import ChannelCloseCode, ChannelClosedError, CloseCode, OpError
from wire.ids import RelayId

if TYPE_CHECKING:
    from server.cluster.router import ClusterRouter

log = logging.getLogger(__name__)

_NOT_OWNER = orjson.dumps({"not_owner": True})


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status, media_type="application/json")


def _path(conn: HTTPConnection) -> str:
    query = conn.url.query
    return conn.url.path + (f"?{query}" if query else "")


def _authorized(conn: HTTPConnection, method: str, body: bytes) -> ClusterRouter | None:
    cluster = services_of(conn).cluster
    if cluster is None:
        return None
    try:
        cluster.signer.verify(method, _path(conn), conn.headers, body)
    except OpError as err:
        log.warning("internal %s refused: %s", conn.url.path, err.message)
        return None
    return cluster


def _held(cluster: ClusterRouter, relay_id: RelayId, epoch: Any) -> bool:
    local = cluster.local_epoch(relay_id)
    return local is not None and (not epoch or local == int(epoch))


async def relay_request(request: Request) -> Response:
    body = await request.body()
    cluster = _authorized(request, "POST", body)
    if cluster is None:
        return _json({"error": {"code": "forbidden", "message": "cluster signature"}}, 403)
    call = orjson.loads(body)
    relay_id = RelayId(str(call["relay_id"]))
    if not _held(cluster, relay_id, call.get("epoch")):
        return Response(_NOT_OWNER, media_type="application/json")
    try:
        result = await cluster.hub.request(
            relay_id, str(call["op"]), call.get("args"), float(call["timeout_s"])
        )
    except OpError as err:
        return _json({"error": err.to_dict()})
    return _json({"result": result})


async def screen_call(request: Request) -> Response:
    """A screen call another replica admitted, on a revision this replica issued."""
    body = await request.body()
    if _authorized(request, "POST", body) is None:
        return _json({"error": {"code": "forbidden", "message": "cluster signature"}}, 403)
    try:
        call = orjson.loads(body)
        caller, args = caller_from(call["caller"]), call["body"]
        if not isinstance(args, dict):
            raise TypeError("body")
    except (ValueError, KeyError, TypeError):  # orjson's JSONDecodeError is a ValueError
        return _json({"error": {"code": "invalid_args", "message": "not a screen call"}}, 400)
    try:
        result = await services_of(request).screen_tool.run(caller, args, forwarded=True)
    except OpError as err:
        return _json({"error": err.to_dict()})
    return _json({"result": result})


async def relay_channel(websocket: WebSocket) -> None:
    raw = websocket.headers.get(CHANNEL_CALL, "").encode()
    cluster = _authorized(websocket, "GET", raw)
    if cluster is None:
        await websocket.close(CloseCode.VIEWER_FORBIDDEN, "cluster signature")
        return
    params = orjson.loads(raw)
    relay_id = RelayId(str(params["relay_id"]))
    await websocket.accept()
    if not _held(cluster, relay_id, params.get("epoch")):
        await websocket.send_bytes(_NOT_OWNER)
        await websocket.close()
        return
    try:
        channel = await cluster.hub.get(relay_id).open_channel(
            dict(params["target"]), float(params["timeout_s"])
        )
    except OpError as err:
        await websocket.send_text(orjson.dumps({"error": err.to_dict()}).decode())
        await websocket.close()
        return
    await websocket.send_text('{"result": true}')
    await _splice(websocket, channel)


async def _splice(websocket: WebSocket, channel: RelayChannel) -> None:
    """Pump both ways until one side ends; pass the relay's close code on unchanged."""
    down = asyncio.create_task(_down(websocket, channel), name="splice-down")
    up = asyncio.create_task(_up(websocket, channel), name="splice-up")
    _, pending = await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(down, up, return_exceptions=True)


async def _down(websocket: WebSocket, channel: RelayChannel) -> None:
    try:
        while True:
            data = await channel.read()
            await websocket.send({"type": "websocket.send", "bytes": bytes(data)})
    except ChannelClosedError as ended:
        with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
            await websocket.close(close_code_for(ended.close_code), ended.reason[:120])
    except (RuntimeError, OSError, WebSocketDisconnect):
        await channel.close(ChannelCloseCode.VIEWER_GONE, "viewer gone")


async def _up(websocket: WebSocket, channel: RelayChannel) -> None:
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                code = int(message.get("code") or 0)
                closed = channel_code_from(code) if code >= CHANNEL_CLOSE_BASE else None
                await channel.close(
                    closed or ChannelCloseCode.VIEWER_GONE,
                    str(message.get("reason") or "viewer closed"),
                )
                return
            if (data := message.get("bytes")) is not None:
                await channel.write(data)
    except ChannelClosedError:
        return


def internal_routes() -> list[BaseRoute]:
    return [Route(REQUEST_PATH, relay_request, methods=["POST"]),
            Route(SCREEN_PATH, screen_call, methods=["POST"]),
            WebSocketRoute(CHANNEL_PATH, relay_channel)]  # fmt: skip
