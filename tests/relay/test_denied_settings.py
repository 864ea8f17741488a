"""Denied apps are configured once, for every screen of a relay: the relay's own setting
(``RELAYDESK_DENY_APPS`` as its settings read it) masks its virtual desktops' screens and the
host helper's real screen, even where the process's environment does not carry it; the host
helper's own setting stays in force whatever a relay sends.

A private Xvfb with a real X client's windows stands in for each screen; the host helper runs
in-process on a real loopback port (docs/host-helper.md, docs/configuration.md)."""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from Xlib import display as xdisplay

from host_helper.screen import relay_denied
from relay.config import RelaySettings
from relay.local_desktop import HostHelperClient, LocalDesktop
from relay.policy import DENY_APPS_HEADER, DENY_ENV, LEGACY_DENY_ENV, DeniedApps
from relay.service import RelayService
from tests.host_helper.conftest import TOKEN, Helper, helper_config, running_helper
from tests.support.xvfb import XvfbServer, private_xvfb
from wire.errors import InvalidInput

pytestmark = pytest.mark.integration

SECRET = (100, 100, 200, 200)  # x, y, width, height of the denied app's window
PLAIN = (400, 100, 150, 150)


@pytest.fixture(scope="module")
def screen() -> Iterator[XvfbServer]:
    """A screen with a window of ``secretapp`` (red) and one of ``plainapp`` (blue)."""
    with private_xvfb(800, 600) as server:
        apps = ((SECRET, 0xFF0000, "secretapp"), (PLAIN, 0x0000FF, "plainapp"))
        conns = [_mapped(server.display, *app) for app in apps]  # one X client each
        try:
            yield server
        finally:
            for conn in conns:
                conn.close()


def _mapped(name: str, rect: tuple[int, int, int, int], color: int, app: str) -> Any:
    conn = xdisplay.Display(name)
    screen = conn.screen()
    x, y, w, h = rect
    window = screen.root.create_window(x, y, w, h, 0, screen.root_depth, background_pixel=color)
    window.set_wm_class(app, app.title())
    window.map()
    conn.sync()
    return conn


@pytest.fixture(autouse=True)
def _no_process_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's environment never says which apps are denied."""
    monkeypatch.delenv(DENY_ENV, raising=False)
    monkeypatch.delenv(LEGACY_DENY_ENV, raising=False)


def _pixels(shot: dict[str, Any]) -> np.ndarray:
    image = Image.open(io.BytesIO(base64.b64decode(shot["image"]))).convert("RGB")
    return np.asarray(image)


def _masked(pixels: np.ndarray) -> bool:
    """The secret window is black and the plain one still blue."""
    x, y, w, h = SECRET
    px, py, pw, ph = PLAIN
    assert (pixels[py : py + ph, px : px + pw] == (0, 0, 255)).all(), "the allowed window changed"
    return not pixels[y : y + h, x : x + w].any()


def _relay_settings(tmp_path: Path, **extra: str) -> RelaySettings:
    environ = {"RELAYDESK_RELAY_TOKEN": "t", "RELAYDESK_DATA_DIR": str(tmp_path), **extra}
    return RelaySettings.from_env("http://127.0.0.1:1", None, environ=environ)


async def test_the_relays_setting_masks_its_screen_without_the_process_environment(
    screen: XvfbServer, tmp_path: Path
) -> None:
    relay = RelayService(_relay_settings(tmp_path, RELAYDESK_DENY_APPS="SecretApp"))
    service = relay.screen()
    try:
        shot = await service.answer(screen.display, "screenshot", {})
        assert _masked(_pixels(shot)), "the relay's denied app was shown to the agent"
    finally:
        await relay.screen.aclose()


async def test_a_relay_without_the_setting_masks_nothing(
    screen: XvfbServer, tmp_path: Path
) -> None:
    relay = RelayService(_relay_settings(tmp_path))
    try:
        shot = await relay.screen().answer(screen.display, "screenshot", {})
        assert not _masked(_pixels(shot))
    finally:
        await relay.screen.aclose()


@pytest.fixture
async def helper(screen: XvfbServer) -> AsyncIterator[Helper]:
    async with running_helper(helper_config(screen.display)) as running:
        yield running


def _local(helper: Helper, denied: DeniedApps) -> LocalDesktop:
    local = LocalDesktop(HostHelperClient(helper.url, TOKEN))
    local.denied_apps = denied
    return local


RUNNING: Any = {"desktop_session_id": "s-1", "kind": "local", "slot": "main", "state": "running"}


async def test_the_host_helpers_screen_follows_the_relays_setting(helper: Helper) -> None:
    local = _local(helper, DeniedApps(frozenset({"secretapp"})))
    try:
        shot = await local.screen(RUNNING, "screenshot", {})
        assert _masked(_pixels(dict(shot))), "the relay's denied app was shown on the real screen"
        plain = _local(helper, DeniedApps())
        try:
            assert not _masked(_pixels(dict(await plain.screen(RUNNING, "screenshot", {}))))
        finally:
            await plain.aclose()
    finally:
        await local.aclose()


async def test_the_host_helpers_own_setting_holds_whatever_the_relay_sends(
    screen: XvfbServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DENY_ENV, "secretapp")
    async with running_helper(helper_config(screen.display)) as running:
        monkeypatch.delenv(DENY_ENV)
        local = _local(running, DeniedApps())
        try:
            assert _masked(_pixels(dict(await local.screen(RUNNING, "screenshot", {}))))
        finally:
            await local.aclose()


async def test_a_bad_header_is_refused_naming_it(helper: Helper) -> None:
    for bad in ("secretapp", "[1]", '{"a": 1}', "[" + ",".join(['"a"'] * 300) + "]"):
        async with helper.http.post(
            f"{helper.url}/v1/screen/screenshot",
            json={},
            headers={**helper.headers, DENY_APPS_HEADER: bad},
        ) as resp:
            body = await resp.json()
        assert resp.status == 400, body
        assert DENY_APPS_HEADER in str(body)
    with pytest.raises(InvalidInput):
        relay_denied("nope")
