"""Pixels, improved, end to end: normalized coordinates, zoom with its own guarded revision, and
grids, through the server and a real relay on real desktops.

Where input lands is read back from the X server: an event recorder on each desktop
(``tests/support/xrecorder.py``) and the pointer position (``QueryPointer``).
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
import pytest_asyncio
from PIL import Image
from Xlib import display

from tests.integration.test_screen_tool import Stack
from tests.support.recorded import Desktop, recorded_desktops
from wire.guard import CropRect
from wire.screen_coords import Frame, grid_for

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

MAIN = (1280, 800)
SECOND = (800, 600)
REGION = {"x": 600, "y": 300, "width": 200, "height": 120}
# Grid labels sit in strips along the image's top and left edges, at most this wide.
LABEL_STRIP = (20, 48)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    sizes = {"main": MAIN, "second": SECOND}
    async with recorded_desktops(tmp_path_factory.mktemp("pixels"), sizes) as parts:
        app, url, seed, relay_id, desktops = parts
        yield Stack(app, url, seed, relay_id, desktops["main"], desktops["second"])


@pytest.fixture
def main(stack: Stack) -> Desktop:
    stack.main.recorder.drain()
    return stack.main


def _presses(events: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(ev["x"], ev["y"]) for ev in events if ev["type"] == "ButtonPress"]


def _pointer(disp: str) -> tuple[int, int]:
    conn = display.Display(disp)
    try:
        reply = conn.screen().root.query_pointer()
        return int(reply.root_x), int(reply.root_y)
    finally:
        conn.close()


def _pixels(image: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(image))).convert("RGB"))


def _crop(pixels: np.ndarray, region: dict[str, int]) -> np.ndarray:
    x, y, w, h = (region[k] for k in ("x", "y", "width", "height"))
    return pixels[y : y + h, x : x + w]


async def _ok(stack: Stack, **body: Any) -> dict[str, Any]:
    status, result = await stack.screen(**body)
    assert status == 200, result
    assert result["source"] == "vision"
    return result


async def _refused(stack: Stack, code: str, **body: Any) -> dict[str, Any]:
    status, result = await stack.screen(**body)
    assert result["ok"] is False and result["error"]["code"] == code, result
    assert status == (400 if code == "invalid_args" else 409)
    error: dict[str, Any] = result["error"]
    return error


def _paint_pattern(desktop: Desktop) -> None:
    """Stripes of many colours a few pixels apart: any offset or scaling error shows."""
    for index, x in enumerate(range(0, desktop.width, 37)):
        desktop.recorder.paint(x, 0, 19, desktop.height, (index * 0x3B5D1F) & 0xFFFFFF)
    for index, y in enumerate(range(0, desktop.height, 29)):
        colour = (index * 0x1F7A33 + 0x404040) & 0xFFFFFF
        desktop.recorder.paint(0, y, desktop.width, 7, colour)


def _expected(value: float, length: int) -> int:
    """The documented rounding: the pixel holding value/1000 of the extent; 1000 is the last."""
    return min(length - 1, math.floor(value * length / 1000))


# -- normalized coordinates ------------------------------------------------------------------


NORMALIZED = [(0, 0), (500, 500), (1000, 1000), (333.3, 666.7), (999.9, 0.4), (123, 987)]


@pytest.mark.parametrize("which", ["main", "second"])
async def test_a_normalized_click_lands_on_the_pixel_of_its_pixel_equivalent(stack, which):
    desktop: Desktop = getattr(stack, which)
    desktop.recorder.drain()
    session = {"desktop_session_id": desktop.session_id}
    shot = await _ok(stack, action="screenshot", **session)
    revision = shot["screen_revision"]
    for nx, ny in NORMALIZED:
        expected = (_expected(nx, desktop.width), _expected(ny, desktop.height))
        clicked = await _ok(
            stack,
            action="click",
            x=nx,
            y=ny,
            coordinates="normalized",
            expected_screen_revision=revision,
            **session,
        )
        assert (clicked["x"], clicked["y"]) == expected
        await _ok(
            stack,
            action="click",
            x=expected[0],
            y=expected[1],
            expected_screen_revision=revision,
            **session,
        )
        assert _presses(desktop.recorder.drain()) == [expected, expected]


async def test_a_normalized_move_without_a_revision_puts_the_pointer_there(stack, main):
    for nx, ny in NORMALIZED:
        await _ok(stack, action="move", x=nx, y=ny, coordinates="normalized")
        assert _pointer(main.display) == (_expected(nx, MAIN[0]), _expected(ny, MAIN[1]))
    # relative to a region (a window's bounds): 0..1000 spans that region
    window = {"x": 100, "y": 50, "width": 401, "height": 301}
    await _ok(stack, action="move", x=500, y=1000, coordinates="normalized", relative_to=window)
    assert _pointer(main.display) == (100 + 200, 50 + 300)


# -- zoom --------------------------------------------------------------------------------------


async def test_a_zoom_is_the_region_of_a_screenshot_at_the_size_asked(stack, main):
    _paint_pattern(main)
    full = _pixels((await _ok(stack, action="screenshot"))["image"])
    zoom = await _ok(stack, action="zoom", region=REGION)
    assert (zoom["width"], zoom["height"], zoom["scale"]) == (200, 120, 1)
    assert zoom["region"] == REGION and zoom["coordinates"] == "zoom"
    assert zoom["screen_revision"].startswith("sr1.")
    assert np.array_equal(_pixels(zoom["image"]), _crop(full, REGION))
    big = await _ok(stack, action="zoom", region=REGION, scale=3)
    assert (big["width"], big["height"]) == (600, 360)
    expected = _crop(full, REGION).repeat(3, axis=0).repeat(3, axis=1)
    assert np.array_equal(_pixels(big["image"]), expected)
    # the same region in normalized coordinates (it covers every pixel it touches)
    normalized = {"x": 468.75, "y": 375, "width": 156.25, "height": 150}
    again = await _ok(stack, action="zoom", region=normalized, coordinates="normalized")
    assert again["region"] == REGION


async def test_a_click_chosen_on_a_zoom_is_refused_when_the_zoomed_region_changed(stack, main):
    zoom = await _ok(stack, action="zoom", region=REGION, scale=2)
    main.recorder.paint(650, 330, 60, 40, 0xFFFFFF)  # inside the zoom, around the point
    error = await _refused(
        stack,
        "stale_screen",
        action="click",
        x=680,
        y=350,
        expected_screen_revision=zoom["screen_revision"],
    )
    assert error["difference"] > error["threshold"]
    assert error["screen_revision"] == zoom["screen_revision"]
    assert main.recorder.drain() == []


async def test_a_click_chosen_on_a_zoom_ignores_changes_outside_the_zoom(stack, main):
    zoom = await _ok(stack, action="zoom", region=REGION, scale=2)
    # Right beside the zoom, within the 128x96 crop a screenshot's guard would compare.
    main.recorder.paint(REGION["x"] - 40, 330, 40, 60, 0x000000)
    main.recorder.paint(REGION["x"] + REGION["width"], 330, 30, 60, 0xFFFFFF)
    clicked = await _ok(
        stack, action="click", x=610, y=350, expected_screen_revision=zoom["screen_revision"]
    )
    assert clicked["guard"]["checked"] is True
    assert _presses(main.recorder.drain()) == [(610, 350)]
    # in the zoom image's own pixels: zoom pixel (21, 101) shows screen pixel (610, 350)
    await _ok(
        stack,
        action="double_click",
        x=21,
        y=101,
        coordinates="zoom",
        expected_screen_revision=zoom["screen_revision"],
    )
    assert _presses(main.recorder.drain()) == [(610, 350), (610, 350)]


async def test_a_screen_pixel_outside_the_zoom_is_refused_with_a_zoom_revision(stack, main):
    zoom = await _ok(stack, action="zoom", region=REGION, scale=2)
    # zoom image pixels sent as screen pixels: outside the zoomed region
    error = await _refused(
        stack,
        "invalid_args",
        action="click",
        x=40,
        y=60,
        expected_screen_revision=zoom["screen_revision"],
    )
    assert error["field"] == "x" and "zoomed region" in error["message"]
    assert main.recorder.drain() == []


# -- grid --------------------------------------------------------------------------------------


async def test_a_grid_is_only_an_overlay_and_the_guard_compares_the_real_screen(stack, main):
    _paint_pattern(main)
    plain = _pixels((await _ok(stack, action="screenshot"))["image"])
    shot = await _ok(stack, action="screenshot", grid=True)
    assert shot["grid"] == {"coordinates": "pixels", "step": 100}
    drawn = _pixels(shot["image"])
    grid = grid_for(Frame.pixels(), CropRect(0, 0, *MAIN), MAIN)
    columns = {line.position for line in grid.columns}
    rows = {line.position for line in grid.rows}
    changed = np.any(plain != drawn, axis=2)
    ys, xs = np.nonzero(changed)
    overlay = np.isin(xs, list(columns)) | np.isin(ys, list(rows))
    overlay |= (ys < LABEL_STRIP[0]) | (xs < LABEL_STRIP[1])
    assert changed[LABEL_STRIP[0] :, 700].all() and overlay.all()
    # A click on a drawn line: the screen there never had the line, and the guard agrees.
    clicked = await _ok(
        stack, action="click", x=700, y=400, expected_screen_revision=shot["screen_revision"]
    )
    assert clicked["guard"]["difference"] == 0.0
    assert _presses(main.recorder.drain()) == [(700, 400)]


async def test_a_normalized_grid_on_a_zoom_labels_what_a_click_would_use(stack, main):
    # the region in normalized coordinates too: REGION's pixels exactly
    region = {"x": 468.75, "y": 375, "width": 156.25, "height": 150}
    zoom = await _ok(
        stack, action="zoom", region=region, scale=4, grid=True, coordinates="normalized"
    )
    assert zoom["region"] == REGION and zoom["grid"]["coordinates"] == "normalized"
    step = zoom["grid"]["step"]
    grid = grid_for(Frame.normalized(CropRect(0, 0, *MAIN)), CropRect(**REGION), (800, 480))
    assert grid.step == step and grid.columns
    line = grid.columns[0]
    # a click at a line's label lands on the screen pixel that line shows
    await _ok(
        stack,
        action="click",
        x=line.label,
        y=450,
        coordinates="normalized",
        expected_screen_revision=zoom["screen_revision"],
    )
    [(x, _)] = _presses(main.recorder.drain())
    assert REGION["x"] + line.position // 4 == x


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "move", "x": 1001, "y": 5, "coordinates": "normalized"}, "x"),
        ({"action": "zoom", "region": {"x": 1200, "y": 0, "width": 100, "height": 50}}, "region"),
        ({"action": "zoom", "region": {"x": 0, "y": 780, "width": 100, "height": 50}}, "region"),
        ({"action": "zoom", "region": {"x": 0, "y": 0, "width": 0, "height": 50}}, "region.width"),
        (
            {"action": "zoom", "region": {"x": 0, "y": 0, "width": 50, "height": 50}, "scale": 5},
            "scale",
        ),
        (
            {"action": "zoom", "region": {"x": 0, "y": 0, "width": 50, "height": 50}, "scale": 0.5},
            "scale",
        ),
        (
            {
                "action": "zoom",
                "region": {"x": 0, "y": 0, "width": 1280, "height": 800},
                "scale": 4,
            },
            "scale",
        ),
        (
            {
                "action": "move",
                "x": 5,
                "y": 5,
                "coordinates": "normalized",
                "relative_to": {"x": 0, "y": 0, "width": 100},
            },
            "relative_to.height",
        ),
        (
            {
                "action": "move",
                "x": 5,
                "y": 5,
                "coordinates": "normalized",
                "relative_to": {"x": 0, "y": 0, "width": 0, "height": 10},
            },
            "relative_to.width",
        ),
        (
            {
                "action": "move",
                "x": 5,
                "y": 5,
                "relative_to": {"x": 0, "y": 0, "width": 9, "height": 10},
            },
            "relative_to",
        ),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(stack, main, body, field):
    error = await _refused(stack, "invalid_args", **body)
    assert error["field"] == field, error
    assert main.recorder.drain() == []
