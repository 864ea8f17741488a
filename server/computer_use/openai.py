"""OpenAI's computer-use tool, executed verbatim: a ``computer_call``'s ``action`` (or its
batched ``actions``) in, the ``computer_call_output`` item out, with a screenshot of the display
after the last action.

Coordinates are points on the declared display (``display_width`` by ``display_height``,
``server.computer_use.display``). Clicks, double clicks and drags are guarded by the session's
last screenshot. A ``computer_call`` carrying safety checks (``pending_safety_checks``, or
``acknowledged_safety_checks`` sent on) runs only once a person approved them in relaydesk
(``server.control.approvals``); until then it runs nothing and a person is asked. Its output
then carries them as ``acknowledged_safety_checks`` for the builder to send on. The output's
screenshot carries ``current_url`` when the active window is the browser
(``server.computer_use.browser``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from server.computer_use.browser import current_url
from server.computer_use.display import Display
from server.computer_use.images import screenshot
from server.computer_use.session import DoorCall
from server.computer_use.tool_errors import did_you_mean, for_model
from server.control.approvals import Check
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.screen_args import MAX_AMOUNT, MAX_TEXT

ENVIRONMENT: Final = "linux"
TOOL_TYPES: Final = ("computer_use_preview", "computer")
MAX_ACTIONS: Final = 32
MAX_KEYS: Final = 16
MAX_CHECKS: Final = 16
CHECK_LISTS: Final = ("pending_safety_checks", "acknowledged_safety_checks")
MAX_WAIT_S: Final = 60.0
DEFAULT_WAIT_S: Final = 1.0
WHEEL_PIXELS: Final = 100  # one wheel click scrolls about this many pixels
BUTTONS: Final = {"left": "left", "right": "right", "wheel": "middle", "middle": "middle"}
# OpenAI's key names (upper case, browser-like) → X keysym names.
KEYS: Final = {
    "CTRL": "ctrl",
    "CONTROL": "ctrl",
    "ALT": "alt",
    "OPTION": "alt",
    "SHIFT": "shift",
    "CMD": "super",
    "META": "super",
    "SUPER": "super",
    "WIN": "super",
    "ENTER": "Return",
    "RETURN": "Return",
    "SPACE": "space",
    "TAB": "Tab",
    "BACKSPACE": "BackSpace",
    "DELETE": "Delete",
    "ESC": "Escape",
    "ESCAPE": "Escape",
    "INSERT": "Insert",
    "HOME": "Home",
    "END": "End",
    "PAGEUP": "Prior",
    "PAGEDOWN": "Next",
    "UP": "Up",
    "DOWN": "Down",
    "LEFT": "Left",
    "RIGHT": "Right",
    "ARROWUP": "Up",
    "ARROWDOWN": "Down",
    "ARROWLEFT": "Left",
    "ARROWRIGHT": "Right",
    "CAPSLOCK": "Caps_Lock",
    **{f"F{n}": f"F{n}" for n in range(1, 25)},
}
Answer = dict[str, Any]
Step = Callable[[DoorCall, Display, Mapping[str, Any]], Awaitable[None]]


def tool_definition(display: tuple[int, int], kind: str = "computer_use_preview") -> dict[str, Any]:
    """The tool to send the model: ``computer_use_preview`` (with the display and environment)
    or the ``computer`` tool (which takes no parameters; the screenshots tell the size)."""
    if kind == "computer":
        return {"type": "computer"}
    return {
        "type": "computer_use_preview",
        "display_width": display[0],
        "display_height": display[1],
        "environment": ENVIRONMENT,
    }


# -- fields -----------------------------------------------------------------------------------


def _int(params: Mapping[str, Any], name: str, where: str) -> int:
    value = params.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgs(f"{where}.{name}", "required: an integer")
    return int(value)


def _point(display: Display, params: Mapping[str, Any], where: str) -> tuple[int, int]:
    x, y = _int(params, "x", where), _int(params, "y", where)
    display.on_display(where, x, y)
    return display.to_screen(x, y)


def key_name(key: Any, where: str) -> str:
    if not isinstance(key, str) or not key or len(key) > 32:
        raise InvalidArgs(where, "must be a key name such as 'CTRL', 'ENTER' or 'a'")
    named = KEYS.get(key.upper())
    if named is not None:
        return named
    if len(key) == 1:
        return key.lower() if key.isalpha() else key
    return key  # an X keysym name as it is ('Prior', 'KP_Enter')


def _held(params: Mapping[str, Any]) -> list[str]:
    """The keys a click holds down (``keys``: e.g. ``["SHIFT"]``)."""
    keys = params.get("keys")
    if keys is None:
        return []
    if not isinstance(keys, list) or len(keys) > MAX_KEYS:
        raise InvalidArgs("action.keys", f"must be a list of at most {MAX_KEYS} key names")
    return [key_name(k, f"action.keys[{i}]") for i, k in enumerate(keys)]


# -- actions ----------------------------------------------------------------------------------


async def _click(call: DoorCall, display: Display, params: Mapping[str, Any]) -> None:
    button = params.get("button", "left")
    if button in ("back", "forward"):
        raise OpError(ErrorCode.INVALID_ARGS, f"the {button} mouse button is not available here")
    if button not in BUTTONS:
        raise InvalidArgs("action.button", "must be left, right, wheel, back or forward")
    x, y = _point(display, params, "action")
    held = _held(params)
    revision = await call.guard_revision()
    where = {"x": x, "y": y, "button": BUTTONS[str(button)]}
    await call.holding(
        held, lambda: call.screen("click", **where, expected_screen_revision=revision)
    )


async def _double_click(call: DoorCall, display: Display, params: Mapping[str, Any]) -> None:
    x, y = _point(display, params, "action")
    held = _held(params)
    revision = await call.guard_revision()
    await call.holding(
        held, lambda: call.screen("double_click", x=x, y=y, expected_screen_revision=revision)
    )


async def _drag(call: DoorCall, display: Display, params: Mapping[str, Any]) -> None:
    path = params.get("path")
    if not isinstance(path, list) or not 2 <= len(path) <= 256:
        raise InvalidArgs("action.path", "required: a list of 2 to 256 points {x, y}")
    points = []
    for index, point in enumerate(path):
        if not isinstance(point, dict):
            raise InvalidArgs(f"action.path[{index}]", "must be an object {x, y}")
        points.append(_point(display, point, f"action.path[{index}]"))
    revision = await call.guard_revision()
    first = points[0]
    await call.screen(
        "mouse_down", x=first[0], y=first[1], button="left", expected_screen_revision=revision
    )
    try:
        for x, y in points[1:]:
            await call.screen("move", x=x, y=y)
    finally:
        await call.screen("mouse_up", button="left")


async def _keypress(call: DoorCall, display: Display, params: Mapping[str, Any]) -> None:
    keys = params.get("keys")
    if not isinstance(keys, list) or not 1 <= len(keys) <= MAX_KEYS:
        raise InvalidArgs("action.keys", f"required: a list of 1 to {MAX_KEYS} key names")
    names = [key_name(k, f"action.keys[{i}]") for i, k in enumerate(keys)]
    await call.screen("key", key="+".join(names))


async def _move(call: DoorCall, display: Display, params: Mapping[str, Any]) -> None:
    x, y = _point(display, params, "action")
    await call.screen("move", x=x, y=y)


async def _scroll(call: DoorCall, display: Display, params: Mapping[str, Any]) -> None:
    x, y = _point(display, params, "action")
    dx, dy = _int(params, "scroll_x", "action"), _int(params, "scroll_y", "action")
    await call.screen("move", x=x, y=y)
    for pixels, ahead, back in ((dy, "down", "up"), (dx, "right", "left")):
        clicks = min(MAX_AMOUNT, max(1, round(abs(pixels) / WHEEL_PIXELS))) if pixels else 0
        if clicks:
            await call.screen("scroll", direction=ahead if pixels > 0 else back, amount=clicks)


async def _type(call: DoorCall, display: Display, params: Mapping[str, Any]) -> None:
    text = params.get("text")
    if not isinstance(text, str):
        raise InvalidArgs("action.text", "required: a string")
    if len(text) > MAX_TEXT:
        raise InvalidArgs("action.text", f"at most {MAX_TEXT} characters")
    if text:
        await call.screen("type", text=text)


async def _wait(call: DoorCall, display: Display, params: Mapping[str, Any]) -> None:
    seconds = params.get("ms")
    if seconds is None:
        await asyncio.sleep(DEFAULT_WAIT_S)
        return
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise InvalidArgs("action.ms", "must be milliseconds, a number")
    await asyncio.sleep(min(float(seconds) / 1000, MAX_WAIT_S))


async def _screenshot(call: DoorCall, display: Display, params: Mapping[str, Any]) -> None:
    return None  # every answer ends with one


ACTIONS: Final[Mapping[str, Step]] = {
    "click": _click,
    "double_click": _double_click,
    "drag": _drag,
    "keypress": _keypress,
    "move": _move,
    "screenshot": _screenshot,
    "scroll": _scroll,
    "type": _type,
    "wait": _wait,
}


def _actions_of(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if "actions" in body:
        actions = body["actions"]
        if not isinstance(actions, list) or not 1 <= len(actions) <= MAX_ACTIONS:
            raise InvalidArgs("actions", f"must be a list of 1 to {MAX_ACTIONS} actions")
        where = "actions"
    else:
        actions, where = [body.get("action")], "action"
    for index, action in enumerate(actions):
        field = f"{where}[{index}]" if where == "actions" else where
        if not isinstance(action, dict):
            raise InvalidArgs(field, "required: an object with a type")
        kind = action.get("type")
        if not isinstance(kind, str) or not kind:
            raise InvalidArgs(f"{field}.type", "required: the action's type")
        if kind not in ACTIONS:
            raise InvalidArgs(f"{field}.type", did_you_mean(kind, ACTIONS))
    return actions


def _text(value: Any, field: str, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise InvalidArgs(field, f"must be a string of at most {limit} characters")
    return value


def safety_checks(body: Mapping[str, Any]) -> list[Check]:
    """The call's safety checks, pending and acknowledged, each once (by its id)."""
    found: dict[str, Check] = {}
    for name in CHECK_LISTS:
        listed = body.get(name)
        if listed is None:
            continue
        if not isinstance(listed, list) or len(listed) > MAX_CHECKS:
            raise InvalidArgs(name, f"must be a list of at most {MAX_CHECKS} checks")
        for index, item in enumerate(listed):
            field = f"{name}[{index}]"
            if not isinstance(item, dict):
                raise InvalidArgs(field, "must be an object {id, code, message}")
            check_id = _text(item.get("id"), f"{field}.id", 128)
            if not check_id:
                raise InvalidArgs(f"{field}.id", "required: the check's id")
            code = _text(item.get("code"), f"{field}.code", 128)
            message = _text(item.get("message"), f"{field}.message", 2000)
            found.setdefault(check_id, Check(check_id, code, message))
    return list(found.values())


