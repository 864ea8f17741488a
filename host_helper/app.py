"""The host helper's HTTP service: token-authenticated, loopback by default.

Routes (every one needs ``Authorization: Bearer <RELAYDESK_HOST_HELPER_TOKEN>``)::

    GET  /v1/status                 helper and local desktop status (alias of local/status)
    POST /v1/local/start            {started_by?} → the running session (new or existing)
    GET  /v1/local/status           {running, desktop, last_failure, ...}
    POST /v1/local/stop             {local_screen_session_id} → compare-and-stop result
    GET  /v1/local/connect?port=N   WebSocket bridged to the local desktop's websockify
    POST /v1/screen/{action}        screen action on the host display (host_helper/screen.py)
    GET  /v1/local/input?after=N&wait=S  a person's input on the display, long-polled
    POST /v1/local/a11y             {call, params, policy, timeout_s}: an accessibility call on
                                    the display's session (host_helper/a11y.py)

Errors are ``{ok: false, error: {code, message, details}}`` with a fitting HTTP status. Bodies
pass the server's input rules (``wire.jsonbody``: JSON only, ``MAX_BODY`` read incrementally,
depth, valid text, sane numbers): 400 / 413 / 415, with ``error.field`` naming the problem.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from host_helper.a11y import HostA11y
from host_helper.config import HelperSettings
from host_helper.connect import connect
from host_helper.desktop import LocalDesktops
from host_helper.input_watch import Attribution, InputWatch
from host_helper.screen import HostScreen, relay_denied
from relay.policy import DENY_APPS_HEADER
from wire.errors import (
    BodyTooLarge,
    ErrorCode,
    InvalidInput,
    OpError,
    RequestRejected,
    UnsupportedMediaType,
    http_status,
)
from wire.jsonbody import is_json_media_type, parse_json_object

__all__ = ["HelperSettings", "build_app", "serve"]

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CONFIG_KEY: web.AppKey[HelperSettings] = web.AppKey("config", HelperSettings)
DESKTOPS_KEY: web.AppKey[LocalDesktops] = web.AppKey("desktops", LocalDesktops)
SCREEN_KEY: web.AppKey[HostScreen] = web.AppKey("screen", HostScreen)
INPUT_KEY: web.AppKey[InputWatch] = web.AppKey("input", InputWatch)
A11Y_KEY: web.AppKey[HostA11y] = web.AppKey("a11y", HostA11y)
# The longest a relay's poll for a person's input is held open.
MAX_INPUT_WAIT_S = 25.0
# A guard crop is at most 1024x1024 RGB, base64-encoded: ~4 MiB.
MAX_BODY = 8 * 1024 * 1024


def error_response(err: OpError) -> web.Response:
    """``{ok: false, error}`` with the status of the error's code (``wire.errors``)."""
    body: dict[str, Any] = {"ok": False, "error": err.to_dict()}
    if isinstance(err, RequestRejected) and (field := err.details.get("field")) is not None:
        body["error"]["field"] = field
    return web.json_response(body, status=http_status(err))


def _authorised(request: web.Request, token: str) -> bool:
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(presented.encode(), token.encode())


@web.middleware
async def require_token(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every route needs the shared token (compared in constant time, never logged)."""
    if not _authorised(request, request.app[CONFIG_KEY].token):
        log.warning(
            "refused %s %s: no valid token (from %s)", request.method, request.path, request.remote
        )
        return error_response(OpError(ErrorCode.UNAUTHORIZED, "valid token required"))
    return await handler(request)


@web.middleware
async def op_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """``OpError`` → its JSON body; anything unexpected → logged ``internal``."""
    try:
        return await handler(request)
    except OpError as err:
        return error_response(err)
    except web.HTTPException:
        raise
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return error_response(OpError(ErrorCode.INTERNAL, "internal error"))


async def _read_capped(request: web.Request, limit: int) -> bytes:
    """The body, chunk by chunk; ``BodyTooLarge`` as soon as it passes ``limit``."""
    declared = request.content_length
    if declared is not None and declared > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def _body(request: web.Request) -> dict[str, Any]:
    """The JSON object body (``{}`` when empty), by the server's rules (``wire.jsonbody``)."""
    content_type = request.headers.get("Content-Type")
    if content_type is not None and not is_json_media_type(content_type):
        raise UnsupportedMediaType()
    raw = await _read_capped(request, MAX_BODY)
    if raw and content_type is None:
        raise UnsupportedMediaType()
    return parse_json_object(raw, empty_ok=True)


async def local_start(request: web.Request) -> web.Response:
    body = await _body(request)
    desktop = await request.app[DESKTOPS_KEY].start(body.get("started_by"))
    return web.json_response({"ok": True, **desktop})


async def local_status(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, **await request.app[DESKTOPS_KEY].status()})


