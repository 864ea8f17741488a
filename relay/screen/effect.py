"""Did an input action take effect? The ``effect`` verdict of the screen's input actions.

Before the input the relay grabs the region it should change: around the point for pointer
actions, the window with the keyboard focus for keys and text. After it, it grabs the region
again every few milliseconds for a short settle window that ends as soon as a change is seen:

- ``changed``: the region's pixels differ (the answer says after how many milliseconds);
- ``no_visible_change``: they did not within the window (:data:`SETTLE_S`);
- ``unverifiable``: there is nothing to look at (keys sent while no window that is showing
  has the focus, or a backend that cannot say where the focus is), or the action is not judged
  (``move``: a pointer move is not meant to change anything, and judging it would cost every
  step of a dragged path the settle window).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np

from relay.screen import args as check
from wire.guard import CropRect

if TYPE_CHECKING:
    from relay.screen.service import Handler, ScreenContext

Effect = Literal["changed", "no_visible_change", "unverifiable"]
SETTLE_S: Final = 0.15
POLL_S: Final = 0.003
# The box looked at around a pointer action's point: a pressed button, a checked box or a caret
# placed in a field shows inside it; a neighbour's hover highlight going off mostly does not.
SIDE: Final = 96
Where = Callable[["ScreenContext", dict[str, Any]], CropRect | None]


def _box(point: tuple[int, int], size: tuple[int, int], side: int = SIDE) -> CropRect:
    width, height = min(side, size[0]), min(side, size[1])
    x = max(0, min(point[0] - width // 2, size[0] - width))
    y = max(0, min(point[1] - height // 2, size[1] - height))
    return CropRect(x, y, width, height)


def at_point(ctx: ScreenContext, args: dict[str, Any]) -> CropRect | None:
    """Around the action's point, or the pointer when it names none."""
    size = ctx.size()
    given = "x" in args or "y" in args
    point = check.point(args, size) if given else ctx.input.mouse_position()
    return _box(point, size)


def around_drag(ctx: ScreenContext, args: dict[str, Any]) -> CropRect | None:
    """The rectangle spanning the boxes around a drag's start and its end."""
    size = ctx.size()
    start = _box(check.point(args, size), size)
    end = _box(check.point(args, size, ("to_x", "to_y")), size)
    x, y = min(start.x, end.x), min(start.y, end.y)
    right = max(start.x + start.width, end.x + end.width)
    bottom = max(start.y + start.height, end.y + end.height)
    return CropRect(x, y, right - x, bottom - y)


def at_focus(ctx: ScreenContext, args: dict[str, Any]) -> CropRect | None:
    """The showing window with the keyboard focus (``None``: nothing to look at)."""
    bounds = getattr(ctx.input, "focus_bounds", None)
    found = bounds() if callable(bounds) else None
    if found is None:
        return None
    x, y, width, height = found
    screen_w, screen_h = ctx.size()
    left, top = max(0, x), max(0, y)
    right, bottom = min(screen_w, x + width), min(screen_h, y + height)
    if right <= left or bottom <= top:
        return None
    return CropRect(left, top, right - left, bottom - top)


def observed(handler: Handler, where: Where) -> Handler:
    """``handler`` answering also ``effect`` (and ``effect_ms`` when it changed)."""

    def run(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
        try:
            region = where(ctx, args)
        except Exception:  # the handler refuses the same arguments, naming the field
            return handler(ctx, args)
        if region is None:
            return {**handler(ctx, args), "effect": "unverifiable"}
        before = ctx.grab(region)
        result = handler(ctx, args)
        return {**result, **settle(ctx, region, before)}

    return run


def not_judged(handler: Handler) -> Handler:
    """``handler`` answering ``effect: unverifiable`` at once (an action that is not judged)."""

    def run(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
        return {**handler(ctx, args), "effect": "unverifiable"}

    return run


def settle(ctx: ScreenContext, region: CropRect, before: Any) -> dict[str, Any]:
    """Poll ``region`` until it differs from ``before`` or the settle window ends."""
    start = time.monotonic()
    deadline = start + SETTLE_S
    while True:
        if not np.array_equal(ctx.grab(region), before):
            return {"effect": "changed", "effect_ms": round((time.monotonic() - start) * 1000)}
        if time.monotonic() >= deadline:
            return {"effect": "no_visible_change"}
        time.sleep(POLL_S)
