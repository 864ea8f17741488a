"""The same keys, chords and text land identically on a virtual desktop and on the host screen.

One screen implementation serves both: the relay's screen service on a desktop's display, and
the host helper (HTTP) on the screen it shares. Each display is a private Xvfb with an X
recorder; the recorded key events must be the same on both.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from relay.screen.service import ScreenService
from tests.host_helper.conftest import Helper
from tests.support.screens import private_screen, recorder_on, screen_service
from tests.support.xrecorder import XRecorder
from tests.support.xvfb import XvfbServer

pytestmark = pytest.mark.integration

KEYS = ["pgup", "rctrl", "XF86AudioMute", "super+e", "ctrl+shift+t", "alt+F4", "Return"]
TEXTS = ["Hello, wörld! ☃", "€ł½µ@", "tab\there\nnew line"]  # the second: AltGr characters


desktop_screen = private_screen(800, 600)
desktop_recorder = recorder_on("desktop_screen")
service = screen_service()


def keys_of(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (e["type"], e["keysym"], e["state"], e["char"])
        for e in events
        if e["type"] in ("KeyPress", "KeyRelease")
    ]


@pytest.mark.parametrize(
    ("action", "args"),
    [("key", {"keys": k}) for k in KEYS] + [("type", {"text": t}) for t in TEXTS],
)
async def test_keys_land_the_same_on_a_virtual_desktop_and_on_the_host_screen(
    helper: Helper,
    recorder: XRecorder,
    service: ScreenService,
    desktop_screen: XvfbServer,
    desktop_recorder: XRecorder,
    action: str,
    args: dict[str, Any],
) -> None:
    await service.run(desktop_screen.display, action, args)
    status, body = await helper.call("POST", f"/v1/screen/{action}", args)
    assert status == 200, body

    on_desktop = keys_of(await asyncio.to_thread(desktop_recorder.drain))
    on_host = keys_of(await asyncio.to_thread(recorder.drain))
    assert on_desktop, "nothing was typed"
    assert on_host == on_desktop
    if action == "type":
        typed = "".join(c for kind, _, _, c in on_host if kind == "KeyPress" and c)
        assert typed.replace("\r", "\n") == args["text"]
