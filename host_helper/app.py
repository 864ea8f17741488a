"""The host helper's HTTP service: token-authenticated, loopback by default."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CONFIG_KEY: web.AppKey[HelperConfig] = web.AppKey("config")


@dataclass(frozen=True)
class HelperConfig:
    """What the helper shares and who may ask."""

    host: str
    port: int
    token: str
    display: str
    allow_remote_desktop: bool = False


def _authorised(request: web.Request, token: str) -> bool:
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(presented.encode(), token.encode())


@web.middleware
async def require_token(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every route needs the shared token (compared in constant time)."""
    if not _authorised(request, request.app[CONFIG_KEY].token):
        log.warning("request without a valid token from %s", request.remote)
        body = {"ok": False, "error": {"code": "unauthorized", "message": "valid token required"}}
        return web.json_response(body, status=401)
    return await handler(request)


async def status(request: web.Request) -> web.Response:
    config = request.app[CONFIG_KEY]
    return web.json_response(
        {
            "ok": True,
            "display": config.display,
            "allow_remote_desktop": config.allow_remote_desktop,
            "desktops": [],
        }
    )


def build_app(config: HelperConfig) -> web.Application:
    app = web.Application(middlewares=[require_token])
    app[CONFIG_KEY] = config
    app.router.add_get("/v1/status", status)
    return app


async def serve(config: HelperConfig) -> None:
    """Serve until cancelled (SIGINT/SIGTERM end ``asyncio.run``)."""
    runner = web.AppRunner(build_app(config), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    log.info(
        "host helper listening on %s:%s (display %s)", config.host, config.port, config.display
    )
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
