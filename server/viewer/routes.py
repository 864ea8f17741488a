"""Viewer routes: the page, its WebSocket, noVNC's files; and the feature's start-up."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from server.viewer.assets import VIEWER_DIR, NovncAssets, viewer_file
from server.viewer.relay_assets import HubAssetRelays
from server.viewer.service import ViewerService

# The token is in the page's path: no cache may keep it and no Referer may carry it away.
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "SAMEORIGIN",
}


async def viewer_page(request: Request) -> Response:
    """``GET /vnc/{sid}/{token}/``: the page reads both from its own path."""
    return FileResponse(
        VIEWER_DIR / "index.html", media_type="text/html; charset=utf-8", headers=PAGE_HEADERS
    )


async def viewer_socket(websocket: WebSocket) -> None:
    """``WS /vnc/{sid}/{token}/websockify``: the VNC byte stream."""
    service: ViewerService = websocket.app.state.viewer
    params = websocket.path_params
    await service.serve(websocket, params["desktop_session_id"], params["token"])


async def novnc_asset(request: Request) -> Response:
    assets: NovncAssets = request.app.state.novnc_assets
    return await assets.response(request.path_params["path"])


viewer_routes: list[BaseRoute] = [
    Route("/vnc/{desktop_session_id}/{token}/", viewer_page, methods=["GET", "HEAD"]),
    WebSocketRoute("/vnc/{desktop_session_id}/{token}/websockify", viewer_socket),
    Route("/novnc/{path:path}", novnc_asset, methods=["GET", "HEAD"]),
    Route("/viewer/{name}", viewer_file, methods=["GET", "HEAD"]),
]


def start_viewer(state: Any) -> ViewerService:
    """Build the viewer service and the asset sources on ``app.state`` (in ``lifespan``)."""
    directory = getattr(state, "inventory", None)
    service = ViewerService(state.settings, state.store, state.hub, directory)
    state.viewer = service
    state.novnc_assets = NovncAssets(
        NovncAssets.default_roots(), HubAssetRelays(state.hub, state.store)
    )
    return service
