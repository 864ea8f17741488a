"""Zoom and grid in the screen service, on a real Xvfb: the relay's half, which the host helper
runs too."""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
import pytest
from PIL import Image

from relay.screen.service import ScreenService
from tests.support.screens import private_screen, recorder_on, screen_service
from tests.support.xrecorder import XRecorder
from tests.support.xvfb import XvfbServer
from wire.capture import Base64BandedPng
from wire.errors import ErrorCode, OpError
from wire.guard import CropRect
from wire.screen_coords import Frame, grid_for

pytestmark = pytest.mark.integration

WIDTH, HEIGHT = 1024, 768
REGION = {"x": 300, "y": 200, "width": 160, "height": 120}
# Labels sit in a strip along the top and left edges of the image, at most this wide.
LABEL_STRIP = (20, 48)


xvfb = private_screen(WIDTH, HEIGHT)
recorder = recorder_on("xvfb")
service = screen_service()


def decoded(image: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(image))).convert("RGB"))


def paint_pattern(rec: XRecorder) -> None:
    """Blocks of many colours, a few pixels wide, so any offset or scaling error shows."""
    for index, x in enumerate(range(0, WIDTH, 37)):
        rec.paint(x, 0, 19, HEIGHT, (index * 0x3B5D1F) & 0xFFFFFF)
    for index, y in enumerate(range(0, HEIGHT, 29)):
        rec.paint(0, y, WIDTH, 7, (index * 0x1F7A33 + 0x404040) & 0xFFFFFF)


async def screen_pixels(svc: ScreenService, display: str) -> np.ndarray:
    return decoded((await svc.run(display, "screenshot", {}))["image"])


def crop(pixels: np.ndarray, region: dict[str, int]) -> np.ndarray:
    x, y, w, h = (region[k] for k in ("x", "y", "width", "height"))
    return pixels[y : y + h, x : x + w]


def overlay_only(plain: np.ndarray, drawn: np.ndarray, columns: set[int], rows: set[int]) -> None:
    """Every pixel that differs lies on a grid line or in the label strips."""
    changed = np.any(plain != drawn, axis=2)
    ys, xs = np.nonzero(changed)
    on_line = np.isin(xs, list(columns)) | np.isin(ys, list(rows))
    in_labels = (ys < LABEL_STRIP[0]) | (xs < LABEL_STRIP[1])
    assert changed.any()
    assert (on_line | in_labels).all(), list(
        zip(xs[~(on_line | in_labels)][:5], ys[:5], strict=False)
    )
    for column in columns - set(range(LABEL_STRIP[1])):  # every line drawn, below the labels
        assert changed[LABEL_STRIP[0] :, column].all(), column


async def test_a_zoom_at_scale_1_is_the_screenshot_crop_and_its_own_capture(
    xvfb: XvfbServer, recorder: XRecorder, service: ScreenService
) -> None:
    paint_pattern(recorder)
    full = await screen_pixels(service, xvfb.display)
    answer = await service.answer(xvfb.display, "zoom", {"region": REGION})
    assert (answer["width"], answer["height"]) == (160, 120)
    assert answer["region"] == REGION and answer["scale"] == 1
    assert answer["screen"] == {"width": WIDTH, "height": HEIGHT}
    assert answer["coordinates"] == "zoom"
    assert np.array_equal(decoded(answer["image"]), crop(full, REGION))
    # the image is the capture: it travels once
    assert "png" not in answer["capture"]
    kept = Base64BandedPng.from_wire(answer["capture"], answer["image"])
    assert np.array_equal(kept.pixels(), crop(full, REGION))


@pytest.mark.parametrize("scale", [2, 3, 4])
async def test_a_whole_scale_makes_each_pixel_a_block(
    xvfb: XvfbServer, recorder: XRecorder, service: ScreenService, scale: int
) -> None:
    paint_pattern(recorder)
    expected = crop(await screen_pixels(service, xvfb.display), REGION)
    answer = await service.answer(xvfb.display, "zoom", {"region": REGION, "scale": scale})
    image = decoded(answer["image"])
    assert image.shape == (120 * scale, 160 * scale, 3)
    assert np.array_equal(image, expected.repeat(scale, axis=0).repeat(scale, axis=1))
    # the kept capture is the region at full resolution, not the enlarged image
    kept = Base64BandedPng.from_wire(answer["capture"])
    assert np.array_equal(kept.pixels(), expected)


