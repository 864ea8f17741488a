"""The ``screen`` action's request: field checks and the relay arguments it becomes.

Checks here are about shape (types, enums, which fields an action needs). Coordinates are
kept as sent until :meth:`ScreenRequest.placed` converts them, once, to screen pixels (the
tool knows by then what they are relative to). Whether a point lies on the screen is checked
against the kept screenshot or zoom for guarded actions (``server.screen.tool``) and against
the live screen by the relay for every action; coordinates are never clamped.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from wire import screen_args
from wire.errors import InvalidArgs
from wire.guard import CropRect
from wire.screen_actions import GUARDED_ACTIONS, IMAGE_ACTIONS, SCREEN_ACTIONS, ScreenAction
from wire.screen_args import (
    BUTTON_NAMES,
    DEFAULT_AMOUNT,
    IMAGE_FORMATS,
    MAX_AMOUNT,
    MAX_KEY,
    MAX_TEXT,
    PREVIEW_MAX_WIDTH,
    QUALITY,
    SCROLL_DIRECTIONS,
)
from wire.screen_coords import COORDINATES, MAX_SCALE, MIN_SCALE, Coordinates, Frame, zoom_size

MAX_COORD = 1 << 16
MIN_TIMEOUT_S, MAX_TIMEOUT_S, DEFAULT_TIMEOUT_S = 1.0, 120.0, 30.0
# Fields the actions registry handles (target relay, conversation) are accepted and ignored.
ROUTING_FIELDS = frozenset({"conversation_id", "relay", "relay_id"})
FIELDS = (
    frozenset(
        {
            "action",
            "desktop_session_id",
            "local",
            "x",
            "y",
            "button",
            "text",
            "key",
            "amount",
            "direction",
            "from",
            "to",
            "target_bbox",
            "expected_screen_revision",
            "preview_max_width",
            "format",
            "quality",
            "timeout",
            "coordinates",
            "relative_to",
            "region",
            "scale",
            "grid",
        }
    )
    | ROUTING_FIELDS
)

Number = int | float
Point = tuple[int, int]


@dataclass(frozen=True)
class Given:
    """Numbers as the caller sent them (any coordinate system), and the fields they came from."""

    values: tuple[Number, ...]
    fields: tuple[str, ...]


@dataclass(frozen=True)
class Geometry:
    """A request's coordinates in screen pixels: converted once, before the guard."""

    point: Point | None = None
    end: Point | None = None
    target_bbox: CropRect | None = None
    region: CropRect | None = None


@dataclass(frozen=True)
class ScreenRequest:
    """A checked ``screen`` call: its numbers as given until :meth:`placed` converts them."""

    action: ScreenAction
    desktop_session_id: str | None = None
    local: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    coordinates: Coordinates = "pixels"
    relative_to: CropRect | None = None
    point: Given | None = None
    end: Given | None = None
    target_bbox: Given | None = None
    region: Given | None = None
    grid: bool = False
    revision: str | None = None
    relay_args: dict[str, Any] = field(default_factory=dict)
    geometry: Geometry | None = None

    @property
    def guarded(self) -> bool:
        return self.action in GUARDED_ACTIONS

    @property
    def has_coordinates(self) -> bool:
        """Whether any number of the request is a coordinate to convert."""
        return any(g is not None for g in (self.point, self.end, self.target_bbox, self.region))

    @property
    def needs_screen_size(self) -> bool:
        """Normalized coordinates across the whole screen: its size decides the pixels."""
        return (
            self.coordinates == "normalized" and self.relative_to is None and self.has_coordinates
        )

    @property
    def uses_revision(self) -> bool:
        """Whether the call needs the capture its revision names: a guarded action's guard, or
        what its coordinates refer to (a zoom's pixels, the screen normalized ones span)."""
        zoomed = self.coordinates == "zoom" and self.has_coordinates
        return self.revision is not None and (self.guarded or zoomed or self.needs_screen_size)

    def placed(self, frame: Frame) -> ScreenRequest:
        """The request with its coordinates in screen pixels and its relay arguments complete.

        The one conversion of a request's coordinates (``wire.screen_coords`` does the
        arithmetic): every check after it, the guard's included, sees screen pixels.
        """
        if not (self.has_coordinates or self.grid):
            return self  # nothing to convert (most screenshots, type, key, …)
        geometry = Geometry(
            point=None if self.point is None else _point(frame, self.point),
            end=None if self.end is None else _point(frame, self.end),
            target_bbox=None if self.target_bbox is None else _box(frame, self.target_bbox),
            region=None if self.region is None else _box(frame, self.region),
        )
        if geometry.region is not None:  # a zoom too large is refused before the relay
            zoom_size(
                geometry.region.width, geometry.region.height, self.relay_args.get("scale", 1)
            )
        return replace(self, geometry=geometry, relay_args=_relay_args(self, geometry))

    @property
    def at_pointer(self) -> bool:
        """A guarded action without a point (``mouse_down``): it acts where the pointer is."""
        return self.guarded and self.point is None

    def pointed(self, pointer: Point) -> ScreenRequest:
        """The placed request acting at ``pointer`` (screen pixels, read from the desktop)."""
        geometry = replace(self.geometry or Geometry(), point=pointer)
        args = {**self.relay_args, "x": pointer[0], "y": pointer[1]}
        return replace(self, geometry=geometry, relay_args=args)


