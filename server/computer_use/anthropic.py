"""Anthropic's ``computer`` tool, executed verbatim: the ``input`` of a ``tool_use`` block in,
the ``content`` (and ``is_error``) of the matching ``tool_result`` out.

Tool versions ``computer_20250124`` and ``computer_20251124`` (the latter with ``zoom`` when
``enable_zoom`` is set). Coordinates are points on the declared display
(``server.computer_use.display``); screenshots are scaled to it. Clicks, drags and
``left_mouse_down`` are guarded by the session's last screenshot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from server.computer_use.display import Display
from server.computer_use.images import MEDIA_TYPE, Shot, screenshot, zoom
from server.computer_use.session import DoorCall, Result
from server.computer_use.tool_errors import effect_text
from wire.errors import InvalidArgs
from wire.screen_args import MAX_AMOUNT, MAX_KEY, MAX_TEXT

VERSIONS: Final = ("computer_20251124", "computer_20250124")
BETAS: Final = {
    "computer_20251124": "computer-use-2025-11-24",
    "computer_20250124": "computer-use-2025-01-24",
}
TOOL_NAME: Final = "computer"
MAX_WAIT_S: Final = 100.0
MODIFIERS: Final = frozenset({"shift", "ctrl", "control", "alt", "super", "meta", "cmd", "win"})
_MODIFIER_KEYS: Final = {"control": "ctrl", "meta": "super", "cmd": "super", "win": "super"}
SCROLLS: Final = ("up", "down", "left", "right")


@dataclass(frozen=True)
class Outcome:
    """What one action shows the model: a line of text, a screenshot, or both."""

    text: str | None = None
    image: Shot | None = None

    def content(self) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if self.text:
            blocks.append({"type": "text", "text": self.text})
        if self.image is not None:
            source = {"type": "base64", "media_type": MEDIA_TYPE, "data": self.image.data}
            blocks.append({"type": "image", "source": source})
        return blocks


Handler = Callable[[DoorCall, Display, Mapping[str, Any]], Awaitable[Outcome]]


def tool_definition(version: str, display: tuple[int, int]) -> dict[str, Any]:
    """The tool to send the model (``tools=[…]``) for ``version`` at ``display``."""
    tool: dict[str, Any] = {
        "type": version,
        "name": TOOL_NAME,
        "display_width_px": display[0],
        "display_height_px": display[1],
    }
    if version == "computer_20251124":
        tool["enable_zoom"] = True
    return tool


def tool_input(body: Mapping[str, Any]) -> dict[str, Any]:
    """The tool call's input with its ``action``: the ``input`` itself, a whole ``tool_use``
    block of the ``computer`` tool, or one of the ``computer`` toolset's blocks (whose ``name``
    is the action)."""
    given = body.get("input")
    if body.get("type") != "tool_use" or not isinstance(given, dict):
        return dict(body)
    if body.get("toolset_name") == TOOL_NAME and isinstance(body.get("name"), str):
        return {**given, "action": body["name"]}
    return dict(given)


# -- the input's fields --------------------------------------------------------------------


def _pair(value: Any, field: str) -> tuple[int, int]:
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise InvalidArgs(field, "must be [x, y], two integers")
    return int(value[0]), int(value[1])


def coordinate(
    display: Display, params: Mapping[str, Any], field: str = "coordinate"
) -> tuple[int, int]:
    """The screen pixel under the display point ``params[field]`` (required)."""
    if params.get(field) is None:
        raise InvalidArgs(field, "required: [x, y] on the display")
    x, y = _pair(params[field], field)
    display.on_display(field, x, y)
    return display.to_screen(x, y)


def optional_coordinate(display: Display, params: Mapping[str, Any]) -> tuple[int, int] | None:
    return None if params.get("coordinate") is None else coordinate(display, params)


def text(params: Mapping[str, Any], limit: int = MAX_TEXT, field: str = "text") -> str:
    value = params.get(field)
    if not isinstance(value, str) or not value:
        raise InvalidArgs(field, "required: a non-empty string")
    if len(value) > limit:
        raise InvalidArgs(field, f"at most {limit} characters")
    return value


def duration(params: Mapping[str, Any]) -> float:
    value = params.get("duration")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgs("duration", "required: seconds, a number")
    if not 0 <= value <= MAX_WAIT_S:
        raise InvalidArgs("duration", f"must be between 0 and {MAX_WAIT_S:g} seconds")
    return float(value)


def held_modifiers(params: Mapping[str, Any]) -> list[str]:
    """The modifier keys a click's ``text`` holds (``"shift"``, ``"ctrl+shift"``)."""
    value = params.get("text")
    if value is None:
        return []
    if not isinstance(value, str) or len(value) > MAX_KEY:
        raise InvalidArgs("text", "must be modifier keys to hold, e.g. 'shift' or 'ctrl+shift'")
    keys = [k.strip().lower() for k in value.split("+") if k.strip()]
    unknown = [k for k in keys if k not in MODIFIERS]
    if unknown:
        raise InvalidArgs("text", f"{unknown[0]!r} is not a modifier (shift, ctrl, alt, super)")
    return [_MODIFIER_KEYS.get(k, k) for k in keys]


