"""Screenshots and zooms as a computer-use door shows them: scaled to the declared display.

The relay scales the screenshot (its preview at the display's width); when the preview's height
differs from the declared one (a declared display of another aspect ratio) the door resizes it
to the exact size, so the image and the coordinate mapping always agree.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import Final

from PIL import Image

from server.computer_use.display import Display
from server.computer_use.session import DoorCall
from wire.screen_coords import MAX_SCALE, MAX_ZOOM_PIXELS, MAX_ZOOM_SIDE

MEDIA_TYPE: Final = "image/png"


@dataclass(frozen=True)
class Shot:
    """A PNG (base64) the model sees, and its size."""

    data: str
    width: int
    height: int

    @property
    def data_url(self) -> str:
        return f"data:{MEDIA_TYPE};base64,{self.data}"


def _resized(data: str, size: tuple[int, int]) -> str:
    image = Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")
    buffer = io.BytesIO()
    image.resize(size, Image.Resampling.BILINEAR).save(buffer, "PNG", compress_level=1)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


async def screenshot(call: DoorCall, display: Display) -> Shot:
    """The screen at the display's size; its revision becomes the session's guard."""
    extra = {"preview_max_width": display.shown[0]} if display.scaled else {}
    answer = await call.screen("screenshot", format="png", **extra)
    call.session.revision = str(answer["screen_revision"])
    if not display.scaled:
        return Shot(str(answer["image"]), int(answer["width"]), int(answer["height"]))
    preview = answer["preview"]
    data, size = str(preview["image"]), (int(preview["width"]), int(preview["height"]))
    if size != display.shown:
        data, size = _resized(data, display.shown), display.shown
    return Shot(data, *size)


async def zoom(call: DoorCall, display: Display, box: tuple[int, int, int, int]) -> Shot:
    """The screen region under display box ``(x0, y0, x1, y1)`` at full resolution, enlarged
    (by a whole factor where it fits) to fill at most the display."""
    x0, y0 = display.to_screen(box[0], box[1])
    x1, y1 = display.to_screen(box[2], box[3])
    width, height = max(1, x1 - x0), max(1, y1 - y0)
    fit = min(display.shown[0] / width, display.shown[1] / height, float(MAX_SCALE))
    scale = max(1, int(fit))
    while scale > 1 and (
        max(width, height) * scale > MAX_ZOOM_SIDE or width * height * scale**2 > MAX_ZOOM_PIXELS
    ):
        scale -= 1
    region = {"x": x0, "y": y0, "width": width, "height": height}
    answer = await call.screen("zoom", region=region, scale=scale, format="png")
    return Shot(str(answer["image"]), int(answer["width"]), int(answer["height"]))
