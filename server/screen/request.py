"""The ``screen`` action's request: field checks and the relay arguments it becomes.

Checks here are about shape (types, enums, which fields an action needs). Whether a point
lies on the screen is checked against the kept screenshot for guarded actions (here) and
against the live screen by the relay for every action; coordinates are never clamped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wire.errors import InvalidArgs
from wire.screen_actions import GUARDED_ACTIONS, SCREEN_ACTIONS, ScreenAction

FORMATS = ("png", "jpeg", "webp")
BUTTONS = ("left", "middle", "right")
DIRECTIONS = ("up", "down", "left", "right")
MAX_AMOUNT = 50
MAX_TEXT = 10_000
MAX_KEY = 200
MAX_COORD = 1 << 16
MIN_TIMEOUT_S, MAX_TIMEOUT_S, DEFAULT_TIMEOUT_S = 1.0, 120.0, 30.0
# Fields the actions registry handles (target relay, conversation) are accepted and ignored.
ROUTING_FIELDS = frozenset({"conversation_id", "relay", "relay_id"})
FIELDS = frozenset({
    "action", "desktop_session_id", "local", "x", "y", "button", "text", "key", "amount",
    "direction", "from", "to", "target_bbox", "expected_screen_revision",
    "preview_max_width", "format", "quality", "timeout",
}) | ROUTING_FIELDS  # fmt: skip

Point = tuple[int, int]


@dataclass(frozen=True)
class ScreenRequest:
    """A checked ``screen`` call."""

    action: ScreenAction
    desktop_session_id: str | None = None
    local: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    point: Point | None = None
    end: Point | None = None
    target_bbox: tuple[int, int, int, int] | None = None
    revision: str | None = None
    relay_args: dict[str, Any] = field(default_factory=dict)

    @property
    def guarded(self) -> bool:
        return self.action in GUARDED_ACTIONS


# -- field readers -----------------------------------------------------------------------------


def _int(body: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgs(name, "must be an integer")
    if not low <= value <= high:
        raise InvalidArgs(name, f"must be between {low} and {high}")
    return value


def _str(body: dict[str, Any], name: str, limit: int) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgs(name, "must be a string")
    if len(value) > limit:
        raise InvalidArgs(name, f"is {len(value)} characters; the limit is {limit}")
    return value


def _enum(body: dict[str, Any], name: str, options: tuple[str, ...]) -> str | None:
    value = body.get(name)
    if value is not None and value not in options:
        raise InvalidArgs(name, f"must be one of {', '.join(options)}")
    return value


def _coord(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgs(name, "must be an integer pixel coordinate")
    if not -MAX_COORD < value < MAX_COORD:
        raise InvalidArgs(name, "is far outside any screen")
    return value


def _xy(body: dict[str, Any]) -> Point | None:
    x, y = body.get("x"), body.get("y")
    if x is None and y is None:
        return None
    if x is None or y is None:
        raise InvalidArgs("x" if x is None else "y", "x and y go together")
    return _coord(x, "x"), _coord(y, "y")


def _point_field(body: dict[str, Any], name: str) -> Point | None:
    """``{x, y}`` or ``[x, y]``."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, dict) and set(value) == {"x", "y"}:
        return _coord(value["x"], f"{name}.x"), _coord(value["y"], f"{name}.y")
    if isinstance(value, list) and len(value) == 2:
        return _coord(value[0], f"{name}[0]"), _coord(value[1], f"{name}[1]")
    raise InvalidArgs(name, "must be a point {x, y}")


def _bbox(body: dict[str, Any]) -> tuple[int, int, int, int] | None:
    """``{x, y, width, height}`` or ``[x, y, width, height]``."""
    value = body.get("target_bbox")
    if value is None:
        return None
    names = ("x", "y", "width", "height")
    if isinstance(value, dict) and set(value) == set(names):
        items = [value[n] for n in names]
    elif isinstance(value, list) and len(value) == 4:
        items = value
    else:
        raise InvalidArgs("target_bbox", "must be {x, y, width, height}")
    x, y, w, h = (_coord(v, f"target_bbox.{n}") for v, n in zip(items, names, strict=True))
    if w <= 0 or h <= 0:
        raise InvalidArgs("target_bbox", "width and height must be positive")
    return x, y, w, h


def _timeout(body: dict[str, Any]) -> float:
    value = body.get("timeout", DEFAULT_TIMEOUT_S)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise InvalidArgs("timeout", "must be a number of seconds")
    if not MIN_TIMEOUT_S <= value <= MAX_TIMEOUT_S:
        raise InvalidArgs("timeout", f"must be between {MIN_TIMEOUT_S:g} and {MAX_TIMEOUT_S:g}")
    return float(value)