# -- actions -------------------------------------------------------------------------------


async def _screenshot(call: DoorCall, display: Display, params: Mapping[str, Any]) -> Outcome:
    return Outcome(image=await screenshot(call, display))


async def _zoom(call: DoorCall, display: Display, params: Mapping[str, Any]) -> Outcome:
    region = params.get("region")
    if (
        not isinstance(region, list | tuple)
        or len(region) != 4
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in region)
    ):
        raise InvalidArgs("region", "required: [x0, y0, x1, y1], four integers")
    x0, y0, x1, y1 = (int(v) for v in region)
    display.on_display("region", x0, y0)
    display.on_display("region", x1 - 1, y1 - 1)
    if x1 <= x0 or y1 <= y0:
        raise InvalidArgs("region", "x1 must be greater than x0 and y1 greater than y0")
    return Outcome(image=await zoom(call, display, (x0, y0, x1, y1)))


def _clicker(button: str, count: int) -> Handler:
    async def click(call: DoorCall, display: Display, params: Mapping[str, Any]) -> Outcome:
        point = optional_coordinate(display, params)
        keys = held_modifiers(params)
        if point is None:
            here = await call.screen("mouse_position")
            point = (int(here["x"]), int(here["y"]))
        revision = await call.guard_revision()
        action = "double_click" if count == 2 else "click"

        async def act() -> None:
            where = {"x": point[0], "y": point[1], "button": button}
            if count == 3:
                await call.screen("double_click", **where, expected_screen_revision=revision)
                # The third press is the same gesture: the double click just changed the
                # screen there (a selection), so it is guarded by the pixels it lands on now.
                look = await call.screen("zoom", region=_around(point, display.screen))
                again = str(look["screen_revision"])
                await call.screen("click", **where, expected_screen_revision=again)
                return
            await call.screen(action, **where, expected_screen_revision=revision)

        await call.holding(keys, act)
        return Outcome(text=None)

    return click


