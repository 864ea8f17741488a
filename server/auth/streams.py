"""Long-lived connections: admitted under the caps, watched for revocation, closed with a reason.

:class:`StreamGuard` is what every stream and socket route holds while its connection lasts:
one slot under the per-user and per-address caps (``server.boundary.limits``) and one
:class:`~server.auth.revocation.Watch` of the credential it was admitted with. The route ends
its connection when the watch is revoked; :func:`run_watched` does that for a WebSocket whose
work is a coroutine it does not own (the viewer and audio streams, via
:meth:`ViewerStreams.watched`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Final, TypeVar

from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from server import errors
from server.auth import errors as auth_errors
from server.auth.addresses import client_address
from server.auth.capability import ViewerDenied, ViewerGrant, verify
from server.auth.errors import Unauthorized
from server.auth.revocation import (
    REVOKED,
    Access,
    Credential,
    CredentialWatch,
    Watch,
    credential_watch,
    minted_credential,
)
from server.boundary.limits import StreamLimits, TooManyStreams
from server.config import Settings
from server.db.store import Store
from wire.errors import CloseCode, RelaydeskError

log = logging.getLogger(__name__)

# After its close frame, a revoked WebSocket's own work gets this long to end before it is
# cancelled (it notices the closed socket on its next send or receive).
CLOSE_GRACE_S: Final = 2.0
_CLOSE_ERRORS = (WebSocketDisconnect, RuntimeError, OSError)
VIEWER_ROLE: Final = "write"
VIEWER_SUBPROTOCOL: Final = "binary"
T = TypeVar("T")


class HeldStream:
    """One admitted connection: its watch, and its slot under the caps until released."""

    def __init__(self, watch: Watch, release: Callable[[], None]) -> None:
        self.watch = watch
        self.release = release


class StreamGuard:
    """The caps and the credential watch every long-lived connection goes through."""

    def __init__(
        self, limits: StreamLimits, watch: CredentialWatch, trusted_proxies: tuple[str, ...] = ()
    ) -> None:
        self.limits = limits
        self.watch = watch
        self.trusted_proxies = trusted_proxies

    def address_of(self, conn: HTTPConnection) -> str:
        """The client address the caps count ``conn`` under (the login limits' rules)."""
        return client_address(conn, self.trusted_proxies)

    def admit(
        self, conn: HTTPConnection, credential: Credential, access: Access | None = None
    ) -> HeldStream:
        """A slot and a watch until ``release()``; ``TooManyStreams`` at a cap."""
        give_back = self.limits.take(credential.user_id, self.address_of(conn))
        watch = self.watch.add(credential, access)

        def release() -> None:
            self.watch.discard(watch)
            give_back()

        return HeldStream(watch, release)

    @contextlib.contextmanager
    def held(
        self, conn: HTTPConnection, credential: Credential, access: Access | None = None
    ) -> Iterator[Watch]:
        """:meth:`admit` for the life of the block."""
        stream = self.admit(conn, credential, access)
        try:
            yield stream.watch
        finally:
            stream.release()


class ReleasingResponse(Response):
    """Sends ``response``, then gives the stream's slot back, however the sending ended."""

    def __init__(self, response: Response, stream: HeldStream) -> None:
        self.response = response
        self.stream = stream
        self.status_code = response.status_code
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.response(scope, receive, send)
        finally:
            self.stream.release()


@contextlib.asynccontextmanager
async def stream_guard(store: Store, settings: Settings) -> AsyncIterator[StreamGuard]:
    """The process's :class:`StreamGuard`, its watch running, for the app's lifespan."""
    limits = StreamLimits(settings.max_streams_per_principal, settings.max_streams_per_address)
    async with credential_watch(store, store.cache_listeners) as watch:
        yield StreamGuard(limits, watch, settings.trusted_proxies)


async def refuse_socket(websocket: WebSocket, err: RelaydeskError) -> None:
    """Answer a WebSocket handshake with ``err``'s HTTP status and JSON body (a cap's 429, a
    policy's 403)."""
    log.info("stream refused: %s", err.message)
    response = errors.error_response(err)
    try:
        await websocket.send_denial_response(response)
    except RuntimeError:  # a server without the denial extension: a bare refusal
        await websocket.close(CloseCode.POLICY_VIOLATION, err.message[:120])


async def close_revoked(websocket: WebSocket, code: int, reason: str) -> None:
    """Close a WebSocket whose access was revoked (quietly if it is already closing)."""
    with contextlib.suppress(*_CLOSE_ERRORS):
        await websocket.close(code, f"access revoked: {reason}"[:120])


async def run_watched(
    websocket: WebSocket,
    watch: Watch,
    work: Awaitable[None],
    code: int,
    grace_s: float = CLOSE_GRACE_S,
) -> None:
    """Run ``work`` (which serves ``websocket``) until it ends or ``watch`` is revoked; then
    close the socket with ``code`` and the reason, and give ``work`` ``grace_s`` to end
    before cancelling it."""
    task = asyncio.ensure_future(work)
    revoked = asyncio.create_task(watch.wait())
    try:
        await asyncio.wait({task, revoked}, return_when=asyncio.FIRST_COMPLETED)
        if not watch.revoked.is_set():
            return task.result()
        log.info("closing a stream: %s", watch.reason)
        await close_revoked(websocket, code, watch.reason)
        if grace_s > 0 and not task.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), grace_s)
    finally:
        for pending in (task, revoked):
            pending.cancel()
        await asyncio.gather(task, revoked, return_exceptions=True)


