"""The Content-Security-Policy every HTTP response of the server carries.

One strict policy for every page — the chat and dock, the login link's page, the viewer, error
pages — and for every other response (a JSON or SVG document opened on its own gets it too):
scripts, styles, fonts, workers (the viewer's audio worklet) and connections (``fetch``,
Server-Sent Events, the viewer's and the audio's WebSockets) only from the server's own origin
(CSP 3: ``'self'`` covers ``ws:``/``wss:`` of that origin); no inline script or style, no
``eval``; images also from ``data:`` (noVNC draws the remote cursor as a ``data:`` image);
nothing embeds a page, no plugin runs, no ``<base>`` moves relative URLs. A route that sends
its own policy keeps it (the chat's is as strict). :class:`PolicedStarlette` puts the policy
outside Starlette's own error middleware, so its plain-text 500 carries it too.
"""

from __future__ import annotations

from typing import Final

from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

POLICY: Final = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "media-src 'self'",
        "worker-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    )
)
HEADER: Final = b"content-security-policy"


class ContentSecurityPolicy:
    """ASGI middleware: adds :data:`POLICY` to every HTTP response that has no policy."""

    def __init__(self, app: ASGIApp, policy: str = POLICY) -> None:
        self.app = app
        self.value = policy.encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_policy(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(name.lower() == HEADER for name, _ in headers):
                    headers.append((HEADER, self.value))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_policy)


class PolicedStarlette(Starlette):
    """A Starlette app whose every HTTP answer carries the policy, the 500 that Starlette's
    outermost ``ServerErrorMiddleware`` sends for an uncaught exception included."""

    def build_middleware_stack(self) -> ASGIApp:
        return ContentSecurityPolicy(super().build_middleware_stack())