def _around(point: tuple[int, int], screen: tuple[int, int], side: int = 8) -> Result:
    x = max(0, min(point[0] - side // 2, screen[0] - side))
    y = max(0, min(point[1] - side // 2, screen[1] - side))
    return {"x": x, "y": y, "width": side, "height": side}


async def _mouse_move(call: DoorCall, display: Display, params: Mapping[str, Any]) -> Outcome:
    x, y = coordinate(display, params)
    await call.screen("move", x=x, y=y)
    return Outcome(text=DONE)  # a pointer move is not judged (``effect: unverifiable``)


async def _mouse_down(call: DoorCall, display: Display, params: Mapping[str, Any]) -> Outcome:
    point = optional_coordinate(display, params)
    where = {"x": point[0], "y": point[1]} if point else {}
    revision = await call.guard_revision()
    await call.screen("mouse_down", button="left", expected_screen_revision=revision, **where)
    return Outcome()


async def _mouse_up(call: DoorCall, display: Display, params: Mapping[str, Any]) -> Outcome:
    point = optional_coordinate(display, params)
    where = {"x": point[0], "y": point[1]} if point else {}
    await call.screen("mouse_up", button="left", **where)
    return Outcome()


async def _drag(call: DoorCall, display: Display, params: Mapping[str, Any]) -> Outcome:
    start = coordinate(display, params, "start_coordinate")
    end = coordinate(display, params)
    keys = held_modifiers(params)
    revision = await call.guard_revision()

    async def act() -> None:
        await call.screen(
            "drag",
            x=start[0],
            y=start[1],
            to={"x": end[0], "y": end[1]},
            button="left",
            expected_screen_revision=revision,
        )

    await call.holding(keys, act)
    return Outcome()


async def _scroll(call: DoorCall, display: Display, params: Mapping[str, Any]) -> Outcome:
    direction = params.get("scroll_direction")
    if direction not in SCROLLS:
        raise InvalidArgs("scroll_direction", "required: up, down, left or right")
    amount = params.get("scroll_amount", 3)
    if isinstance(amount, bool) or not isinstance(amount, int) or not 0 <= amount <= MAX_AMOUNT:
        raise InvalidArgs("scroll_amount", f"must be an integer from 0 to {MAX_AMOUNT}")
    point = optional_coordinate(display, params)
    keys = held_modifiers(params)
    where = {"x": point[0], "y": point[1]} if point else {}

    async def act() -> None:
        if amount > 0:
            await call.screen("scroll", direction=direction, amount=amount, **where)
        elif point is not None:
            await call.screen("move", **where)

    await call.holding(keys, act)
    return Outcome()


async def _type(call: DoorCall, display: Display, params: Mapping[str, Any]) -> Outcome:
    await call.screen("type", text=text(params))
    return Outcome()


def _chords(params: Mapping[str, Any]) -> list[str]:
    """xdotool's ``key`` argument: chords separated by spaces (``"ctrl+a Delete"``)."""
    chords = text(params, MAX_KEY).split()
    if not chords:
        raise InvalidArgs("text", "required: a key name or chord, e.g. 'Return' or 'ctrl+s'")
    return chords


async def _key(call: DoorCall, display: Display, params: Mapping[str, Any]) -> Outcome:
    for chord in _chords(params):
        await call.screen("key", key=chord)
    return Outcome()


async def _hold_key(call: DoorCall, display: Display, params: Mapping[str, Any]) -> Outcome:
    keys = [k for chord in _chords(params) for k in chord.split("+") if k]
    seconds = duration(params)
    await call.holding(keys, lambda: asyncio.sleep(seconds))
    return Outcome()


async def _cursor_position(call: DoorCall, display: Display, params: Mapping[str, Any]) -> Outcome:
    here = await call.screen("mouse_position")
    x, y = display.to_display(int(here["x"]), int(here["y"]))
    return Outcome(text=f"X={x},Y={y}")


async def _wait(call: DoorCall, display: Display, params: Mapping[str, Any]) -> Outcome:
    await asyncio.sleep(duration(params) if params.get("duration") is not None else 1.0)
    return Outcome(image=await screenshot(call, display))


ACTIONS: Final[Mapping[str, Handler]] = {
    "screenshot": _screenshot,
    "zoom": _zoom,
    "key": _key,
    "hold_key": _hold_key,
    "type": _type,
    "cursor_position": _cursor_position,
    "mouse_move": _mouse_move,
    "left_click": _clicker("left", 1),
    "right_click": _clicker("right", 1),
    "middle_click": _clicker("middle", 1),
    "double_click": _clicker("left", 2),
    "triple_click": _clicker("left", 3),
    "left_mouse_down": _mouse_down,
    "left_mouse_up": _mouse_up,
    "left_click_drag": _drag,
    "scroll": _scroll,
    "wait": _wait,
}
INPUT_ACTIONS: Final = frozenset(ACTIONS) - {"screenshot", "zoom", "cursor_position", "wait"}
DONE: Final = "done"


async def run(call: DoorCall, params: Mapping[str, Any]) -> Outcome:
    """One tool call; ``InvalidArgs`` for input that does not fit the tool, ``OpError`` when
    the desktop refused it."""
    handler = ACTIONS[str(params["action"])]
    display = await call.display()
    outcome = await handler(call, display, params)
    if outcome.text is None and outcome.image is None:
        return Outcome(text=effect_text(call.effect, call.effect_ms) or DONE)
    return outcome
