"""The local desktop: x11vnc on the host's existing display plus websockify, at most one.

Start, status, the watchdog's teardown and compare-and-stop run under ONE ``asyncio.Lock`` of
the helper instance: request connections run concurrently, but the session-id comparison and
the stop it guards are atomic against a racing start, and a start while one runs returns it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from Xlib import error as xerror
from Xlib.display import Display

from host_helper.config import HelperSettings
from relay.desktops.displays import free_ports
from relay.desktops.probe import (
    LOOPBACK,
    PROBE_ERRORS,
    ProbeFailed,
    describe,
    poll_until_ready,
    probe_session,
    rfb_banner_ws,
)
from relay.desktops.process import ChildProcess, DesktopProcesses
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.rfb import SECRET_LEN, rfbauth_file_bytes

log = logging.getLogger(__name__)

# Only these of the helper's variables reach x11vnc: XAUTHORITY lets it open a real
# desktop's display; the helper's token (RELAYDESK_*) never leaves the helper.
_INHERITED_ENV = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "XAUTHORITY", "XDG_RUNTIME_DIR"}
)
SHARING_DISABLED = (
    "sharing this host's screen is disabled: start the host helper with "
    "--allow-remote-desktop (or RELAYDESK_ALLOW_REMOTE_DESKTOP=1)"
)
MAX_STARTED_BY = 200


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_vnc_secret() -> bytes:
    """8 random bytes without NUL (the VNC code reads a stored secret as a C string)."""
    return bytes(secrets.randbelow(255) + 1 for _ in range(SECRET_LEN))


def write_rfbauth(secret: bytes) -> Path:
    """A fresh private (0700) directory holding x11vnc's 0600 ``-rfbauth`` file (blocking)."""
    directory = Path(tempfile.mkdtemp(prefix="relaydesk-helper-"))
    path = directory / "vncpasswd"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(rfbauth_file_bytes(secret))
    return path


def check_display(name: str) -> None:
    """Open and close the display once: a clear error when it does not exist (blocking)."""
    if not name:
        raise OpError(
            ErrorCode.UNAVAILABLE, "no display to share: set DISPLAY or --display for the helper"
        )
    try:
        Display(name).close()
    except (xerror.DisplayError, xerror.ConnectionClosedError, OSError) as err:
        raise OpError(
            ErrorCode.UNAVAILABLE,
            f"display {name} does not exist or refuses this helper ({type(err).__name__})",
            {"display": name},
        ) from err


@dataclass(eq=False)
class LocalDesktop:
    """One incarnation of the shared screen."""

    local_screen_session_id: str
    display: str
    vnc_port: int
    websockify_port: int
    started_at: str
    started_by: str | None
    children: DesktopProcesses = field(default_factory=DesktopProcesses)
    # x11vnc demands VNC authentication; the connect stream answers it (host_helper/connect.py).
    vnc_secret: bytes = field(default_factory=new_vnc_secret, repr=False)
    rfbauth: Path | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "local_screen_session_id": self.local_screen_session_id,
            "display": self.display,
            "websockify_port": self.websockify_port,
            "started_at": self.started_at,
            "started_by": self.started_by,
            "state": "running",
        }