async def run_watched_http(
    watch: Watch,
    work: Callable[[Send], Awaitable[None]],
    scope: Scope,
    receive: Receive,
    send: Send,
) -> None:
    """Run ``work(send)`` (an HTTP answer that may take long, e.g. an MCP tool call) until it
    ends or ``watch`` is revoked; then cancel it and, if it had not begun to answer, answer
    401 with the reason."""
    started = False

    async def tracking(message: Message) -> None:
        nonlocal started
        started = started or message["type"] == "http.response.start"
        await send(message)

    task = asyncio.ensure_future(work(tracking))
    revoked = asyncio.create_task(watch.wait())
    try:
        await asyncio.wait({task, revoked}, return_when=asyncio.FIRST_COMPLETED)
        if not watch.revoked.is_set():
            return task.result()
    finally:
        for pending in (task, revoked):
            pending.cancel()
        await asyncio.gather(task, revoked, return_exceptions=True)
    log.info("ending a call: %s", watch.reason)
    if not started:
        refusal = auth_errors.error_response(Unauthorized(f"access revoked: {watch.reason}"))
        await refusal(scope, receive, send)


async def until_revoked(watch: Watch, work: Awaitable[T]) -> T | None:
    """``work``'s result, or None (``work`` cancelled) once ``watch`` is revoked first."""
    task = asyncio.ensure_future(work)
    revoked = asyncio.create_task(watch.wait())
    try:
        await asyncio.wait({task, revoked}, return_when=asyncio.FIRST_COMPLETED)
        return None if watch.revoked.is_set() else task.result()
    finally:
        for pending in (task, revoked):
            pending.cancel()
        await asyncio.gather(task, revoked, return_exceptions=True)


Serve = Callable[[WebSocket, str, str], Awaitable[None]]
# What a viewer's route refuses before its stream is admitted (a relay's policy), or None.
Refusal = Callable[[WebSocket, ViewerGrant], RelaydeskError | None]


async def refuse_viewer(websocket: WebSocket, reason: str) -> None:
    """Accept a viewer or audio WebSocket only to close it ``VIEWER_FORBIDDEN`` (the page shows
    "Access denied" on that code; a refused handshake would only make it retry)."""
    offered = websocket.scope.get("subprotocols", [])
    subprotocol = VIEWER_SUBPROTOCOL if VIEWER_SUBPROTOCOL in offered else None
    with contextlib.suppress(*_CLOSE_ERRORS):
        await websocket.accept(subprotocol=subprotocol)
    await close_revoked(websocket, CloseCode.VIEWER_FORBIDDEN, reason)


class ViewerStreams:
    """Viewer capabilities' streams: verified with the server's key, admitted under the caps
    and watched under the credential that minted them."""

    def __init__(self, store: Store, guard: StreamGuard, secret_key: str) -> None:
        self.store = store
        self.guard = guard
        self.secret_key = secret_key

    async def admit(
        self, conn: HTTPConnection, grant: ViewerGrant, *, access_now: bool = True
    ) -> HeldStream:
        """A viewer capability's stream under the caps (``TooManyStreams``), watched under the
        credential that minted it (its user when it names none) with the viewer's access, and
        checked once now: ``watch.revoked`` is already set when that credential is gone, or —
        with ``access_now`` — the role or the relay's share (a route that checks those itself,
        with its own answers, passes False)."""
        credential = await minted_credential(self.store, grant.user_id, grant.minted_by)
        access = Access(grant.conversation_id, VIEWER_ROLE, grant.relay_id)
        stream = self.guard.admit(conn, credential, access)
        try:
            if access_now:
                await self.guard.watch.confirm(stream.watch)
            elif not await self.guard.watch.credential_lives(credential):
                stream.watch.revoke(REVOKED[credential.kind])
        except BaseException:
            stream.release()
            raise
        return stream

    async def watched(
        self, websocket: WebSocket, serve: Serve, refusal: Refusal | None = None
    ) -> None:
        """A viewer or audio WebSocket (``serve(websocket, session id, token)``) under the caps
        and watched: it closes (``VIEWER_FORBIDDEN``) once the API token or web session that
        minted its capability is revoked, its user is disabled or loses the role, or the relay
        is unshared. A capability that does not verify is left to ``serve``, which refuses it
        with its own close code; one ``refusal`` names is refused with that error's HTTP
        status."""
        params = websocket.path_params
        session_id, token = str(params["desktop_session_id"]), str(params["token"])
        try:
            grant = verify(self.secret_key, token, session_id)
        except ViewerDenied:
            await serve(websocket, session_id, token)
            return
        if refusal is not None and (refused := refusal(websocket, grant)) is not None:
            log.info("viewer refused (session %s…): %s", session_id[:8], refused.message)
            await refuse_socket(websocket, refused)
            return
        try:
            # The role, the share and the rest are ``serve``'s checks, each with its close code.
            stream = await self.admit(websocket, grant, access_now=False)
        except TooManyStreams as err:
            await refuse_socket(websocket, err)
            return
        try:
            if stream.watch.revoked.is_set():
                await refuse_viewer(websocket, stream.watch.reason)
                return
            work = serve(websocket, session_id, token)
            await run_watched(websocket, stream.watch, work, CloseCode.VIEWER_FORBIDDEN)
        finally:
            stream.release()
