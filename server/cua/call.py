"""One Cua command's call (a door's call, :class:`server.doors.call.DesktopCall`, with its
click guard on or off) and its parameters.

A call runs typed actions through the server's ``ActionRunner`` (``source="cua"``). A Cua
session remembers the ``screen_revision`` of its own last screenshot and guards every click
with it, which Cua's client does not know about.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from server.doors.call import DesktopCall, DoorSession, Result
from wire.errors import InvalidArgs

SOURCE: Final = "cua"
Handler = Callable[["CuaCall", Mapping[str, Any]], Awaitable[Result]]
# A region this size around a point is what an unguarded (``?guard=off``) click looks at: a
# fresh zoom of it gives the click a revision of its own (the relay never clicks unguarded).
OWN_LOOK_SIDE: Final = 8
MAX_SCROLL: Final = 50


@dataclass
class CuaCall(DesktopCall[DoorSession]):
    """One command's caller, target and session, and whether its clicks are guarded."""

    source: ClassVar[str] = SOURCE
    guard: bool = True


# -- parameters --------------------------------------------------------------------------


def int_param(params: Mapping[str, Any], name: str) -> int:
    value = params.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgs(name, "must be a number")
    return int(value)


def optional_point(params: Mapping[str, Any]) -> tuple[int, int] | None:
    if params.get("x") is None and params.get("y") is None:
        return None
    return int_param(params, "x"), int_param(params, "y")


def str_param(params: Mapping[str, Any], name: str) -> str:
    value = params.get(name)
    if not isinstance(value, str):
        raise InvalidArgs(name, "must be a string")
    return value


def button_param(params: Mapping[str, Any]) -> str:
    button = params.get("button", "left")
    if button not in ("left", "middle", "right"):
        raise InvalidArgs("button", "must be left, middle or right")
    return str(button)
