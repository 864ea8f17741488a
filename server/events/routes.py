"""``GET /api/v1/events?conversation_id=…``: the conversation's events as Server-Sent Events.

A subscriber must be a member with at least ``read``. While it listens, its credential (API
token or web session) and its membership are re-checked every second and whenever a revocation
is announced (``server.auth.revocation``): a subscriber that lost either gets a last
``access_revoked`` event and its stream ends. Each stream holds a slot under the per-user and
per-address caps (``server.boundary.limits``); one more is 429. With ``Last-Event-ID`` the
missed events are replayed from the bounded history; without it (or when the history no longer
reaches back that far) the stream opens with a snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from server.auth.dependencies import Authenticator
from server.auth.errors import AuthError, error_response
from server.auth.revocation import Access, Credential, Watch
from server.auth.scopes import scope_refusal
from server.auth.streams import ReleasingResponse, StreamGuard
from server.boundary.body import text_param
from server.boundary.limits import TooManyStreams
from server.db.records import role_allows
from server.db.store import Store
from server.errors import error_body, status_of
from server.events.bus import BusEvent, Feed, parse_event_id
from server.events.conversations import (
    INVENTORY_CHANGED,
    SERVER_STOPPING,
    STREAM_RESET,
    ConversationEvents,
)
from server.json_response import JSONResponse
from wire.errors import ErrorCode, InvalidArgs, InvalidInput, OpError

log = logging.getLogger(__name__)

HEADERS: Final = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
# On shutdown a stream gets this long to send its farewell and its final chunk; uvicorn's
# graceful shutdown (relaydesk/run.py, 5 s) must be longer.
SHUTDOWN_GRACE_S: Final = 2.0
# What a client waits before it reconnects after the farewell (the SSE ``retry`` field).
RECONNECT_MS: Final = 1000
FAREWELL: Final = ServerSentEvent(
    data=json.dumps({"reason": "server shutting down", "retry_ms": RECONNECT_MS}),
    event=SERVER_STOPPING,
    retry=RECONNECT_MS,
)
# The last event of a stream whose credential or membership was taken away.
ACCESS_REVOKED: Final = "access_revoked"


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"))


def _sse(event: BusEvent) -> bytes:
    """The event's SSE bytes, built once and shared by every subscriber of its topic."""
    encoded = event.encodings.get("sse")
    if encoded is None:
        encoded = ServerSentEvent(data=event.data_json, event=event.event, id=event.id).encode()
        event.encodings["sse"] = encoded
    return encoded


async def _member(store: Store, conversation_id: str, user_id: str) -> bool:
    role = await store.get_role(conversation_id, user_id)
    return role_allows(role, "read")


async def _stream(
    events: ConversationEvents,
    feed: Feed,
    conversation_id: str,
    resumed: bool,
    shutdown: anyio.Event,
    watch: Watch,
) -> AsyncIterator[ServerSentEvent | bytes]:
    watchers = [
        asyncio.create_task(_end_on(shutdown.wait, feed.stop)),
        asyncio.create_task(_end_on(watch.revoked.wait, feed.end_now)),
    ]
    try:
        if not feed.complete:
            if resumed:
                yield ServerSentEvent(
                    data=_json({"reason": "history_exceeded"}), event=STREAM_RESET
                )
            snapshot = await events.snapshot(conversation_id)
            yield ServerSentEvent(data=_json(snapshot), event=INVENTORY_CHANGED)
        for event in feed.replay:
            yield _sse(event)
        while not watch.revoked.is_set() and (live := await feed.next()) is not None:
            yield _sse(live)
        if watch.revoked.is_set():
            yield ServerSentEvent(data=_json({"reason": watch.reason}), event=ACCESS_REVOKED)
        elif feed.stopping:
            yield FAREWELL
    finally:
        for watcher in watchers:
            watcher.cancel()
        await events.close(feed)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*watchers, return_exceptions=True)


async def _end_on(happened: Callable[[], Awaitable[Any]], end: Callable[[], None]) -> None:
    """End the feed once ``happened`` completes (the server stops, the access is revoked), so
    the stream sends its last event and completes."""
    await happened()
    end()


def _error(err: OpError) -> Response:
    return JSONResponse(error_body(err), status_code=status_of(err))


def _params(request: Request) -> tuple[str, str | None]:
    """``conversation_id`` and the ``Last-Event-ID`` to resume after; ``InvalidArgs`` if bad."""
    conversation_id = text_param("conversation_id", request.query_params.get("conversation_id", ""))
    if not conversation_id:
        raise InvalidArgs("conversation_id", "required")
    last_id = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    if last_id and parse_event_id(last_id) is None:
        raise InvalidInput("Last-Event-ID", "must be an event id <ms>-<seq> this stream sent")
    return conversation_id, last_id or None


async def _respond(
    events: ConversationEvents, conversation_id: str, last_id: str | None, watch: Watch
) -> Response:
    try:
        feed = await events.open(conversation_id, last_id)
    except OpError as err:
        return _error(err)
    shutdown = anyio.Event()
    stream = _stream(events, feed, conversation_id, bool(last_id), shutdown, watch)
    return EventSourceResponse(
        stream,
        ping=events.ping_s,
        headers=HEADERS,
        send_timeout=30,
        shutdown_event=shutdown,
        shutdown_grace_period=SHUTDOWN_GRACE_S,
    )


def event_routes(
    auth: Authenticator, store: Store, streams: StreamGuard, events: ConversationEvents
) -> list[BaseRoute]:
    """``GET /api/v1/events``: a conversation's events for its members."""

    async def event_stream(request: Request) -> Response:
        try:
            principal = await auth.authenticate_connection(request)
        except AuthError as err:
            return error_response(err)
        try:
            conversation_id, last_id = _params(request)
        except OpError as err:
            return _error(err)
        if (why := scope_refusal(principal, conversation_id, "read")) is not None:
            return _error(OpError(ErrorCode.FORBIDDEN, why))
        if not await _member(store, conversation_id, principal.user_id):
            return _error(OpError(ErrorCode.FORBIDDEN, "not a member of this conversation"))
        access = Access(conversation_id, "read")
        try:
            held = streams.admit(request, Credential.of(principal), access)
        except TooManyStreams as err:
            return _error(err)
        try:
            response = await _respond(events, conversation_id, last_id, held.watch)
        except BaseException:
            held.release()
            raise
        return ReleasingResponse(response, held)

    return [Route("/api/v1/events", event_stream, methods=["GET"])]