def _session(body: dict[str, Any]) -> str | None:
    value = body.get("desktop_session_id")
    if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 128):
        raise InvalidArgs("desktop_session_id", "must be a desktop session id string")
    return value


# -- per-action relay arguments ----------------------------------------------------------------


def _need(value: Any, name: str, action: str) -> Any:
    if value is None:
        raise InvalidArgs(name, f"is required for {action}")
    return value


def _screenshot_args(body: dict[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = {"format": _enum(body, "format", FORMATS) or "png"}
    if (quality := _int(body, "quality", 1, 100)) is not None:
        args["quality"] = quality
    if (width := _int(body, "preview_max_width", 16, 100_000)) is not None:
        args["preview_max_width"] = width
    return args


def _pointer_args(action: str, body: dict[str, Any], point: Point | None) -> dict[str, Any]:
    x, y = _need(point, "x", action)
    args: dict[str, Any] = {"x": x, "y": y}
    if action != "move":
        args["button"] = _enum(body, "button", BUTTONS) or "left"
    return args


def _scroll_args(body: dict[str, Any], point: Point | None) -> dict[str, Any]:
    args: dict[str, Any] = {
        "direction": _enum(body, "direction", DIRECTIONS) or "down",
        "amount": _int(body, "amount", 1, MAX_AMOUNT) or 3,
    }
    if point is not None:
        args["x"], args["y"] = point
    return args


def _drag_points(body: dict[str, Any]) -> tuple[Point, Point]:
    start, xy = _point_field(body, "from"), _xy(body)
    if start is not None and xy is not None:
        raise InvalidArgs("from", "give the start point as from or as x, y, not both")
    start = _need(start or xy, "from", "drag")
    return start, _need(_point_field(body, "to"), "to", "drag")


def parse(body: Any) -> ScreenRequest:
    """Check a ``screen`` request body; every problem is ``InvalidArgs`` naming the field."""
    if not isinstance(body, dict):
        raise InvalidArgs("body", "must be a JSON object")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise InvalidArgs(unknown[0], "is not a field of the screen action")
    action = _enum(body, "action", SCREEN_ACTIONS)
    if action is None:
        raise InvalidArgs("action", f"is required: one of {', '.join(SCREEN_ACTIONS)}")
    local = body.get("local", False)
    if not isinstance(local, bool):
        raise InvalidArgs("local", "must be true or false")
    common = {
        "action": action,
        "desktop_session_id": _session(body),
        "local": local,
        "timeout_s": _timeout(body),
        "revision": body.get("expected_screen_revision"),
    }
    return _for_action(action, body, common)


def _for_action(action: str, body: dict[str, Any], common: dict[str, Any]) -> ScreenRequest:
    bbox = _bbox(body)
    if bbox is not None and action not in GUARDED_ACTIONS:
        raise InvalidArgs("target_bbox", "applies to click, double_click and drag only")
    if action == "drag":
        start, end = _drag_points(body)
        args = {"x": start[0], "y": start[1], "to_x": end[0], "to_y": end[1],
                "button": _enum(body, "button", BUTTONS) or "left"}  # fmt: skip
        return ScreenRequest(**common, point=start, end=end, target_bbox=bbox, relay_args=args)
    point = _xy(body)
    if action in ("click", "double_click", "move"):
        args = _pointer_args(action, body, point)
    elif action == "scroll":
        args = _scroll_args(body, point)
    elif action == "screenshot":
        args = _screenshot_args(body)
    elif action == "type":
        args = {"text": _need(_str(body, "text", MAX_TEXT), "text", action)}
    elif action == "key":
        args = {"keys": _need(_str(body, "key", MAX_KEY), "key", action)}
    else:
        args = {}
    return ScreenRequest(**common, point=point, target_bbox=bbox, relay_args=args)


def audit_shape(request: ScreenRequest) -> dict[str, Any]:
    """What the audit row may say about a request: its shape, never typed text or keys."""
    shape: dict[str, Any] = {"action": request.action, "local": request.local}
    if request.point is not None:
        shape["x"], shape["y"] = request.point
    if request.end is not None:
        shape["to_x"], shape["to_y"] = request.end
    if request.target_bbox is not None:
        shape["target_bbox"] = list(request.target_bbox)
    args = request.relay_args
    for name in ("button", "direction", "amount", "format", "preview_max_width"):
        if name in args:
            shape[name] = args[name]
    if "text" in args:
        shape["text_length"] = len(args["text"])
    if "keys" in args:
        # A chord can spell a secret one key at a time: record only how many keys it has.
        shape["key_count"] = len([part for part in args["keys"].split("+") if part]) or 1
    shape["guarded"] = request.guarded
    return shape
