"""Viewer routes: the page, its WebSocket, noVNC's files; and the feature's start-up."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from server.auth.capability import ViewerGrant
from server.auth.streams import ViewerStreams
from server.auth.viewer_policy import agent_viewer_refusal
from server.config import Settings
from server.csp import POLICY
from server.db.rows import DesktopDirectory
from server.db.store import Store
from server.relays.router import RelayRouter
from server.viewer.assets import VIEWER_DIR, NovncAssets, viewer_file
from server.viewer.audio import AudioService
from server.viewer.input import PersonInputSink
from server.viewer.service import ViewerService
from wire.errors import OpError
from wire.ids import RelayId

# The token is in the page's path: no cache may keep it and no Referer may carry it away.
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": POLICY,
}


async def viewer_page(request: Request) -> Response:
    """``GET /vnc/{sid}/{token}/``: the page reads both from its own path."""
    return FileResponse(
        VIEWER_DIR / "index.html", media_type="text/html; charset=utf-8", headers=PAGE_HEADERS
    )


def viewer_routes(
    relays: RelayRouter,
    viewer: ViewerService,
    audio: AudioService,
    novnc: NovncAssets,
    viewers: ViewerStreams,
) -> list[BaseRoute]:
    """The page, its VNC and audio WebSockets over ``relays``, noVNC's files."""

    def relay_policy(websocket: WebSocket, grant: ViewerGrant) -> OpError | None:
        """An agent's capability on a relay that denies apps (its capabilities as they are
        now)."""
        capabilities = relays.capabilities(RelayId(grant.relay_id))
        return agent_viewer_refusal(grant.person, capabilities)

    async def viewer_socket(websocket: WebSocket) -> None:
        """``WS /vnc/{sid}/{token}/websockify``: the VNC byte stream."""
        await viewers.watched(websocket, viewer.serve, relay_policy)

    async def audio_socket(websocket: WebSocket) -> None:
        """``WS /vnc/{sid}/{token}/audio``: the desktop's sound, one Opus packet per message."""
        await viewers.watched(websocket, audio.serve, relay_policy)

    async def novnc_asset(request: Request) -> Response:
        return await novnc.response(request.path_params["path"])

    return [
        Route("/vnc/{desktop_session_id}/{token}/", viewer_page, methods=["GET", "HEAD"]),
        WebSocketRoute("/vnc/{desktop_session_id}/{token}/websockify", viewer_socket),
        WebSocketRoute("/vnc/{desktop_session_id}/{token}/audio", audio_socket),
        Route("/novnc/{path:path}", novnc_asset, methods=["GET", "HEAD"]),
        Route("/viewer/{name}", viewer_file, methods=["GET", "HEAD"]),
    ]


@dataclass(frozen=True)
class ViewerParts:
    """The viewer feature's long-lived parts (built in the app's lifespan)."""

    viewer: ViewerService
    audio: AudioService
    novnc_assets: NovncAssets


def build_viewer(
    settings: Settings,
    store: Store,
    relays: RelayRouter,
    directory: DesktopDirectory,
    control: PersonInputSink | None = None,
) -> ViewerParts:
    """The viewer and audio services and the server's noVNC files (``control`` hears the
    viewers' input)."""
    viewer = ViewerService(settings, store, relays, directory, control)
    return ViewerParts(viewer, AudioService(viewer), NovncAssets())
