"""Fixtures for host helper tests: a private Xvfb stands in for the user's real screen.

The helper runs in-process (aiohttp on a free loopback port) so tests can look at its
lifecycle state; ``test_cli.py`` runs the real ``relaydesk host-helper`` command.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import psutil
import pytest
from aiohttp import web

from host_helper.app import DESKTOPS_KEY, build_app
from host_helper.config import HelperSettings
from host_helper.desktop import LocalDesktops
from tests.support.processes import free_port, scaled
from tests.support.screens import private_screen, recorder_on
from tests.support.xvfb import XvfbServer

TOKEN = "hh_test_token_that_must_never_be_logged"


def x11vnc_on(display: str) -> list[psutil.Process]:
    """Live x11vnc processes serving ``display`` (other engineers' desktops use other ones)."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE or "x11vnc" not in (proc.info["name"] or ""):
            continue
        if "-display" in cmdline and cmdline[cmdline.index("-display") + 1] == display:
            found.append(proc)
    return found


# The stand-in for the user's real screen, and a recorder of the input that reaches it.
host_screen = private_screen(800, 600)
recorder = recorder_on("host_screen")


@dataclasses.dataclass
class Helper:
    """An in-process helper and an authenticated client session for it."""

    url: str
    desktops: LocalDesktops
    http: aiohttp.ClientSession
    display: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}"}

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.http.request(
            method, f"{self.url}{path}", json=body, headers=self.headers
        ) as resp:
            return resp.status, await resp.json()

    async def start(self) -> dict[str, Any]:
        status, body = await self.call("POST", "/v1/local/start", {})
        assert status == 200, body
        return dict(body)

    async def stop(self, session_id: str) -> dict[str, Any]:
        status, body = await self.call(
            "POST", "/v1/local/stop", {"local_screen_session_id": session_id}
        )
        assert status == 200, body
        return dict(body)


@contextlib.asynccontextmanager
async def running_helper(config: HelperSettings) -> AsyncIterator[Helper]:
    app = build_app(config)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=scaled(5))
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    try:
        async with aiohttp.ClientSession() as http:
            yield Helper(
                f"http://{config.host}:{config.port}", app[DESKTOPS_KEY], http, config.display
            )
    finally:
        await runner.cleanup()  # stops the desktop it started


def helper_config(display: str, **overrides: Any) -> HelperSettings:
    values: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": free_port(),
        "token": TOKEN,
        "display": display,
        "allow_remote_desktop": True,
        "start_timeout_s": scaled(15),
        "probe_timeout_s": scaled(3),
        "watchdog_interval_s": 0.5,
    }
    return HelperSettings(**(values | overrides))


@pytest.fixture
async def helper(host_screen: XvfbServer) -> AsyncIterator[Helper]:
    async with running_helper(helper_config(host_screen.display)) as running:
        yield running
    assert not x11vnc_on(host_screen.display), "the helper left x11vnc running"
