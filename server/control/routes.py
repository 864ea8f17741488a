"""``GET /vnc/{sid}/{token}/control``: a viewer's live feed of its desktop's control.

Server-Sent Events, protected like the viewer stream (the capability first, then the holder's
``write`` role and the relay's visibility, re-checked while it listens): ``control`` with the
state now, then every ``control`` change and every ``agent_action`` on that desktop, from
whichever replica they happen on (the desktop's topic on the event bus).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Final

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server.control.model import DesktopKey
from server.control.publish import CONTROL, control_event, desktop_topic
from server.db.records import role_allows
from server.errors import error_response
from server.services import Services, services_of
from server.viewer.access import ViewerRefused
from server.viewer.capability import ViewerDenied, ViewerGrant, verify
from wire.errors import CloseCode, ErrorCode, OpError

HEADERS: Final = {"Cache-Control": "no-store", "X-Accel-Buffering": "no",
                  "Referrer-Policy": "no-referrer"}  # fmt: skip
RECHECK_S: Final = 30.0
PING_S: Final = 15.0


async def _allowed(services: Services, grant: ViewerGrant) -> bool:
    role = await services.store.get_role(grant.conversation_id, grant.user_id)
    visible = await services.store.is_relay_visible(grant.relay_id, grant.conversation_id)
    return role_allows(role, "write") and visible


async def _stream(
    services: Services, grant: ViewerGrant, key: DesktopKey, shutdown: anyio.Event
) -> AsyncIterator[ServerSentEvent | bytes]:
    feed = await services.bus.open_feed(desktop_topic(key), None)
    watcher = asyncio.create_task(_end_on(shutdown, feed.stop))
    try:
        info = await services.control.state(key)
        yield ServerSentEvent(data=json.dumps(control_event(key, info)), event=CONTROL)
        checked = time.monotonic()
        while (event := await feed.next()) is not None:
            if time.monotonic() - checked > RECHECK_S:
                if not await _allowed(services, grant):
                    return
                checked = time.monotonic()
            yield ServerSentEvent(data=event.data_json, event=event.event, id=event.id)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await services.bus.close_feed(feed)


async def _end_on(shutdown: anyio.Event, stop: Callable[[], None]) -> None:
    """The server stops: end the feed, so the stream completes."""
    await shutdown.wait()
    stop()


async def control_events(request: Request) -> Response:
    """The desktop's control feed for the holder of a viewer capability."""
    sid, token = request.path_params["sid"], request.path_params["token"]
    services = services_of(request)
    try:
        grant = verify(services.settings.secret_key, token, sid)
    except ViewerDenied as err:
        return error_response(err, HEADERS)
    if not await _allowed(services, grant):
        return error_response(ViewerRefused(CloseCode.VIEWER_FORBIDDEN), HEADERS)
    row = await services.inventory.row(grant.relay_id, sid)
    if row is None:
        return error_response(OpError(ErrorCode.NOT_FOUND, "unknown desktop session"), HEADERS)
    key = DesktopKey(row.relay_id, row.desktop_session_id)
    shutdown = anyio.Event()
    return EventSourceResponse(
        _stream(services, grant, key, shutdown), ping=PING_S, headers=HEADERS, send_timeout=30,
        shutdown_event=shutdown, shutdown_grace_period=2.0,
    )  # fmt: skip


control_routes = [Route("/vnc/{sid}/{token}/control", control_events, methods=["GET"])]
