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
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Final

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.routing import BaseRoute, Route
from starlette.types import Message, Receive, Scope, Send

from server import errors
from server.actions.invoke import request_id_from
from server.actions.registry import CONVERSATION_ID
from server.actions.routes import REQUEST_ID_HEADER
from server.auth import errors as auth_errors
from server.auth.dependencies import authenticate
from server.auth.errors import AuthError, Unauthorized
from server.boundary.body import read_capped
from server.mcp.handlers import CALLER_KEY, McpCaller, build_server
from server.services import services_of
from wire.errors import ErrorCode, OpError, RelaydeskError, UnsupportedMediaType
from wire.jsonbody import is_json_media_type, parse_json_object

PATH: Final = "/api/v1/conversations/{conversation_id}/mcp"
_CONVERSATION_ID: Final = re.compile(CONVERSATION_ID["pattern"])


async def _admit(request: Request) -> McpCaller:
    """The caller, with its role in the path's conversation; refused with the one error body."""
    if "authorization" not in request.headers:
        raise Unauthorized("this endpoint takes an API token: 'Authorization: Bearer rdk_…'")
    principal = await authenticate(request)
    conversation_id = str(request.path_params["conversation_id"])
    role = None
    if _CONVERSATION_ID.fullmatch(conversation_id):
        store = services_of(request).store
        role = await store.get_role(conversation_id, principal.user_id)
    if role is None:
        # Same answer for "no such conversation" and "not a member": existence is not leaked.
        raise OpError(ErrorCode.NOT_FOUND, "conversation not found")
    request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
    return McpCaller(principal, conversation_id, role, request_id)


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


class McpEndpoint:
    """The ASGI app of the MCP route; :meth:`running` (in the app's lifespan) serves requests."""

    def __init__(self, max_body_bytes: int) -> None:
        self.max_body_bytes = max_body_bytes
        self.server = build_server()
        self._sessions: StreamableHTTPSessionManager | None = None

    def routes(self) -> list[BaseRoute]:
        return [Route(PATH, self, methods=["POST"])]

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve MCP requests until the context ends (the SDK's task group lives here)."""
        sessions = StreamableHTTPSessionManager(
            self.server, json_response=True, stateless=True,
            max_request_body_size=self.max_body_bytes,
        )  # fmt: skip
        async with sessions.run():
            self._sessions = sessions
            try:
                yield
            finally:
                self._sessions = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            caller = await _admit(request)
            body = await _checked_body(request, self.max_body_bytes)
        except RelaydeskError as err:
            await _refuse(err, scope, receive, send)
            return
        if self._sessions is None:
            await _refuse(OpError(ErrorCode.UNAVAILABLE, "shutting down"), scope, receive, send)
            return
        scope[CALLER_KEY] = caller
        await self._sessions.handle_request(scope, _replay(body, receive), send)
