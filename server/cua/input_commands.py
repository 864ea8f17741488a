"""Cua's screen and input commands: the screenshot, the pointer, keys and the wheel."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.cua.call import (
    MAX_SCROLL,
    OWN_LOOK_SIDE,
    CuaCall,
    Handler,
    button_param,
    int_param,
    optional_point,
    str_param,
)
from server.cua.protocol import PROTOCOL_VERSION
from server.doors.call import Result
from server.version import server_version
from wire.errors import InvalidArgs

# -- pixels ------------------------------------------------------------------------------


async def version(call: CuaCall, params: Mapping[str, Any]) -> Result:
    return {"protocol": PROTOCOL_VERSION, "package": f"relaydesk {server_version()}"}


async def get_screen_size(call: CuaCall, params: Mapping[str, Any]) -> Result:
    answer = await call.screen("screen_size")
    return {"size": {"width": answer["width"], "height": answer["height"]}}


async def get_cursor_position(call: CuaCall, params: Mapping[str, Any]) -> Result:
    answer = await call.screen("mouse_position")
    return {"position": {"x": answer["x"], "y": answer["y"]}}


async def screenshot(call: CuaCall, params: Mapping[str, Any]) -> Result:
    fmt = str(params.get("format") or "png").lower()
    fmt = "jpeg" if fmt == "jpg" else fmt
    if fmt not in ("png", "jpeg"):
        raise InvalidArgs("format", "must be png or jpeg")
    extra: Result = {}
    if fmt == "jpeg" and params.get("quality") is not None:
        extra["quality"] = max(1, min(95, int_param(params, "quality")))
    answer = await call.screen("screenshot", format=fmt, **extra)
    call.session.revision = str(answer["screen_revision"])
    return {"image_data": answer["image"], "format": fmt}


async def _point_or_cursor(call: CuaCall, params: Mapping[str, Any]) -> tuple[int, int]:
    point = optional_point(params)
    if point is not None:
        return point
    answer = await call.screen("mouse_position")
    return int(answer["x"]), int(answer["y"])


async def _revision_for(call: CuaCall, point: tuple[int, int]) -> str:
    """The revision that guards an action at ``point``: the session's last screenshot, or
    with the guard off a fresh look at the few pixels around the point."""
    if not call.guard:
        side = OWN_LOOK_SIDE
        size = await call.screen("screen_size")
        x = max(0, min(point[0] - side // 2, int(size["width"]) - side))
        y = max(0, min(point[1] - side // 2, int(size["height"]) - side))
        region = {"x": x, "y": y, "width": side, "height": side}
        answer = await call.screen("zoom", region=region)
        return str(answer["screen_revision"])
    return await call.last_revision(
        "no screenshot in this session yet: take a new screenshot, then click on it"
    )


def clicker(action: str, button: str) -> Handler:
    async def click(call: CuaCall, params: Mapping[str, Any]) -> Result:
        x, y = await _point_or_cursor(call, params)
        revision = await _revision_for(call, (x, y))
        await call.screen(action, x=x, y=y, button=button, expected_screen_revision=revision)
        return {}

    return click


async def move_cursor(call: CuaCall, params: Mapping[str, Any]) -> Result:
    await call.screen("move", x=int_param(params, "x"), y=int_param(params, "y"))
    return {}


async def mouse_down(call: CuaCall, params: Mapping[str, Any]) -> Result:
    x, y = await _point_or_cursor(call, params)
    revision = await _revision_for(call, (x, y))
    await call.screen(
        "mouse_down", x=x, y=y, button=button_param(params), expected_screen_revision=revision
    )
    return {}


async def mouse_up(call: CuaCall, params: Mapping[str, Any]) -> Result:
    point = optional_point(params)
    where = {"x": point[0], "y": point[1]} if point else {}
    await call.screen("mouse_up", button=button_param(params), **where)
    return {}


async def drag_to(call: CuaCall, params: Mapping[str, Any]) -> Result:
    start = await call.screen("mouse_position")
    begin = (int(start["x"]), int(start["y"]))
    end = {"x": int_param(params, "x"), "y": int_param(params, "y")}
    revision = await _revision_for(call, begin)
    await call.screen(
        "drag",
        x=begin[0],
        y=begin[1],
        to=end,
        button=button_param(params),
        expected_screen_revision=revision,
    )
    return {}


async def drag(call: CuaCall, params: Mapping[str, Any]) -> Result:
    path = params.get("path")
    if not isinstance(path, list) or len(path) < 2:
        raise InvalidArgs("path", "must be a list of at least two [x, y] points")
    points: list[tuple[int, int]] = []
    for index, point in enumerate(path):
        if not isinstance(point, list | tuple) or len(point) != 2:
            raise InvalidArgs(f"path[{index}]", "must be an [x, y] pair")
        pair = {"x": point[0], "y": point[1]}
        points.append((int_param(pair, "x"), int_param(pair, "y")))
    button = button_param(params)
    first = points[0]
    revision = await _revision_for(call, first)
    await call.screen(
        "mouse_down", x=first[0], y=first[1], button=button, expected_screen_revision=revision
    )
    try:
        for x, y in points[1:]:
            await call.screen("move", x=x, y=y)
    finally:
        await call.screen("mouse_up", button=button)
    return {}


def passed_through(action: str, name: str) -> Handler:
    """A command that hands one text parameter to a screen action as it is."""

    async def run(call: CuaCall, params: Mapping[str, Any]) -> Result:
        await call.screen(action, **{name: str_param(params, name)})
        return {}

    return run


async def hotkey(call: CuaCall, params: Mapping[str, Any]) -> Result:
    keys = params.get("keys")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
        raise InvalidArgs("keys", "must be a non-empty list of key names")
    await call.screen("key", key="+".join(keys))
    return {}


async def _wheel(call: CuaCall, direction: str, clicks: int) -> None:
    if clicks > 0:
        await call.screen("scroll", direction=direction, amount=min(clicks, MAX_SCROLL))


async def scroll(call: CuaCall, params: Mapping[str, Any]) -> Result:
    """Cua's ``scroll(x, y)``: wheel amounts (y > 0 up, x > 0 right), not a position."""
    dx, dy = int_param(params, "x"), int_param(params, "y")
    await _wheel(call, "up" if dy > 0 else "down", abs(dy))
    await _wheel(call, "right" if dx > 0 else "left", abs(dx))
    return {}


def _clicks(params: Mapping[str, Any]) -> int:
    clicks = params.get("clicks", 1)
    if isinstance(clicks, bool) or not isinstance(clicks, int) or clicks < 1:
        raise InvalidArgs("clicks", "must be a positive integer")
    return int(clicks)


async def scroll_down(call: CuaCall, params: Mapping[str, Any]) -> Result:
    await _wheel(call, "down", _clicks(params))
    return {}


async def scroll_up(call: CuaCall, params: Mapping[str, Any]) -> Result:
    await _wheel(call, "up", _clicks(params))
    return {}


async def scroll_direction(call: CuaCall, params: Mapping[str, Any]) -> Result:
    direction = str(params.get("direction", "")).lower()
    if direction not in ("up", "down", "left", "right"):
        raise InvalidArgs("direction", "must be up, down, left or right")
    await _wheel(call, direction, _clicks(params))
    return {}
