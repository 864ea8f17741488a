"""The ``effect`` verdict of the screen's input actions on a real Xvfb with a real Tk window:
a button that changes when clicked, a text field, a label and empty space (known truths)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from Xlib import X, display

from relay.screen.effect import SETTLE_S
from relay.screen.service import ScreenService
from tests.support import effect_app
from tests.support.processes import scaled
from tests.support.screens import private_screen, screen_service
from tests.support.xvfb import XvfbServer
from wire.guard import crop_rect, cut, encode_crop

pytestmark = pytest.mark.integration

ORIGIN = (100, 100)
xvfb = private_screen(1280, 800)
service = screen_service()


def at(point: tuple[int, int]) -> tuple[int, int]:
    return ORIGIN[0] + point[0], ORIGIN[1] + point[1]


@pytest.fixture(scope="module")
def app(xvfb: XvfbServer) -> Iterator[subprocess.Popen[str]]:
    env = {**os.environ, "DISPLAY": xvfb.display}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.effect_app", *map(str, ORIGIN)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        yield process
    finally:
        process.terminate()
        process.wait(timeout=scaled(10))


async def _click(svc: ScreenService, disp: str, point: tuple[int, int]) -> dict[str, Any]:
    shot = await svc.screenshot(disp, {})
    rect = crop_rect(point, (shot.width, shot.height))
    guard = {"crop": encode_crop(cut(shot.pixels, rect)), "rect": rect.to_dict()}
    return await svc.run(disp, "click", {"x": point[0], "y": point[1], "guard": guard})


async def test_a_click_on_a_button_that_changes_is_changed_at_once(xvfb, app, service):
    result = await _click(service, xvfb.display, at(effect_app.BUTTON))
    assert result["effect"] == "changed"
    assert 0 <= result["effect_ms"] < SETTLE_S * 1000


@pytest.mark.parametrize("where", [effect_app.EMPTY, effect_app.LABEL])
async def test_a_click_on_nothing_clickable_is_no_visible_change(xvfb, app, service, where):
    await _click(service, xvfb.display, at(effect_app.EMPTY))  # settle the last focus change
    result = await _click(service, xvfb.display, at(where))
    assert result["effect"] == "no_visible_change"
    assert "effect_ms" not in result


async def test_typing_into_the_focused_field_is_changed_and_a_bare_shift_is_not(xvfb, app, service):
    await _click(service, xvfb.display, at(effect_app.FIELD))
    typed = await service.run(xvfb.display, "type", {"text": "abc"})
    assert typed["effect"] == "changed"
    shift = await service.run(xvfb.display, "key", {"keys": "shift"})
    assert shift["effect"] == "no_visible_change"


async def test_keys_with_no_window_to_receive_them_are_unverifiable(xvfb, app, service):
    conn = display.Display(xvfb.display)
    try:
        conn.set_input_focus(X.PointerRoot, X.RevertToPointerRoot, X.CurrentTime)
        conn.sync()
    finally:
        conn.close()
    await service.run(xvfb.display, "move", {"x": 1200, "y": 750})  # off the window
    result = await service.run(xvfb.display, "type", {"text": "lost"})
    assert result["effect"] == "unverifiable"


async def test_a_move_is_not_judged_and_held_keys_are(xvfb, app, service):
    moved = await service.run(xvfb.display, "move", {"x": 5, "y": 5})
    assert moved["effect"] == "unverifiable" and "effect_ms" not in moved
    await _click(service, xvfb.display, at(effect_app.FIELD))
    down = await service.run(xvfb.display, "key_down", {"keys": "x"})
    assert down["effect"] == "changed"  # the character lands in the field
    up = await service.run(xvfb.display, "key_up", {"keys": "x"})
    assert up["effect"] == "no_visible_change"
