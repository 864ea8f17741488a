"""Serving the web app: ``/`` is ``index.html``, the ES modules and CSS live under ``/app/``.

Every response carries a strict Content-Security-Policy (``default-src 'self'``: no inline
script or style, no foreign origin) and ``Cache-Control: no-cache`` — the unbundled modules
change with every deploy, so the browser revalidates them (ETag) instead of running a stale
mix.
"""

from __future__ import annotations

import os
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

WEB_DIR_ENV = "RELAYDESK_WEB_APP_DIR"
DEFAULT_WEB_DIR = Path(__file__).resolve().parents[2] / "web" / "app"
CSP = (
    "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
CONTENT_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}


def web_dir() -> Path:
    return Path(os.environ.get(WEB_DIR_ENV) or DEFAULT_WEB_DIR)


def _secure(response: Response, path: str) -> Response:
    response.headers.update(SECURITY_HEADERS)
    content_type = CONTENT_TYPES.get(Path(path).suffix.lower())
    if content_type is not None:
        response.headers["Content-Type"] = content_type
    return response


class AppFiles(StaticFiles):
    """``StaticFiles`` with the app's headers and exact Content-Types."""

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        return _secure(response, str(full_path))


async def index(request: Request) -> Response:
    """``GET /``: the single page (login, conversations, chat, dock)."""
    path = web_dir() / "index.html"
    return _secure(FileResponse(path), str(path))


async def favicon(request: Request) -> Response:
    """``GET /favicon.ico``: the app's icon (SVG), for browsers that ask before reading HTML."""
    path = web_dir() / "favicon.svg"
    response = _secure(FileResponse(path), str(path))
    response.headers["Cache-Control"] = "public, max-age=86400"
    return response


def web_routes() -> list[BaseRoute]:
    return [
        Route("/", index, methods=["GET", "HEAD"]),
        Route("/favicon.ico", favicon, methods=["GET", "HEAD"]),
        Mount("/app", app=AppFiles(directory=web_dir(), check_dir=False), name="web-app"),
    ]