def check(body: Mapping[str, Any]) -> None:
    _actions_of(body)
    safety_checks(body)
    call_id = body.get("call_id")
    if call_id is not None and (not isinstance(call_id, str) or len(call_id) > 256):
        raise InvalidArgs("call_id", "must be a string of at most 256 characters")


def _item(body: Mapping[str, Any]) -> Answer:
    item: Answer = {"type": "computer_call_output"}
    if isinstance(body.get("call_id"), str):
        item["call_id"] = body["call_id"]
    return item


async def run(call: DoorCall, body: Mapping[str, Any]) -> Answer:
    checks = safety_checks(body)
    call_id = body.get("call_id")
    if checks:  # nothing runs before a person approved them
        await call.approved(checks, call_id if isinstance(call_id, str) else None)
    display = await call.display()
    for action in _actions_of(body):
        await ACTIONS[str(action["type"])](call, display, action)
    shot = await screenshot(call, display)
    output = {"type": "computer_screenshot", "image_url": shot.data_url}
    url = await current_url(call)
    if url is not None:  # the active window is the browser
        output["current_url"] = url
    answer = {**_item(body), "output": output}
    if checks:
        answer["acknowledged_safety_checks"] = [c.item() for c in checks]
    return answer


def error_item(err: OpError) -> Answer:
    """A refusal as the door answers it: the item with no screenshot, and the words for the
    model (send them as a message beside the item)."""
    item: Answer = {"type": "computer_call_output", "is_error": True, "message": for_model(err)}
    if isinstance(err.details.get("approval_id"), str):  # the request a person decides on
        item["approval_id"] = err.details["approval_id"]
    return item
