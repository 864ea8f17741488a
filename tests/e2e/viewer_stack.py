"""A real viewing stack for tests: in-process server, relay subprocess, desktops, tokens.

Shared by the viewer integration tests and the browser tests. The server runs in the test's
event loop (so its relays, links and viewer registry can be counted); the relay is a real
``relaydesk relay`` process whose desktops are real Xvfb + x11vnc + websockify.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import mss
import numpy as np
from Xlib import display as xdisplay

from server.auth.capability import grant_for, mint
from tests.support.processes import ManagedProcess, ProcessTracker, scaled
from tests.support.stack import (
    Seed,
    inprocess_server,
    relaydesk_argv,
    seed_database,
    stop_desktops_in,
    wait_until,
)
from wire.ids import RelayId

# Desktops without a window manager or apps: the root window shows exactly what tests paint.
DESKTOP_ENV = {
    "RELAYDESK_WINDOW_MANAGER": "true",
    "RELAYDESK_DESKTOP_APPS": "true",
    "RELAYDESK_WATCHDOG_INTERVAL_S": "30",
}
# The relay's op log (debug level): one line per op it received.
OP_LINE = re.compile(r"relay\.handlers: op (\S+)$", re.MULTILINE)


@dataclass
class Desktop:
    """A running desktop as the tests see it."""

    desktop_session_id: str
    slot: str
    display: str
    vnc_port: int
    websockify_port: int
    viewer_url: str


@dataclass
class ViewerStack:
    app: Any
    url: str
    seed: Seed
    tracker: ProcessTracker
    relay: ManagedProcess
    desktops: list[Desktop] = field(default_factory=list)
    relay_env: Mapping[str, str] = field(default_factory=dict)
    _person: dict[str, str] = field(default_factory=dict)

    @property
    def relay_id(self) -> RelayId:
        return RelayId(self.seed.relay["relay_id"])

    @property
    def relays(self) -> Any:
        return self.app.state.parts.relays

    @property
    def ws_base(self) -> str:
        return self.url.replace("http://", "ws://")

    def token(self, desktop_session_id: str, ttl_s: int = 600, **grant: Any) -> str:
        """A viewer capability; a person's (input allowed) unless ``person=False``."""
        values = {
            "user_id": self.seed.user["user_id"],
            "conversation_id": self.seed.conversation_id,
            "relay_id": self.relay_id,
            "desktop_session_id": desktop_session_id,
            "ttl_s": ttl_s,
            "person": True,
        } | grant
        return mint(self.app.state.parts.settings.secret_key, grant_for(**values))

    def viewer_path(self, desktop: Desktop, token: str | None = None) -> str:
        """The viewer path of a person (the one ``desktop_attach`` gives her web session;
        ``desktop_start`` through the API token answered a view-only one), or one carrying
        ``token``."""
        token = token or self.token(desktop.desktop_session_id)
        return f"/vnc/{desktop.desktop_session_id}/{token}/"

    def socket_url(self, desktop: Desktop, token: str | None = None) -> str:
        return f"{self.ws_base}{self.viewer_path(desktop, token)}websockify"

    def relay_ops(self, op: str) -> int:
        """``op`` requests the relay received so far (from its op log)."""
        return OP_LINE.findall(self.relay.log_text()).count(op)

    def channel_opens(self) -> int:
        """``channel.open`` requests the relay received so far."""
        return self.relay_ops("channel.open")

    def server_channels(self) -> int:
        try:
            return int(self.relays.get(self.relay_id).open_channels)
        except Exception:
            return 0

    def viewers(self, desktop_session_id: str | None = None) -> int:
        return int(self.app.state.parts.viewer.registry.count(desktop_session_id))

    async def person_headers(self) -> dict[str, str]:
        """The seeded user signed in to the web app: her session cookie and CSRF token."""
        if not self._person:
            body = {"username": self.seed.user["username"], "password": self.seed.user["password"]}
            async with httpx.AsyncClient(base_url=self.url, timeout=scaled(30)) as client:
                login = await client.post("/api/v1/login", json=body)
            assert login.status_code == 200, login.text
            self._person = {
                "Cookie": f"relaydesk_session={login.cookies['relaydesk_session']}",
                "X-CSRF-Token": login.json()["csrf_token"],
            }
        return self._person

    async def action(self, name: str, *, person: bool = False, **args: Any) -> Any:
        """Call a typed action as the seeded user (``POST /api/v1/actions/{name}``): with her
        API token (an agent), or as a person signed in to the web app (``person``)."""
        body = {"conversation_id": self.seed.conversation_id, **args}
        bearer = {"Authorization": f"Bearer {self.seed.api_token}"}
        headers = await self.person_headers() if person else bearer
        async with httpx.AsyncClient(base_url=self.url, timeout=scaled(30)) as client:
            response = await client.post(f"/api/v1/actions/{name}", json=body, headers=headers)
        assert response.status_code == 200, response.text
        return response.json()

    async def start_desktop(self, slot: str = "main", *, paint: bool = False) -> Desktop:
        """``desktop_start`` through the server: the inventory records it, a viewer URL back.

        ``paint`` gives the root window a fixed many-coloured picture (:func:`paint_root`)."""
        answer = await self.action("desktop_start", slot=slot, geometry="1280x800")
        row = answer.get("result", answer)
        sid = row["desktop"]["desktop_session_id"]
        status = await self.relays.request(self.relay_id, "desktop.status", {}, 10.0)
        ports = next(d for d in status["desktops"] if d["desktop_session_id"] == sid)
        desktop = Desktop(
            sid,
            slot,
            ports["display"],
            ports["vnc_port"],
            ports["websockify_port"],
            row["viewer_url"],
        )
        self.desktops.append(desktop)
        if paint:
            await asyncio.to_thread(paint_root, desktop.display)
        return desktop

    async def stop_desktop(self, desktop: Desktop) -> None:
        """``desktop_stop_confirm`` through the server (compare-and-stop), by a person (the
        tests' people type into the desktop, and an agent may not stop it from under them)."""
        answer = await self.action(
            "desktop_stop_confirm",
            person=True,
            relay=self.relay_id,
            kind="virtual",
            slot=desktop.slot,
            desktop_session_id=desktop.desktop_session_id,
        )
        assert answer.get("result", answer)["stopped"], answer

    def start_relay(self) -> ManagedProcess:
        self.relay = _start_relay(self.tracker, self.seed, self.url, self.relay_env)
        return self.relay