class LocalDesktops:
    """Owns the helper's (at most one) local desktop: start, status, compare-and-stop, watchdog."""

    def __init__(self, config: HelperSettings) -> None:
        self.config = config
        self.current: LocalDesktop | None = None
        self.last_failure: dict[str, Any] | None = None
        self.lock = asyncio.Lock()
        self.spawned = 0  # x11vnc processes started over the helper's life (tests count them)
        self._http: aiohttp.ClientSession | None = None
        self._watchdog: asyncio.Task[None] | None = None

    # -- public operations --------------------------------------------------------------

    async def start(self, started_by: object = None) -> dict[str, Any]:
        """Start sharing, or return the desktop already shared (never a second x11vnc)."""
        if started_by is not None and (
            not isinstance(started_by, str) or len(started_by) > MAX_STARTED_BY
        ):
            raise InvalidArgs("started_by", f"must be a string of at most {MAX_STARTED_BY}")
        async with self.lock:
            running = await self._running()
            if running is not None:
                return running.to_dict() | {"already_running": True}
            if not self.config.allow_remote_desktop:
                raise OpError(ErrorCode.FORBIDDEN, SHARING_DISABLED)
            await asyncio.to_thread(check_display, self.config.display)
            desktop = await self._launch(started_by)
            self.current = desktop
            return desktop.to_dict() | {"already_running": False}

    async def status(self) -> dict[str, Any]:
        """The running desktop (if any) and the reason the last one failed (if any)."""
        async with self.lock:
            running = await self._running()
            return {
                "display": self.config.display,
                "allow_remote_desktop": self.config.allow_remote_desktop,
                "running": running is not None,
                "desktop": running.to_dict() if running else None,
                "last_failure": self.last_failure,
            }

    async def stop(self, session_id: object) -> dict[str, Any]:
        """Compare-and-stop: stop only if ``session_id`` is still the running session."""
        if not isinstance(session_id, str) or not session_id or len(session_id) > 128:
            raise InvalidArgs("local_screen_session_id", "required")
        async with self.lock:
            current = await self._running()
            if current is None:
                return {"stopped": False, "was_running": False}
            if not secrets.compare_digest(current.local_screen_session_id, session_id):
                log.info("stop refused: a newer local session is running")
                return {
                    "stopped": False,
                    "conflict": True,
                    "current_session_id": current.local_screen_session_id,
                }
            await self._remove(current, "stopped")
            return {"stopped": True, "stopped_session_id": session_id}

    def start_watchdog(self) -> None:
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = asyncio.create_task(self._watch(), name="local-desktop-watchdog")

    async def close(self) -> None:
        """Stop the watchdog and everything this helper started."""
        task, self._watchdog = self._watchdog, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        async with self.lock:
            if self.current is not None:
                await self._remove(self.current, "helper stopping")
        if self._http is not None:
            await self._http.close()

    async def check(self) -> None:
        """One watchdog round: processes alive and an RFB banner through websockify."""
        desktop = self.current
        if desktop is None:
            return
        reason = await self._health(desktop)
        if reason is not None and not desktop.children.dead_essentials():
            reason = await self._health(desktop)  # one slow answer must not end a desktop
        if reason is None:
            return
        async with self.lock:
            if self.current is desktop:  # a stop or restart may have replaced it meanwhile
                await self._remove(desktop, reason)

    # -- internals ----------------------------------------------------------------------

    @property
    def http(self) -> aiohttp.ClientSession:
        self._http = probe_session(self._http)
        return self._http

    async def _running(self) -> LocalDesktop | None:
        """The current desktop if its children live; a dead one is cleaned up here."""
        desktop = self.current
        if desktop is not None and (dead := desktop.children.dead_essentials()):
            await self._remove(desktop, f"process exited: {', '.join(dead)}")
            return None
        return desktop

    async def _health(self, desktop: LocalDesktop) -> str | None:
        if dead := desktop.children.dead_essentials():
            return f"process exited: {', '.join(dead)}"
        try:
            await rfb_banner_ws(self.http, desktop.websockify_port, self.config.probe_timeout_s)
        except (ProbeFailed, *PROBE_ERRORS) as err:
            return f"rfb_via_websockify: {describe(err)}"
        return None

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.config.watchdog_interval_s)
            try:
                await self.check()
            except Exception:
                log.exception("local desktop watchdog round failed")

    async def _launch(self, started_by: str | None) -> LocalDesktop:
        vnc_port, ws_port = free_ports(2)
        desktop = LocalDesktop(
            secrets.token_hex(16), self.config.display, vnc_port, ws_port, _now_iso(), started_by
        )
        try:
            desktop.rfbauth = await asyncio.to_thread(write_rfbauth, desktop.vnc_secret)
            self._spawn(desktop)
            await self._await_ready(desktop)
        except BaseException as err:
            # Cleanup must finish even when the start itself was cancelled.
            await asyncio.shield(desktop.children.stop(self.config.stop_grace_s))
            _remove_rfbauth(desktop)
            if isinstance(err, ProbeFailed | OSError):
                raise OpError(
                    ErrorCode.START_FAILED, f"sharing {desktop.display} did not start: {err}"
                ) from err
            raise
        log.info("local desktop started on %s", desktop.display)
        return desktop

    def _spawn(self, desktop: LocalDesktop) -> None:
        env = {k: v for k, v in os.environ.items() if k in _INHERITED_ENV or k.startswith("LC_")}
        websockify = [
            sys.executable,
            "-m",
            "websockify",
            "--web",
            str(self.config.novnc_dir),
            "--file-only",
            f"{LOOPBACK}:{desktop.websockify_port}",
            f"{LOOPBACK}:{desktop.vnc_port}",
        ]
        desktop.children.add(ChildProcess.spawn("websockify", websockify, env=env, essential=True))
        x11vnc = [
            self.config.x11vnc_binary,
            "-display",
            desktop.display,
            "-rfbauth",
            str(desktop.rfbauth),
            "-localhost",
            "-noipv6",
            "-shared",
            "-forever",
            "-quiet",
            "-rfbport",
            str(desktop.vnc_port),
            *self.config.x11vnc_flags,
        ]
        x11vnc_env = env | {"DISPLAY": desktop.display}  # x11vnc's own environment only
        desktop.children.add(ChildProcess.spawn("x11vnc", x11vnc, env=x11vnc_env, essential=True))
        self.spawned += 1

    async def _await_ready(self, desktop: LocalDesktop) -> None:
        deadline = time.monotonic() + self.config.start_timeout_s
        timeout = self.config.probe_timeout_s

        async def banner() -> bytes:
            return await rfb_banner_ws(self.http, desktop.websockify_port, timeout)

        def alive() -> bool:
            return not desktop.children.dead_essentials()

        await poll_until_ready(banner, deadline, "x11vnc via websockify", alive)

    async def _remove(self, desktop: LocalDesktop, reason: str) -> None:
        """Forget the desktop and stop its children (caller holds the lock)."""
        if self.current is desktop:
            self.current = None
        clean = await desktop.children.stop(self.config.stop_grace_s)
        _remove_rfbauth(desktop)
        if reason not in ("stopped", "helper stopping"):
            self.last_failure = {
                "local_screen_session_id": desktop.local_screen_session_id,
                "reason": reason,
                "at": _now_iso(),
            }
            log.warning("local desktop failed: %s", reason)
        else:
            log.info("local desktop %s%s", reason, "" if clean else " (some processes remain)")


def _remove_rfbauth(desktop: LocalDesktop) -> None:
    if desktop.rfbauth is not None:
        shutil.rmtree(desktop.rfbauth.parent, ignore_errors=True)