async def test_a_fractional_scale_is_smooth_and_sized_as_documented(
    xvfb: XvfbServer, service: ScreenService
) -> None:
    region = {"x": 0, "y": 0, "width": 333, "height": 201}
    answer = await service.answer(
        xvfb.display, "zoom", {"region": region, "scale": 2.5, "format": "jpeg"}
    )
    assert (answer["width"], answer["height"], answer["format"]) == (833, 503, "jpeg")
    assert decoded(answer["image"]).shape == (503, 833, 3)


async def test_a_screenshot_grid_is_only_an_overlay(
    xvfb: XvfbServer, recorder: XRecorder, service: ScreenService
) -> None:
    paint_pattern(recorder)
    plain = await service.answer(xvfb.display, "screenshot", {})
    drawn = await service.answer(xvfb.display, "screenshot", {"grid": True})
    assert drawn["grid"] == {"coordinates": "pixels", "step": 100}
    grid = grid_for(Frame.pixels(), CropRect(0, 0, WIDTH, HEIGHT), (WIDTH, HEIGHT))
    columns = {line.position for line in grid.columns}
    assert columns == set(range(0, WIDTH, 100))
    overlay_only(
        decoded(plain["image"]),
        decoded(drawn["image"]),
        columns,
        {line.position for line in grid.rows},
    )
    # the capture beside the image is the screen as it is
    assert "png" in drawn["capture"]
    kept = Base64BandedPng.from_wire(drawn["capture"])
    assert np.array_equal(kept.pixels(), decoded(plain["image"]))


async def test_a_zoom_grid_is_labelled_in_normalized_coordinates_of_its_frame(
    xvfb: XvfbServer, recorder: XRecorder, service: ScreenService
) -> None:
    paint_pattern(recorder)
    args: dict[str, Any] = {"region": REGION, "scale": 4}
    plain = decoded((await service.answer(xvfb.display, "zoom", args))["image"])
    drawn = await service.answer(
        xvfb.display, "zoom", {**args, "grid": {"coordinates": "normalized"}}
    )
    assert drawn["grid"]["coordinates"] == "normalized"
    frame = Frame.normalized(CropRect(0, 0, WIDTH, HEIGHT))
    grid = grid_for(frame, CropRect(**REGION), (640, 480))
    assert grid.step == drawn["grid"]["step"]
    overlay_only(
        plain,
        decoded(drawn["image"]),
        {line.position for line in grid.columns},
        {line.position for line in grid.rows},
    )


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"region": {"x": 900, "y": 0, "width": 200, "height": 10}}, "region"),
        ({"region": {"x": -1, "y": 0, "width": 20, "height": 10}}, "region"),
        ({"region": {"x": 0, "y": 0, "width": 0, "height": 10}}, "region.width"),
        ({"region": {"x": 0, "y": 0, "width": 10}}, "region"),
        ({}, "region"),
        ({"region": REGION, "scale": 5}, "scale"),
        ({"region": {"x": 0, "y": 0, "width": 1024, "height": 768}, "scale": 4}, "scale"),
        ({"region": REGION, "grid": {"coordinates": "zoom"}}, "coordinates"),
        ({"region": REGION, "grid": {"relative_to": {"x": 0}}}, "grid.relative_to"),
        ({"region": REGION, "format": "gif"}, "format"),
    ],
)
async def test_bad_zoom_arguments_name_the_field(
    xvfb: XvfbServer, service: ScreenService, args: dict[str, Any], field: str
) -> None:
    with pytest.raises(OpError) as error:
        await service.answer(xvfb.display, "zoom", args)
    assert error.value.code is ErrorCode.INVALID_ARGS
    assert error.value.details["field"] == field
