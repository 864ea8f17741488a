"""Long-running commands: ``server``, ``relay`` and ``host-helper``."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import socket
import sys
from typing import Any

import uvloop

from relaydesk.allocator import tune_allocator

log = logging.getLogger("relaydesk")


def uvicorn_config(app: Any, settings: Any) -> Any:
    """How every relaydesk server runs under uvicorn (the CLI and the tests alike)."""
    import uvicorn

    from server.http_protocol import guarded_http
    from server.websocket_protocol import StreamingWebSocketProtocol

    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        # uvicorn's httptools protocol with a time limit on request heads and a cap per address
        # on connections still sending one (server/http_protocol.py).
        http=guarded_http(settings.header_timeout_s, settings.max_pending_requests_per_address),
        # uvicorn's websockets-sansio protocol, streaming large binary messages with fewer
        # copies and loop iterations (server/websocket_protocol.py, measured in viewing.md).
        ws=StreamingWebSocketProtocol,
        ws_ping_interval=settings.heartbeat_s,
        ws_ping_timeout=max(1.0, settings.liveness_timeout_s - settings.heartbeat_s),
        ws_max_size=max(settings.max_text_frame, settings.max_channel_frame + 5) + 64,
        # Viewer and relay streams carry VNC data: deflating it again only burns CPU.
        ws_per_message_deflate=False,
        # Viewer capability paths carry a token: uvicorn's access log would write it down.
        access_log=False,
        # The client address is the connection's: X-Forwarded-For counts only from the proxies
        # in RELAYDESK_TRUSTED_PROXIES (server/auth/addresses.py), not from any local process.
        proxy_headers=False,
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )


def bind_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the server announces itself ready (uvicorn would
    start the application first and learn only then that the address is taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def run_server(host: str | None, port: int | None) -> int:
    """Serve the Starlette app with uvicorn until SIGINT/SIGTERM.

    In this order: take the SQLite database's lock (a second server on it refuses before it
    touches anything), bind the address, then start the application (migrations, inventory).
    """
    import uvicorn

    from server.app import check_settings, create_app
    from server.config import ConfigError, Settings
    from server.db.errors import DatabaseInUse
    from server.db.lock import lock_for

    tune_allocator()
    settings = Settings.from_env()
    settings = dataclasses.replace(
        settings, host=host or settings.host, port=port if port is not None else settings.port
    )
    try:
        check_settings(settings)
    except ConfigError as err:
        print(f"relaydesk server: {err}", file=sys.stderr)
        return 1
    lock = lock_for(settings.database_url)
    try:
        if lock is not None:
            lock.acquire()
        sock = bind_socket(settings.host, settings.port)
    except DatabaseInUse as err:
        print(f"relaydesk server: {err.message}", file=sys.stderr)
        return 1
    except OSError as err:
        reason = err.strerror or str(err)
        print(
            f"relaydesk server: cannot serve on {settings.host}:{settings.port}: {reason}",
            file=sys.stderr,
        )
        return 1
    server = uvicorn.Server(uvicorn_config(create_app(settings), settings))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        if lock is not None:
            lock.release()
    return 0 if server.started else 1


def _relay_settings(server_url: str | None, token_file: str | None, stop_desktops: bool) -> Any:
    """The relay's settings; a configuration that cannot work raises ``RelayConfigError``."""
    from relay.config import RelaySettings

    return RelaySettings.from_env(server_url, token_file, stop_desktops_on_exit=stop_desktops)


# Exit status of a relay whose configuration cannot work (as for bad usage).
CONFIG_ERROR_EXIT = 2
# Exit status of a relay replaced by a newer process holding the same token.
REPLACED_EXIT = 3


def run_relay(server_url: str | None, token_file: str | None, *, stop_desktops: bool) -> int:
    """Run the relay worker until SIGINT/SIGTERM (or a configuration error)."""
    from relay.config import RelayConfigError

    try:
        settings = _relay_settings(server_url, token_file, stop_desktops)
    except RelayConfigError as err:
        print(f"relaydesk relay: {err.message}", file=sys.stderr)
        return CONFIG_ERROR_EXIT
    tune_allocator()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_relay_main(settings))


async def _relay_main(settings: Any) -> int:
    from relay.service import RelayService

    service = RelayService(settings)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, service.stop)
    await service.run()
    if service.worker.config_error is not None:
        return CONFIG_ERROR_EXIT
    return REPLACED_EXIT if service.worker.replaced else 0


def run_host_helper(
    host: str,
    port: int,
    display: str | None,
    *,
    allow_remote_desktop: bool = False,
    input_backend: str = "xtest",
) -> int:
    """Run the host helper until SIGINT/SIGTERM (then it stops what it started)."""
    from host_helper.app import HelperSettings, serve
    from host_helper.config import env_flag
    from relay.screen.backends import BACKENDS

    tune_allocator()
    token = os.environ.get("RELAYDESK_HOST_HELPER_TOKEN", "").strip()
    if not token:
        print("relaydesk host-helper: RELAYDESK_HOST_HELPER_TOKEN is required", file=sys.stderr)
        return 2
    if input_backend not in BACKENDS:
        known = ", ".join(BACKENDS)
        print(
            f"relaydesk host-helper: unknown input backend {input_backend!r} (known: {known})",
            file=sys.stderr,
        )
        return 2
    config = HelperSettings(
        host=host,
        port=port,
        token=token,
        display=display or os.environ.get("DISPLAY", ""),
        allow_remote_desktop=allow_remote_desktop
        or env_flag(os.environ.get("RELAYDESK_ALLOW_REMOTE_DESKTOP")),
        input_backend=input_backend,
    )
    try:
        asyncio.run(serve(config))
    except OSError as err:
        print(f"relaydesk host-helper: cannot serve on {host}:{port}: {err}", file=sys.stderr)
        return 1
    return 0
