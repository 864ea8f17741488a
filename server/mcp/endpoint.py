"""``/api/v1/conversations/{conversation_id}/mcp``: MCP over Streamable HTTP, bound to one
conversation.

Before the SDK sees a request, this endpoint admits it, cheapest check first: an API token
(``Authorization: Bearer rdk_…``; anything else is 401), membership of the path's conversation
(a conversation the caller is not in answers 404, like one that does not exist), and the body
through the server's one input boundary (size, JSON type, valid text, depth). The SDK then
serves it in **stateless** mode with JSON answers: every POST is self-contained (no
``Mcp-Session-Id``, nothing kept between requests), so any replica can serve any request behind
a load balancer without affinity. ``GET`` (a server-to-client stream) and ``DELETE`` (ending a
session) are ``405``, as the transport allows for a server that offers neither.

The SDK is loaded and started by the first request that passes admission, not with the
server: it takes longer to import than the rest of the server takes to start, and the server
answers everything else without it (docs/operations.md, where recovery time goes).
"""

from __future__ import annotations

import contextlib
import importlib
import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final

import anyio
from starlette.requests import Request
from starlette.routing import BaseRoute, Route
from starlette.types import Message, Receive, Scope, Send

from server import errors
from server.actions.invoke import ActionRunner, request_id_from
from server.actions.registry import CONVERSATION_ID
from server.actions.routes import REQUEST_ID_HEADER
from server.auth import errors as auth_errors
from server.auth.dependencies import Authenticator
from server.auth.errors import AuthError, Unauthorized
from server.auth.revocation import Access, Credential
from server.auth.scopes import scoped_role
from server.auth.streams import StreamGuard, run_watched_http
from server.boundary.body import read_capped
from server.boundary.limits import TooManyStreams
from server.mcp.caller import CALLER_KEY, McpCaller
from server.relays.router import RelayRouter
from wire.errors import ErrorCode, OpError, RelaydeskError, UnsupportedMediaType
from wire.jsonbody import is_json_media_type, parse_json_object

if TYPE_CHECKING:
    from anyio.abc import TaskGroup, TaskStatus
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

PATH: Final = "/api/v1/conversations/{conversation_id}/mcp"
_CONVERSATION_ID: Final = re.compile(CONVERSATION_ID["pattern"])


async def _checked_body(request: Request, limit: int) -> bytes:
    """The raw body once it passed the input boundary (the SDK parses it again)."""
    content_type = request.headers.get("content-type")
    if content_type is None or not is_json_media_type(content_type):
        raise UnsupportedMediaType()
    raw = await read_capped(request, limit)
    parse_json_object(raw)
    return raw


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the already read body over, then the connection's own events."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed


async def _refuse(err: RelaydeskError, scope: Scope, receive: Receive, send: Send) -> None:
    if isinstance(err, AuthError):
        response = auth_errors.error_response(err)
    else:
        response = errors.error_response(err)
    await response(scope, receive, send)


def _load_sdk() -> None:
    """Import the SDK and the MCP server built on it: a second or more on a loaded host, so
    it runs in a worker thread and relays, viewers and other calls are served meanwhile."""
    importlib.import_module("mcp.server.streamable_http_manager")
    importlib.import_module("server.mcp.handlers")


class McpEndpoint:
    """The ASGI app of the MCP route; :meth:`running` (in the app's lifespan) serves requests."""

    def __init__(
        self,
        max_body_bytes: int,
        auth: Authenticator,
        streams: StreamGuard,
        actions: ActionRunner,
        relays: RelayRouter,
    ) -> None:
        self.max_body_bytes = max_body_bytes
        self.auth = auth
        self.streams = streams
        self.actions = actions
        self.relays = relays

        self._group: TaskGroup | None = None
        self._starting = anyio.Lock()
        self._sessions: StreamableHTTPSessionManager | None = None

    async def capabilities(self, conversation_id: str) -> frozenset[str]:
        """What the relays shared with the conversation announce, together."""
        shared = await self.auth.store.relays_visible_in(conversation_id)
        return frozenset().union(*(self.relays.capabilities(r.relay_id) for r in shared))

    def routes(self) -> list[BaseRoute]:
        return [Route(PATH, self, methods=["POST"])]

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve MCP requests until the context ends (the SDK, once started, runs in the task
        group kept here)."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                self._group = None
                self._sessions = None
                group.cancel_scope.cancel()

    async def _admit(self, request: Request) -> McpCaller:
        """The caller, with its role in the path's conversation; refused with the one error body."""
        if "authorization" not in request.headers:
            raise Unauthorized("this endpoint takes an API token: 'Authorization: Bearer rdk_…'")
        principal = await self.auth.authenticate(request)
        conversation_id = str(request.path_params["conversation_id"])
        role = None
        if _CONVERSATION_ID.fullmatch(conversation_id):
            held = await self.auth.store.get_role(conversation_id, principal.user_id)
            role = scoped_role(principal, conversation_id, held)
        if role is None:
            # Same answer for "no such conversation" and "not a member": existence is not leaked.
            raise OpError(ErrorCode.NOT_FOUND, "conversation not found")
        request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
        return McpCaller(principal, conversation_id, role, request_id)

    async def _started(self) -> StreamableHTTPSessionManager | None:
        """The SDK's session manager, started by the first call; None when not serving."""
        if self._sessions is None and self._group is not None:
            async with self._starting:
                if self._sessions is None and self._group is not None:
                    self._sessions = await self._group.start(self._serve)
        return self._sessions

    async def _serve(self, *, task_status: TaskStatus[StreamableHTTPSessionManager]) -> None:
        """Run the SDK's session manager until :meth:`running` ends."""
        await anyio.to_thread.run_sync(_load_sdk)
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        from server.mcp.handlers import build_server

        sessions = StreamableHTTPSessionManager(
            build_server(self.actions, self.capabilities),
            json_response=True,
            stateless=True,
            max_request_body_size=self.max_body_bytes,
        )
        async with sessions.run():
            task_status.started(sessions)
            await anyio.sleep_forever()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            caller = await self._admit(request)
            body = await _checked_body(request, self.max_body_bytes)
        except RelaydeskError as err:
            await _refuse(err, scope, receive, send)
            return
        sessions = await self._started()
        if sessions is None:
            await _refuse(OpError(ErrorCode.UNAVAILABLE, "shutting down"), scope, receive, send)
            return
        scope[CALLER_KEY] = caller
        await self._watched(request, caller, body, sessions, send)

    async def _watched(
        self,
        request: Request,
        caller: McpCaller,
        body: bytes,
        sessions: StreamableHTTPSessionManager,
        send: Send,
    ) -> None:
        """Serve the call under the stream caps; it ends (401 if nothing was answered yet) as
        soon as the caller's token is revoked or its user disabled."""
        scope, receive = request.scope, request.receive
        access = Access(caller.conversation_id, "read")
        try:
            held = self.streams.admit(request, Credential.of(caller.principal), access)
        except TooManyStreams as err:
            await _refuse(err, scope, receive, send)
            return
        replayed = _replay(body, receive)
        try:
            await run_watched_http(
                held.watch,
                lambda tracked: sessions.handle_request(scope, replayed, tracked),
                scope,
                receive,
                send,
            )
        finally:
            held.release()
