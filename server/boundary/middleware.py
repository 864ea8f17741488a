"""``InputBoundary``: the ASGI middleware every request passes before any route.

It refuses, cheapest check first and before a route runs:

- a ``Host`` the server does not answer to (``hosts.HostPolicy``) → 400 / WebSocket refused;
- an ``Origin`` of another site on a WebSocket handshake or an unsafe method → 403 / refused;
- a path or query string that is too long, or carries NUL or invalid text → 400 / refused.

Bodies are read by the routes themselves, through ``server.boundary.body``.
"""

from __future__ import annotations

import logging
from typing import Final
from urllib.parse import parse_qsl

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from server.boundary.hosts import CrossOrigin, HostPolicy
from server.errors import error_response
from wire.errors import CloseCode, InvalidInput, RequestRejected
from wire.jsonbody import text_problem

log = logging.getLogger(__name__)

SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_PATH_CHARS: Final = 2048
MAX_QUERY_BYTES: Final = 8192


def _host_problem(policy: HostPolicy, headers: Headers) -> RequestRejected | None:
    host = headers.get("host")
    if policy.host_allowed(host):
        return None
    shown = (host or "")[:64].encode("ascii", "backslashreplace").decode()
    return InvalidInput("Host", f"this server does not answer to {shown!r}")


def _origin_problem(policy: HostPolicy, scope: Scope, headers: Headers) -> RequestRejected | None:
    if scope["type"] == "http" and scope["method"] in SAFE_METHODS:
        return None
    if policy.origin_allowed(headers.get("origin"), headers.get("host")):
        return None
    return CrossOrigin()


def _target_problem(scope: Scope) -> RequestRejected | None:
    path: str = scope["path"]
    if len(path) > MAX_PATH_CHARS:
        return InvalidInput("path", f"longer than {MAX_PATH_CHARS} characters")
    if (problem := text_problem(path)) is not None:
        return InvalidInput("path", problem)
    query: bytes = scope.get("query_string", b"")
    if len(query) > MAX_QUERY_BYTES:
        return InvalidInput("query", f"longer than {MAX_QUERY_BYTES} bytes")
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if (problem := text_problem(name) or text_problem(value)) is not None:
            return InvalidInput(name if text_problem(name) is None else "query", problem)
    return None


def first_problem(policy: HostPolicy, scope: Scope) -> RequestRejected | None:
    """Why the request must not reach a route, or None."""
    headers = Headers(scope=scope)
    return (
        _host_problem(policy, headers)
        or _origin_problem(policy, scope, headers)
        or _target_problem(scope)
    )


class InputBoundary:
    """Refuses requests with a foreign ``Host``/``Origin`` or a malformed target."""

    def __init__(self, app: ASGIApp, policy: HostPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        problem = first_problem(self.policy, scope)
        if problem is None:
            await self.app(scope, receive, send)
            return
        # Never the path: viewer paths and login links carry secrets.
        log.info("refused a %s request: %s", scope["type"], problem.message)
        if scope["type"] == "http":
            await error_response(problem)(scope, receive, send)
            return
        # Before ``accept`` a close refuses the handshake (the client sees HTTP 403).
        await send(
            {
                "type": "websocket.close",
                "code": CloseCode.POLICY_VIOLATION,
                "reason": problem.message[:120],
            }
        )
