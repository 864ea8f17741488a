"""A coordinate grid drawn over a screenshot or zoom image, after capture.

Where the lines go and what they say is ``wire.screen_coords.grid_for`` (the same mapping the
server uses for the coordinates agents send back). Only the returned picture gets the
overlay: the capture kept for the stale-screen guard is the screen as it is.

Lines are one pixel wide, the underlying pixel blended half-and-half with magenta (visible on
light and dark backgrounds alike); labels are yellow on black boxes, along the top edge for
columns and along the left edge for rows.
"""

from __future__ import annotations

import math
import threading
from functools import cache, lru_cache
from typing import Final

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from relay.screen.capture import RGBArray
from wire.screen_coords import Grid

LINE_COLOUR: Final = np.array([255, 0, 255], dtype=np.uint16)
LABEL_TEXT: Final = (255, 255, 0)
LABEL_BACKGROUND: Final = (0, 0, 0)
LABEL_SIZE: Final = 12
LABEL_PADDING: Final = 1
# Labels start this far right of (below) their line.
LABEL_OFFSET: Final = 3
# Labels are rendered by Pillow with one font object, shared by every display's worker thread.
_font_lock = threading.Lock()


def _blend(values: RGBArray) -> RGBArray:
    return ((values.astype(np.uint16) + LINE_COLOUR) // 2).astype(np.uint8)


@cache
def _font() -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=LABEL_SIZE)


@lru_cache(maxsize=1024)
def _label(text: str) -> RGBArray:
    """A label's pixels (text on its box), rendered once: labels repeat from image to image,
    and drawing on small images spares converting the whole picture to Pillow and back."""
    with _font_lock:
        font = _font()
        left, top, right, bottom = font.getbbox(text)
        size = (
            math.ceil(right - left) + 2 * LABEL_PADDING,
            math.ceil(bottom - top) + 2 * LABEL_PADDING,
        )
        image = Image.new("RGB", size, LABEL_BACKGROUND)
        at = (LABEL_PADDING - left, LABEL_PADDING - top)
        ImageDraw.Draw(image).text(at, text, font=font, fill=LABEL_TEXT)
    pixels = np.asarray(image, dtype=np.uint8)
    pixels.flags.writeable = False
    return pixels


def _put(out: RGBArray, label: RGBArray, at: tuple[int, int]) -> None:
    """``label`` with its top-left corner at ``at`` (x, y), moved back inside if needed."""
    height, width = out.shape[:2]
    box_h, box_w = label.shape[:2]
    x = max(0, min(at[0], width - box_w))
    y = max(0, min(at[1], height - box_h))
    shown = label[: height - y, : width - x]
    out[y : y + shown.shape[0], x : x + shown.shape[1]] = shown


def draw_grid(rgb: RGBArray, grid: Grid) -> RGBArray:
    """A copy of ``rgb`` with the grid's lines and labels on it."""
    out = np.array(rgb, dtype=np.uint8, copy=True)
    for line in grid.columns:
        out[:, line.position] = _blend(out[:, line.position])
    for line in grid.rows:
        out[line.position, :] = _blend(out[line.position, :])
    for line in grid.columns:
        _put(out, _label(str(line.label)), (line.position + LABEL_OFFSET, 0))
    for line in grid.rows:
        _put(out, _label(str(line.label)), (0, line.position + LABEL_OFFSET))
    return out
