"""The display a model is told about, and the exact mapping between its pixels and the screen's.

A model sees screenshots scaled to a declared display (``display_width_px`` by ``display_height_px``
for Anthropic's tool, ``display_width`` by ``display_height`` for OpenAI's) and answers with
points on that display. A display pixel ``d`` covers the screen pixels
``[d·S/D, (d+1)·S/D)`` on each axis (``S`` the screen's size, ``D`` the display's); a point maps
to the screen pixel at the centre of that span, in integer arithmetic, so the mapping has no
rounding drift: the identity when the display is the screen, never off the screen, and the
display pixel covering the screen pixel a point maps to is that point again.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final

from wire.errors import InvalidArgs

# Anthropic's documented image limits for computer use: the long edge at most 1568 px and about
# 1.15 megapixels in all; a larger screenshot is scaled down by the API (and the model's clicks
# with it), so the door scales first and maps back exactly.
MAX_LONG_EDGE: Final = 1568
MAX_PIXELS: Final = 1_150_000
MIN_SIDE: Final = 16
_SIZE: Final = re.compile(r"([0-9]{1,5})x([0-9]{1,5})")


@dataclass(frozen=True)
class Display:
    """The screen's size and the size the model is told; maps points both ways."""

    screen: tuple[int, int]
    shown: tuple[int, int]

    @property
    def scaled(self) -> bool:
        return self.shown != self.screen

    def to_screen(self, x: int, y: int) -> tuple[int, int]:
        """The screen pixel at the centre of display pixel (x, y)."""
        return _centre(x, self.shown[0], self.screen[0]), _centre(y, self.shown[1], self.screen[1])

    def to_display(self, x: int, y: int) -> tuple[int, int]:
        """The display pixel that covers screen pixel (x, y)."""
        width, height = self.screen
        shown_w, shown_h = self.shown
        return (
            min(shown_w - 1, max(0, x) * shown_w // width),
            min(shown_h - 1, max(0, y) * shown_h // height),
        )

    def on_display(self, field: str, x: int, y: int) -> None:
        """``InvalidArgs(field)`` unless (x, y) lies on the declared display."""
        width, height = self.shown
        if not (0 <= x < width and 0 <= y < height):
            bounds = f"x in 0..{width - 1}, y in 0..{height - 1}"
            raise InvalidArgs(
                field, f"({x}, {y}) is outside the display ({width}x{height}): {bounds}"
            )


def _centre(d: int, shown: int, screen: int) -> int:
    """The screen pixel nearest the centre of display pixel ``d``'s span, kept inside the span
    (so the display pixel covering it is ``d`` again)."""
    if shown == screen:
        return d
    first = -(-d * screen // shown)  # the first whole pixel at or after the span's start
    last = -(-(d + 1) * screen // shown) - 1  # the last before its end
    middle = ((2 * d + 1) * screen) // (2 * shown)
    return min(screen - 1, max(first, min(last, middle)))


def default_size(screen: tuple[int, int]) -> tuple[int, int]:
    """The largest size with the screen's aspect ratio under Anthropic's image limits."""
    width, height = screen
    scale = min(1.0, MAX_LONG_EDGE / max(width, height), math.sqrt(MAX_PIXELS / (width * height)))
    if scale >= 1.0:
        return screen
    shown_w = max(1, math.floor(width * scale))
    shown_h = max(1, math.floor(height * scale))
    return shown_w, shown_h


def parse_size(value: str | None, field: str = "display") -> tuple[int, int] | None:
    """``WxH`` from a query (``None`` when absent); ``InvalidArgs(field)`` when malformed."""
    if value is None or value == "":
        return None
    match = _SIZE.fullmatch(value)
    if match is None:
        raise InvalidArgs(field, "must be WIDTHxHEIGHT in pixels, e.g. 1280x800")
    width, height = int(match.group(1)), int(match.group(2))
    if width < MIN_SIDE or height < MIN_SIDE:
        raise InvalidArgs(field, f"each side must be at least {MIN_SIDE} px")
    return width, height


def display_for(screen: tuple[int, int], declared: tuple[int, int] | None) -> Display:
    """The display a request declared (or the default one) over ``screen``; a declared display
    larger than the screen is refused (the model would aim between pixels)."""
    if declared is None:
        return Display(screen, default_size(screen))
    if declared[0] > screen[0] or declared[1] > screen[1]:
        raise InvalidArgs(
            "display", f"must not be larger than the screen ({screen[0]}x{screen[1]})"
        )
    return Display(screen, declared)