def _point(frame: Frame, given: Given) -> Point:
    return frame.point((given.values[0], given.values[1]), (given.fields[0], given.fields[1]))


def _box(frame: Frame, given: Given) -> CropRect:
    x, y, width, height = given.values
    return frame.box((x, y, width, height), given.fields[0].rsplit(".", 1)[0])


def _relay_args(request: ScreenRequest, geometry: Geometry) -> dict[str, Any]:
    args = dict(request.relay_args)
    if geometry.point is not None:
        args["x"], args["y"] = geometry.point
    if geometry.end is not None:
        args["to_x"], args["to_y"] = geometry.end
    if geometry.region is not None:
        args["region"] = geometry.region.to_dict()
    if request.grid:
        grid: dict[str, Any] = {"coordinates": request.coordinates}
        if request.relative_to is not None:
            grid["relative_to"] = request.relative_to.to_dict()
        args["grid"] = grid
    return args


# -- field readers -----------------------------------------------------------------------------


# The rules are ``wire.screen_args``'s; here an absent field is None (the relay has defaults).


def _int(body: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = body.get(name)
    return None if value is None else screen_args.whole_number(value, name, low, high)


def _str(body: dict[str, Any], name: str, limit: int) -> str | None:
    value = body.get(name)
    return None if value is None else screen_args.text(value, name, limit)


def _enum(body: dict[str, Any], name: str, options: tuple[str, ...]) -> str | None:
    value = body.get(name)
    return None if value is None else screen_args.one_of(value, name, options)


def _number(value: Any, name: str) -> Number:
    """A coordinate as sent: its system (pixels, normalized, zoom) is judged when converted."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgs(name, "must be a number")
    if not -MAX_COORD < value < MAX_COORD:  # also refuses NaN
        raise InvalidArgs(name, "is far outside any screen")
    return value


def _given(values: list[Any], fields: tuple[str, ...]) -> Given:
    numbers = tuple(_number(v, f) for v, f in zip(values, fields, strict=True))
    return Given(numbers, fields)


def _xy(body: dict[str, Any]) -> Given | None:
    x, y = body.get("x"), body.get("y")
    if x is None and y is None:
        return None
    if x is None or y is None:
        raise InvalidArgs("x" if x is None else "y", "x and y go together")
    return _given([x, y], ("x", "y"))


def _point_field(body: dict[str, Any], name: str) -> Given | None:
    """``{x, y}`` or ``[x, y]``."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, dict) and set(value) == {"x", "y"}:
        return _given([value["x"], value["y"]], (f"{name}.x", f"{name}.y"))
    if isinstance(value, list) and len(value) == 2:
        return _given(value, (f"{name}[0]", f"{name}[1]"))
    raise InvalidArgs(name, "must be a point {x, y}")


_BOX = ("x", "y", "width", "height")


def _box_field(body: dict[str, Any], name: str) -> Given | None:
    """``{x, y, width, height}`` or ``[x, y, width, height]``; errors name ``name.width`` etc."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, dict) and set(value) == set(_BOX):
        items = [value[n] for n in _BOX]
    elif isinstance(value, list) and len(value) == 4:
        items = value
    else:
        raise InvalidArgs(name, "must be {x, y, width, height}")
    return _given(items, tuple(f"{name}.{n}" for n in _BOX))


def _relative_to(body: dict[str, Any], coordinates: str) -> CropRect | None:
    """The region normalized coordinates span, in screen pixels (default: the whole screen)."""
    given = _box_field(body, "relative_to")
    if given is None:
        return None
    if coordinates != "normalized":
        raise InvalidArgs("relative_to", 'applies to coordinates: "normalized" only')
    return Frame.pixels().box(
        (given.values[0], given.values[1], given.values[2], given.values[3]), "relative_to"
    )


def _scale(body: dict[str, Any]) -> Number | None:
    value = body.get("scale")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgs("scale", f"must be a number from {MIN_SCALE} to {MAX_SCALE}")
    if not MIN_SCALE <= value <= MAX_SCALE:
        raise InvalidArgs("scale", f"must be between {MIN_SCALE} and {MAX_SCALE}")
    return value


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise InvalidArgs(name, "must be true or false")
    return value


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


def _image_args(body: dict[str, Any], action: str) -> dict[str, Any]:
    args: dict[str, Any] = {"format": _enum(body, "format", IMAGE_FORMATS) or "png"}
    if (quality := _int(body, "quality", *QUALITY)) is not None:
        args["quality"] = quality
    if action == "zoom":
        if (scale := _scale(body)) is not None:
            args["scale"] = scale
    elif (width := _int(body, "preview_max_width", *PREVIEW_MAX_WIDTH)) is not None:
        args["preview_max_width"] = width
    return args


def _pointer_args(action: str, body: dict[str, Any]) -> dict[str, Any]:
    return {} if action == "move" else {"button": _enum(body, "button", BUTTON_NAMES) or "left"}


def _scroll_args(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "direction": _enum(body, "direction", SCROLL_DIRECTIONS) or "down",
        "amount": _int(body, "amount", 1, MAX_AMOUNT) or DEFAULT_AMOUNT,
    }


def _drag_points(body: dict[str, Any]) -> tuple[Given, Given]:
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
    coordinates = _enum(body, "coordinates", COORDINATES) or "pixels"
    if coordinates == "zoom" and action in IMAGE_ACTIONS:
        raise InvalidArgs(
            "coordinates",
            "zoom coordinates are pixels of an earlier zoom, for actions that name its "
            f"screen_revision; {action} takes pixels or normalized",
        )
    common = {
        "action": action,
        "desktop_session_id": _session(body),
        "local": _flag(body, "local"),
        "timeout_s": _timeout(body),
        "coordinates": coordinates,
        "relative_to": _relative_to(body, coordinates),
        "revision": body.get("expected_screen_revision"),
    }
    return _for_action(action, body, common)


def _for_action(action: str, body: dict[str, Any], common: dict[str, Any]) -> ScreenRequest:
    bbox = _box_field(body, "target_bbox")
    if bbox is not None and action not in GUARDED_ACTIONS:
        raise InvalidArgs("target_bbox", "applies to click, double_click, drag and mouse_down only")
    if action == "drag":
        start, end = _drag_points(body)
        args = _pointer_args(action, body)
        return ScreenRequest(**common, point=start, end=end, target_bbox=bbox, relay_args=args)
    if action in IMAGE_ACTIONS:
        region = _need(_box_field(body, "region"), "region", action) if action == "zoom" else None
        args = _image_args(body, action)
        return ScreenRequest(**common, region=region, grid=_flag(body, "grid"), relay_args=args)
    point = _xy(body)
    if action in ("click", "double_click", "move"):
        _need(point, "x", action)
        args = _pointer_args(action, body)
    elif action in ("mouse_down", "mouse_up"):
        args = _pointer_args(action, body)  # the point is optional: else where the pointer is
    elif action == "scroll":
        args = _scroll_args(body)
    elif action == "type":
        args = {"text": _need(_str(body, "text", MAX_TEXT), "text", action)}
    elif action in ("key", "key_down", "key_up"):
        args = {"keys": _need(_str(body, "key", MAX_KEY), "key", action)}
    else:
        args, point = {}, None
    return ScreenRequest(**common, point=point, target_bbox=bbox, relay_args=args)


def audit_shape(request: ScreenRequest) -> dict[str, Any]:
    """What the audit row may say about a request: its shape, never typed text or keys.

    Coordinates are the screen pixels they were converted to (as sent, before a conversion
    failed)."""
    shape: dict[str, Any] = {"action": request.action, "local": request.local}
    if request.coordinates != "pixels":
        shape["coordinates"] = request.coordinates
    shape.update(_audit_geometry(request))
    args = request.relay_args
    for name in ("button", "direction", "amount", "format", "preview_max_width", "scale"):
        if name in args:
            shape[name] = args[name]
    if request.grid:
        shape["grid"] = True
    if "text" in args:
        shape["text_length"] = len(args["text"])
    if "keys" in args:
        # A chord can spell a secret one key at a time: record only how many keys it has.
        shape["key_count"] = len([part for part in args["keys"].split("+") if part]) or 1
    shape["guarded"] = request.guarded
    return shape


def _audit_geometry(request: ScreenRequest) -> dict[str, Any]:
    placed = request.geometry
    if placed is None:
        point, end = request.point, request.end
        bbox, region = request.target_bbox, request.region
        shape: dict[str, Any] = {}
        if point is not None:
            shape["x"], shape["y"] = point.values
        if end is not None:
            shape["to_x"], shape["to_y"] = end.values
        if bbox is not None:
            shape["target_bbox"] = list(bbox.values)
        if region is not None:
            shape["region"] = list(region.values)
        return shape
    shape = {}
    if placed.point is not None:
        shape["x"], shape["y"] = placed.point
    if placed.end is not None:
        shape["to_x"], shape["to_y"] = placed.end
    for name, rect in (("target_bbox", placed.target_bbox), ("region", placed.region)):
        if rect is not None:
            shape[name] = [rect.x, rect.y, rect.width, rect.height]
    return shape
