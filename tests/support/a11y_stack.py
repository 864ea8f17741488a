"""A server, a real relay and one real desktop running chosen apps, for the accessibility
tests and benchmark: actions are called over HTTP with the seeded agent's bearer token."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.processes import ProcessTracker, scaled
from tests.support.stack import (
    Seed,
    inprocess_server,
    person_headers,
    seed_database,
    start_relay,
    wait_until,
)
from wire.ids import RelayId

SUPPORT = Path(__file__).resolve().parent
FORM_APP = SUPPORT / "a11y_app.py"
QT_FORM_APP = SUPPORT / "a11y_qt_app.py"
TEST_PAGE = SUPPORT / "a11y_page.html"


@dataclass
class A11yStack:
    app: Any
    url: str
    seed: Seed
    relay_id: str
    session_id: str
    display: str
    shared: Path  # a directory the desktop's user may write (state files, browser profiles)
    relay_log: Any = None

    async def act(
        self, name: str, *, person: bool = False, **body: Any
    ) -> tuple[int, dict[str, Any]]:
        """Call an action as the seeded agent (its API token) or, ``person``, as the seeded
        user signed in to the web app."""
        payload = {"conversation_id": self.seed.conversation_id, **body}
        headers = {"Authorization": f"Bearer {self.seed.api_token}"}
        if person:
            headers = await person_headers(self.url, self.seed)
        async with httpx.AsyncClient(base_url=self.url, timeout=scaled(60)) as client:
            response = await client.post(f"/api/v1/actions/{name}", json=payload, headers=headers)
        return response.status_code, response.json()

    async def ok(self, name: str, *, person: bool = False, **body: Any) -> dict[str, Any]:
        status, result = await self.act(name, person=person, **body)
        assert status == 200, result
        assert result["ok"] is True
        return result

    def state(self, file: str = "form.json") -> dict[str, Any]:
        """What a test app last wrote to its state file (``{}`` before it wrote any)."""
        try:
            data: dict[str, Any] = json.loads((self.shared / file).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data

    async def wait_app(self, name: str, timeout: float = 30) -> dict[str, Any]:
        """The running app ``name`` once it has a window on the accessibility bus."""
        deadline = time.monotonic() + scaled(timeout)
        while True:
            listed = await self.ok("desktop_apps")
            for app in listed["running"]:
                if app["name"] == name and app["windows"]:
                    found: dict[str, Any] = app
                    return found
            assert time.monotonic() < deadline, listed
            await asyncio.sleep(0.2)


# What a desktop's apps read is copied into the shared directory: the desktop's user may not
# read the checkout (a private clone, a home directory).
SHARED_FILES = (FORM_APP, QT_FORM_APP, TEST_PAGE, SUPPORT / "a11y_plain.html")
FORM = "/usr/bin/python3 {shared}/a11y_app.py {shared}/form.json"
QT_FORM = "/usr/bin/python3 {shared}/a11y_qt_app.py {shared}/qt-form.json"


def x_window_geometry(display_name: str, title: str) -> tuple[int, int, int, int] | None:
    """The on-screen geometry of the top-level X window titled ``title``, read with Xlib."""
    from Xlib import display

    conn = display.Display(display_name)
    try:
        root = conn.screen().root
        pending = list(root.query_tree().children)
        while pending:
            window = pending.pop()
            if window.get_wm_name() == title:
                geometry = window.get_geometry()
                origin = window.translate_coords(root, 0, 0)
                return (-origin.x, -origin.y, geometry.width, geometry.height)
            pending.extend(window.query_tree().children)
        return None
    finally:
        conn.close()


def chromium_app(shared: Path, name: str, *flags: str, page: str = "a11y_page.html") -> str:
    """A Chromium command line on a test page, with its own profile under ``shared``."""
    return " ".join(
        [
            "chromium",
            f"--user-data-dir={shared / name}",
            "--no-first-run",
            "--no-default-browser-check",
            "--password-store=basic",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            *flags,
            f"file://{shared / page}",
        ]
    )


@contextlib.asynccontextmanager
async def a11y_stack(
    root: Path, apps: list[str], env: dict[str, str] | None = None, profile: str = "minimal"
) -> AsyncIterator[A11yStack]:
    """``apps``: start-up command lines; ``{shared}`` in them is the shared directory."""
    shared = Path(tempfile.mkdtemp(prefix="relaydesk-a11y-"))
    os.chmod(shared, 0o777)  # noqa: S103 - the desktop user's exchange directory, removed after
    for source in SHARED_FILES:
        shutil.copyfile(source, shared / source.name)
        os.chmod(shared / source.name, 0o644)
    seed = await seed_database(root / "data")
    tracker = ProcessTracker(root / "processes")
    relay_env = {
        "RELAYDESK_DESKTOP_APPS": ",".join(a.replace("{shared}", str(shared)) for a in apps),
        "DISPLAY": "",
        **(env or {}),
    }
    try:
        async with inprocess_server(seed) as (app, url):
            relay = start_relay(
                tracker.start, seed, url, env=relay_env, extra_args=("--stop-desktops-on-exit",)
            )
            relay_id = seed.relay["relay_id"]
            try:
                await wait_until(
                    lambda: app.state.parts.relays.is_connected(RelayId(relay_id)),
                    20,
                    "the relay to connect",
                )
                stack = A11yStack(app, url, seed, relay_id, "", "", shared, relay)
                started = await stack.ok("desktop_start", geometry="1280x800", profile=profile)
                stack.session_id = started["desktop"]["desktop_session_id"]
                stack.display = started["desktop"]["display"]
                yield stack
            except BaseException:
                print(relay.log_tail())
                raise
            finally:
                # Off the loop: the relay closes its connection to this server as it stops,
                # and a server that cannot answer holds the relay's exit for its close timeout.
                await asyncio.to_thread(tracker.cleanup)
    finally:
        # A browser's helpers may still be writing there for a moment: best effort.
        shutil.rmtree(shared, ignore_errors=True)
