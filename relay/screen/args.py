"""Argument checks for screen actions: each failure is ``InvalidArgs`` naming the field.

The rules both ends share (limits, names, ranges) are ``wire.screen_args``; here are the
relay's defaults and what only the live screen can judge.

Coordinates are validated against the current screen and never clamped: a point outside
the screen is the caller's mistake, and silently moving it would click something else.
"""

from __future__ import annotations

import re
from typing import Any

from wire import screen_args
from wire.errors import InvalidArgs
from wire.guard import CropRect, Guard
from wire.screen_coords import Frame, zoom_size

# X buttons by name (``wire.screen_args.BUTTON_NAMES``: left is 1) or number.
BUTTONS: dict[str | int, int] = {
    **{name: number for number, name in enumerate(screen_args.BUTTON_NAMES, 1)},
    **{number: number for number in range(1, len(screen_args.BUTTON_NAMES) + 1)},
}
_DISPLAY_RE = re.compile(r"^[A-Za-z0-9_.\-]*:\d+(\.\d+)?$")


def is_display_name(value: object) -> bool:
    """An X display name like ``:1``, ``:12.0`` or ``host:3``."""
    return isinstance(value, str) and _DISPLAY_RE.match(value) is not None


def display_name(value: object) -> str:
    if not is_display_name(value):
        raise InvalidArgs("display", "must be an X display like ':1'")
    return str(value)


def integer(args: dict[str, Any], name: str, default: int | None = None) -> int:
    value = args.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgs(name, "must be an integer")
    return value


def bounded(args: dict[str, Any], name: str, low: int, high: int, default: int) -> int:
    return screen_args.whole_number(args.get(name, default), name, low, high)


def point(
    args: dict[str, Any], size: tuple[int, int], names: tuple[str, str] = ("x", "y")
) -> tuple[int, int]:
    """An on-screen point from two integer fields."""
    coords = (integer(args, names[0]), integer(args, names[1]))
    for name, value, limit in zip(names, coords, size, strict=True):
        if not 0 <= value < limit:
            raise InvalidArgs(name, f"{value} is outside the screen (0..{limit - 1})")
    return coords


def button(args: dict[str, Any]) -> int:
    value = args.get("button", "left")
    key = value.casefold() if isinstance(value, str) else value
    if isinstance(key, bool) or key not in BUTTONS:
        raise InvalidArgs("button", "must be left, middle, right (or 1, 2, 3)")
    return BUTTONS[key]


def choice(args: dict[str, Any], name: str, options: tuple[str, ...], default: str) -> str:
    return screen_args.one_of(args.get(name, default), name, options)


def text(args: dict[str, Any], name: str = "text", limit: int = screen_args.MAX_TEXT) -> str:
    return screen_args.text(args.get(name), name, limit)


def guard(args: dict[str, Any]) -> Guard | None:
    """The optional ``guard: {crop, rect}`` the server attached (its presence is not checked)."""
    value = args.get("guard")
    return None if value is None else Guard.from_wire(value)


def box(value: object, name: str) -> CropRect:
    """``{x, y, width, height}`` in pixels with a positive size (it may reach off the screen)."""
    if not isinstance(value, dict) or set(value) != {"x", "y", "width", "height"}:
        raise InvalidArgs(name, "must be {x, y, width, height}")
    x, y, width, height = (value[key] for key in ("x", "y", "width", "height"))
    for key, item in zip(("x", "y", "width", "height"), (x, y, width, height), strict=True):
        if not isinstance(item, int) or isinstance(item, bool):
            raise InvalidArgs(f"{name}.{key}", "must be an integer")
    if width <= 0 or height <= 0:
        raise InvalidArgs(f"{name}.{'width' if width <= 0 else 'height'}", "must be positive")
    return CropRect(x, y, width, height)


def region(args: dict[str, Any], size: tuple[int, int], name: str = "region") -> CropRect:
    """A region ``{x, y, width, height}`` that lies on the screen (never clamped)."""
    rect = box(args.get(name), name)
    if rect.x < 0 or rect.y < 0 or not rect.fits(size):
        raise InvalidArgs(
            name,
            f"{rect.width}x{rect.height} at ({rect.x}, {rect.y}) is not inside the "
            f"{size[0]}x{size[1]} screen",
        )
    return rect


def zoom_image_size(args: dict[str, Any], area: CropRect) -> tuple[int, int]:
    """The zoom image's size for ``scale`` (default 1; ``InvalidArgs("scale")`` when too big)."""
    return zoom_size(area.width, area.height, args.get("scale", 1))


def grid(args: dict[str, Any], size: tuple[int, int]) -> Frame | None:
    """The coordinates a requested grid is labelled in (``grid: {coordinates, relative_to?}``)."""
    value = args.get("grid")
    if value is None or value is False:
        return None
    if value is True:
        return Frame.pixels()
    if not isinstance(value, dict):
        raise InvalidArgs("grid", "must be true or {coordinates, relative_to?}")
    coordinates = choice(value, "coordinates", ("pixels", "normalized"), "pixels")
    if set(value) - {"coordinates", "relative_to"}:
        raise InvalidArgs("grid", "takes coordinates and relative_to only")
    area = value.get("relative_to")
    if coordinates == "pixels":
        if area is not None:
            raise InvalidArgs("grid.relative_to", "applies to normalized coordinates only")
        return Frame.pixels()
    whole = CropRect(0, 0, *size)
    return Frame.normalized(whole if area is None else box(area, "grid.relative_to"))
