"""``GET /vnc/{sid}/{token}/control``: a viewer's live feed of its desktop's control.

Server-Sent Events, admitted and watched like the viewer stream (``server.auth.streams``): the
capability first, then a slot under the per-user and per-address caps (429 beyond), then the
credential that minted the capability, the holder's ``write`` role and the relay's visibility,
checked on opening and re-checked while it listens (a revocation ends it within 2 s with a last
``access_revoked`` event). It sends ``control`` with the state now, then every ``control``
change and every ``agent_action`` on that desktop, from whichever replica they happen on (the
desktop's topic on the event bus), and ``desktop_state`` (``{state}``) when the desktop is paused
or runs again (docs/desktops.md, "Pause and resume"): the page shows the paused overlay and
takes no input meanwhile; its stream stays open and the picture comes back with the resume.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from server.auth.capability import ViewerDenied, ViewerGrant, verify
from server.auth.revocation import Watch
from server.auth.streams import ReleasingResponse, ViewerStreams
from server.boundary.limits import TooManyStreams
from server.control.model import DesktopKey
from server.control.publish import CONTROL, control_event, desktop_topic
from server.control.service import ControlService
from server.db.rows import DesktopDirectory, DesktopRow, RowAnnotator
from server.errors import error_response
from server.events.bus import EventBus
from server.events.routes import ACCESS_REVOKED
from server.viewer.access import ViewerRefused
from wire.errors import CloseCode, ErrorCode, OpError

HEADERS: Final = {
    "Cache-Control": "no-store",
    "X-Accel-Buffering": "no",
    "Referrer-Policy": "no-referrer",
}
PING_S: Final = 15.0
DESKTOP_STATE: Final = "desktop_state"
# Whether the desktop is recorded (docs/recording.md): sent first, then on each change.
RECORDING: Final = "recording"
# The states a viewer's page follows: paused (overlay, no input) and running again.
FOLLOWED_STATES: Final = frozenset({"paused", "running"})


@dataclass(frozen=True)
class ControlFeeds:
    """What the feed reads: the bus it listens on, who is in control, the desktops' rows."""

    bus: EventBus
    control: ControlService
    inventory: DesktopDirectory
    # Marks recorded rows (``RecordingService.annotate``); absent: no recordings.
    recorded: RowAnnotator | None = None

    async def row_changed(self, row: DesktopRow) -> None:
        """Inventory listener: a desktop paused or running again tells its viewers."""
        if row.state in FOLLOWED_STATES:
            key = DesktopKey(row.relay_id, row.desktop_session_id)
            await self.bus.publish(desktop_topic(key), DESKTOP_STATE, {"state": row.state})


async def _stream(
    feeds: ControlFeeds, row: DesktopRow, watch: Watch, shutdown: anyio.Event
) -> AsyncIterator[ServerSentEvent | bytes]:
    key = DesktopKey(row.relay_id, row.desktop_session_id)
    feed = await feeds.bus.open_feed(desktop_topic(key), None)
    watchers = [
        asyncio.create_task(_end_on(shutdown.wait, feed.stop)),
        asyncio.create_task(_end_on(watch.revoked.wait, feed.end_now)),
    ]
    try:
        info = await feeds.control.state(key)
        yield ServerSentEvent(data=json.dumps(control_event(key, info)), event=CONTROL)
        if row.state == "paused":
            yield ServerSentEvent(data=json.dumps({"state": row.state}), event=DESKTOP_STATE)
        if feeds.recorded is not None and (await feeds.recorded([row]))[0].recording:
            yield ServerSentEvent(data=json.dumps({"recording": True}), event=RECORDING)
        while not watch.revoked.is_set() and (event := await feed.next()) is not None:
            yield ServerSentEvent(data=event.data_json, event=event.event, id=event.id)
        if watch.revoked.is_set():
            yield ServerSentEvent(data=json.dumps({"reason": watch.reason}), event=ACCESS_REVOKED)
    finally:
        for watcher in watchers:
            watcher.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await feeds.bus.close_feed(feed)


async def _end_on(happened: Callable[[], Awaitable[Any]], end: Callable[[], None]) -> None:
    """End the feed once ``happened`` completes (the server stops, the access is revoked)."""
    await happened()
    end()


async def _feed(feeds: ControlFeeds, grant: ViewerGrant, sid: str, watch: Watch) -> Response:
    """The feed of the admitted ``grant``'s desktop, or the refusal."""
    if watch.revoked.is_set():
        return error_response(ViewerRefused(CloseCode.VIEWER_FORBIDDEN, watch.reason), HEADERS)
    row = await feeds.inventory.row(grant.relay_id, sid)
    if row is None:
        return error_response(OpError(ErrorCode.NOT_FOUND, "unknown desktop session"), HEADERS)
    shutdown = anyio.Event()
    return EventSourceResponse(
        _stream(feeds, row, watch, shutdown),
        ping=PING_S,
        headers=HEADERS,
        send_timeout=30,
        shutdown_event=shutdown,
        shutdown_grace_period=2.0,
    )


def control_routes(feeds: ControlFeeds, viewers: ViewerStreams) -> list[BaseRoute]:
    feeds.inventory.add_listener(feeds.row_changed)

    async def control_events(request: Request) -> Response:
        """The desktop's control feed for the holder of a viewer capability."""
        sid, token = request.path_params["sid"], request.path_params["token"]
        try:
            grant = verify(viewers.secret_key, token, sid)
        except ViewerDenied as err:
            return error_response(err, HEADERS)
        try:
            stream = await viewers.admit(request, grant)
        except TooManyStreams as err:
            return error_response(err, HEADERS)
        try:
            response = await _feed(feeds, grant, sid, stream.watch)
        except BaseException:
            stream.release()
            raise
        return ReleasingResponse(response, stream)

    return [Route("/vnc/{sid}/{token}/control", control_events, methods=["GET"])]