async def local_stop(request: web.Request) -> web.Response:
    body = await _body(request)
    result = await request.app[DESKTOPS_KEY].stop(body.get("local_screen_session_id"))
    return web.json_response({"ok": True, **result})


async def local_connect(request: web.Request) -> web.StreamResponse:
    return await connect(request, request.app[DESKTOPS_KEY])


async def screen_action(request: web.Request) -> web.Response:
    body = await _body(request)
    denied = relay_denied(request.headers.get(DENY_APPS_HEADER))
    # The agent's own input: the XInput2 watch does not take it for a person's.
    with request.app[INPUT_KEY].attribution.injecting():
        result = await request.app[SCREEN_KEY].run(request.match_info["action"], body, denied)
    return web.json_response({"ok": True, **result})


def _query_number(request: web.Request, name: str, low: float, high: float) -> float:
    raw = request.query.get(name, "0")
    try:
        value = float(raw)
    except ValueError:
        raise InvalidInput(name, "must be a number") from None
    if not low <= value <= high:
        raise InvalidInput(name, f"must be from {low:g} to {high:g}")
    return value


async def local_input(request: web.Request) -> web.Response:
    """A person's input on the display: the count (``seq``) once it passes ``after``, or
    after ``wait`` seconds; with the running session it belongs to."""
    after = _query_number(request, "after", 0, 2**53)
    if after % 1:
        raise InvalidInput("after", "must be a whole number")
    wait = _query_number(request, "wait", 0, MAX_INPUT_WAIT_S)
    report = await request.app[INPUT_KEY].wait(int(after), wait)
    status = await request.app[DESKTOPS_KEY].status()
    desktop = status.get("desktop") if isinstance(status.get("desktop"), dict) else None
    return web.json_response(
        {
            "ok": True,
            "watching": report.watching,
            "seq": report.seq,
            "idle_ms": None if report.idle_s is None else round(report.idle_s * 1000),
            "local_screen_session_id": desktop.get("local_screen_session_id") if desktop else None,
        }
    )


async def local_a11y(request: web.Request) -> web.Response:
    body = await _body(request)
    result = await request.app[A11Y_KEY].call(body)
    return web.json_response({"ok": True, **result})


async def _close_services(app: web.Application) -> None:
    await app[A11Y_KEY].aclose()
    await app[INPUT_KEY].stop()
    await app[DESKTOPS_KEY].close()
    await app[SCREEN_KEY].aclose()


async def _release_polls(app: web.Application) -> None:
    """Shutting down: the relay's open polls answer now instead of holding the shutdown."""
    app[INPUT_KEY].release()


async def _start_watchdog(app: web.Application) -> None:
    app[DESKTOPS_KEY].start_watchdog()
    if app[CONFIG_KEY].display:
        app[INPUT_KEY].start()


def build_app(config: HelperSettings) -> web.Application:
    app = web.Application(middlewares=[require_token, op_errors], client_max_size=MAX_BODY)
    app[CONFIG_KEY] = config
    app[DESKTOPS_KEY] = LocalDesktops(config)
    app[SCREEN_KEY] = HostScreen(config.display, config.input_backend)
    app[A11Y_KEY] = HostA11y(config.display)
    app[INPUT_KEY] = InputWatch(config.display, Attribution(config.input_grace_s))
    app.on_startup.append(_start_watchdog)
    app.on_shutdown.append(_release_polls)
    # After open connections (viewer bridges) are closed: stop what the helper started.
    app.on_cleanup.append(_close_services)
    app.router.add_get("/v1/status", local_status)
    app.router.add_post("/v1/local/start", local_start)
    app.router.add_get("/v1/local/status", local_status)
    app.router.add_post("/v1/local/stop", local_stop)
    app.router.add_get("/v1/local/connect", local_connect)
    app.router.add_post("/v1/screen/{action}", screen_action)
    app.router.add_get("/v1/local/input", local_input)
    app.router.add_post("/v1/local/a11y", local_a11y)
    return app


async def serve(config: HelperSettings) -> None:
    """Serve until SIGINT/SIGTERM, then stop accepting, close streams, stop the desktop."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    runner = web.AppRunner(build_app(config), access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, config.host, config.port)
        await site.start()
        log.info(
            "host helper listening on %s:%s (display %s, sharing %s)",
            config.host,
            config.port,
            config.display or "unset",
            "allowed" if config.allow_remote_desktop else "disabled",
        )
        await stopping.wait()
        log.info("host helper stopping")
    finally:
        await runner.cleanup()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