def _start_relay(
    tracker: ProcessTracker, seed: Seed, url: str, env: Mapping[str, str]
) -> ManagedProcess:
    token_file = seed.data_dir / "relay.token"
    token_file.write_text(seed.relay_token)
    token_file.chmod(0o600)
    argv = relaydesk_argv("relay", "--server", url, "--token-file", str(token_file))
    seed.use_relay_authority()
    # Debug level: the relay's op log, which the tests count.
    full_env = {**seed.env(), **DESKTOP_ENV, "RELAYDESK_LOG_LEVEL": "debug", **env}
    return tracker.start(argv, name="relay", env=full_env)


def paint_root(display: str, width: int = 1280, height: int = 800) -> None:
    """Give the root window a fixed, many-coloured background (stays: nothing repaints it)."""
    conn = xdisplay.Display(display)
    try:
        screen = conn.screen()
        root = screen.root
        pixmap = root.create_pixmap(width, height, screen.root_depth)
        colours = [0x204080, 0xE04020, 0x20C060, 0xF0F0F0, 0x101010, 0xC0A000, 0x8020C0]
        for index, colour in enumerate(colours):
            gc = root.create_gc(foreground=colour)
            band = height // len(colours)
            pixmap.fill_rectangle(gc, 0, index * band, width, band + 1)
            gc.change(foreground=colours[-1 - index])
            pixmap.fill_rectangle(gc, index * 150 + 40, 40, 100, height - 80)
            gc.free()
        root.change_attributes(background_pixmap=pixmap)
        root.clear_area(0, 0, width, height)
        pixmap.free()
        conn.sync()
    finally:
        conn.close()


def capture(display: str) -> np.ndarray:
    """The display's pixels as an ``(h, w, 3)`` RGB array, via mss."""
    with mss.MSS(display=display) as grabber:
        shot = grabber.grab(grabber.monitors[0])
        bgra = np.frombuffer(shot.bgra, dtype=np.uint8).reshape(shot.height, shot.width, 4)
    return bgra[:, :, 2::-1].copy()


@contextlib.asynccontextmanager
async def viewer_stack(
    workdir: Path,
    relay_env: Mapping[str, str] | None = None,
    server_settings: Mapping[str, Any] | None = None,
    *,
    co_located: bool = False,
) -> AsyncIterator[ViewerStack]:
    """Server (with its real inventory; ``server_settings`` override its ``Settings``) + relay
    (``relay_env`` added to its environment; ``co_located``: registered as on the server's
    host)."""
    seed = await seed_database(workdir / "data", co_located=co_located)
    tracker = ProcessTracker(workdir / "processes")
    env = dict(relay_env or {})
    # A stack opened inside another's lifetime hands the outer one its X authority back.
    outer_authority = os.environ.get("XAUTHORITY")
    async with inprocess_server(seed, **(server_settings or {})) as (app, url):
        relay = _start_relay(tracker, seed, url, env)
        stack = ViewerStack(app, url, seed, tracker, relay, relay_env=env)
        try:
            await wait_until(lambda: stack.relays.is_connected(stack.relay_id), 20, "the relay")
            yield stack
        finally:
            for desktop in stack.desktops:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(stack.stop_desktop(desktop), 10)
            # Off the loop: the relay closes its connection to this server as it stops, and
            # every other in-process server on this loop keeps answering its own relay.
            await asyncio.to_thread(tracker.cleanup)
            await stop_desktops_in(seed.data_dir / "relay-state")
            if outer_authority is not None:
                os.environ["XAUTHORITY"] = outer_authority
            else:
                os.environ.pop("XAUTHORITY", None)


def pointer_position(display: str) -> tuple[int, int]:
    conn = xdisplay.Display(display)
    try:
        reply = conn.screen().root.query_pointer()
        return int(reply.root_x), int(reply.root_y)
    finally:
        conn.close()


def without_cursor(frame: np.ndarray, display: str, size: int = 32) -> np.ndarray:
    """``frame`` with the pointer's box blanked.

    x11vnc composites the cursor into the framebuffer for clients that do not take cursor
    shapes separately; an X capture never contains it.
    """
    x, y = pointer_position(display)
    masked = frame.copy()
    masked[max(0, y - size) : y + size, max(0, x - size) : x + size] = 0
    return masked
