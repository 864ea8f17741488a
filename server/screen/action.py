"""The ``screen`` typed action: its tool definition and the handler the registry calls.

The schema is worded for an LLM reading it as a tool definition. The handler resolves the
relay through the registry's context (visibility, role and conversation are checked there)
and hands the call to the server's one :class:`ScreenTool`, which the composition root
(``server.app``) binds to the action with :func:`screen_action`.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, Final, cast

from server.actions.context import ActionContext
from server.actions.errors import relay_error
from server.actions.registry import Action, tool_schema
from server.actions.schema import Schema
from server.control.screen import screen_input
from server.screen.tool import Caller, ScreenTool
from wire import screen_args
from wire.errors import ErrorCode, OpError
from wire.ids import RelayId
from wire.screen_actions import SCREEN_ACTIONS
from wire.screen_coords import COORDINATES, MAX_SCALE, MAX_ZOOM_PIXELS, MAX_ZOOM_SIDE, MIN_SCALE

_NUMBER: Final[Schema] = {"type": "number"}
_POINT: Final[Schema] = {
    "type": "object",
    "properties": {"x": _NUMBER, "y": _NUMBER},
    "required": ["x", "y"],
    "additionalProperties": False,
}
_BOX_KEYS: Final = ("x", "y", "width", "height")
_BOX: Final[Schema] = {
    "type": "object",
    "properties": {k: _NUMBER for k in _BOX_KEYS},
    "required": list(_BOX_KEYS),
    "additionalProperties": False,
}

PROPERTIES: Final[dict[str, Schema]] = {
    "action": {
        "type": "string",
        "enum": list(SCREEN_ACTIONS),
        "description": "What to do. Take a screenshot first (or zoom into a region of it); "
        "click, double_click, drag and mouse_down must name the screen_revision of the "
        "screenshot or zoom their point was chosen on. mouse_down/mouse_up press and release "
        "a mouse button separately, key_down/key_up one key (hold shift while clicking, drag "
        "step by step with move in between); whatever you press stays held until you release "
        "it.",
    },
    "relay": {
        "type": "string",
        "minLength": 1,
        "maxLength": 64,
        "description": "Relay name or id; may be left out when the conversation sees one relay.",
    },
    "desktop_session_id": {
        "type": "string",
        # The audit row's column holds 64 characters: every id the schema allows fits it.
        "pattern": "^[A-Za-z0-9_-]{1,64}$",
        "description": "Which desktop; default: the relay's running virtual desktop (slot main).",
    },
    "local": {
        "type": "boolean",
        "default": False,
        "description": "Drive the relay host's real screen (through its host helper).",
    },
    "coordinates": {
        "type": "string",
        "enum": list(COORDINATES),
        "default": "pixels",
        "description": "What x, y, from, to, target_bbox and region mean. 'pixels' (default): "
        "pixels of the FULL-RESOLUTION screen, as in a screenshot (not its preview), also "
        "when the revision is a zoom's. 'normalized': 0..1000 on both axes across the whole "
        "screen, or across relative_to; 500,500 is the centre, 1000 the far edge. 'zoom': "
        "pixels of the zoom image named by expected_screen_revision.",
    },
    "relative_to": {
        **_BOX,
        "properties": {k: {"type": "integer"} for k in _BOX_KEYS},
        "description": "With coordinates 'normalized': the region (screen pixels, e.g. a "
        "window's or an element's bounds) that 0..1000 spans; default the whole screen.",
    },
    "x": {
        "type": "number",
        "description": "Horizontal position: by default a pixel of the FULL-RESOLUTION "
        "screenshot (not the preview), 0 is the left edge; see coordinates for normalized and "
        "zoom. For click, double_click, move, drag (start) and scroll (where to scroll); "
        "optional for mouse_down and mouse_up, which move there first (without x, y they act "
        "where the pointer is).",
    },
    "y": {
        "type": "number",
        "description": "Vertical position, like x; 0 is the top edge.",
    },
    "button": {
        "type": "string",
        "enum": list(screen_args.BUTTON_NAMES),
        "default": "left",
        "description": "For click, double_click, drag, mouse_down and mouse_up.",
    },
    "text": {
        "type": "string",
        "maxLength": screen_args.MAX_TEXT,
        "description": "For type: the text to type, exactly (any Unicode characters).",
    },
    "key": {
        "type": "string",
        "maxLength": screen_args.MAX_KEY,
        "description": "For key: a key or chord, e.g. 'Return', 'ctrl+shift+t', 'alt+F4'. "
        "For key_down and key_up: exactly one key name, e.g. 'shift', 'ctrl', 'a', 'Return' "
        "(hold a chord with one key_down per key; key_up releases it). A held letter repeats "
        "after about half a second, as on a real keyboard: hold modifiers, type text with "
        "type.",
    },
    "amount": {
        "type": "integer",
        "minimum": 1,
        "maximum": screen_args.MAX_AMOUNT,
        "description": "For scroll: wheel clicks (default 3).",
    },
    "direction": {
        "type": "string",
        "enum": list(screen_args.SCROLL_DIRECTIONS),
        "description": "For scroll: direction (default down).",
    },
    "from": {**_POINT, "description": "For drag: start point {x, y} (see coordinates)."},
    "to": {**_POINT, "description": "For drag: end point {x, y} (see coordinates)."},
    "target_bbox": {
        **_BOX,
        "description": "Optional box {x, y, width, height} (see coordinates) of the element "
        "being clicked (click, double_click, drag, mouse_down); the point must lie inside. "
        "Only changes inside it (plus a margin) refuse the action as stale.",
    },
    "region": {
        **_BOX,
        "description": "For zoom (required): the region {x, y, width, height} to look at "
        "closely, in pixels or normalized (see coordinates); it must lie on the screen.",
    },
    "scale": {
        "type": "number",
        "minimum": MIN_SCALE,
        "maximum": MAX_SCALE,
        "default": 1,
        "description": "For zoom: enlarge the region by this factor (1..4; whole numbers keep "
        f"pixels sharp). The image may be at most {MAX_ZOOM_SIDE} px a side and "
        f"{MAX_ZOOM_PIXELS:,} pixels.",
    },
    "grid": {
        "type": "boolean",
        "default": False,
        "description": "For screenshot and zoom: draw labelled coordinate lines on the image, "
        "in the coordinates asked for (pixels: screen pixels, also on a zoom; normalized: "
        "0..1000). A click at a labelled value lands on that line. The guard compares the "
        "real screen, not the lines.",
    },
    "expected_screen_revision": {
        "type": "string",
        "maxLength": 1024,
        "description": "Required for click, double_click, drag and mouse_down: the "
        "screen_revision returned by the screenshot or zoom the point was chosen on (for "
        "mouse_down without x, y: the point is where the pointer is). If the screen changed "
        "there since, the action is refused with stale_screen and nothing is clicked. A "
        "zoom's revision guards points inside its region only.",
    },
    "preview_max_width": {
        "type": "integer",
        "minimum": screen_args.PREVIEW_MAX_WIDTH[0],
        "description": "Screenshot: also return a smaller preview of at most this width. "
        "Coordinates stay full resolution: scale preview pixels by width/preview.width.",
    },
    "format": {"type": "string", "enum": list(screen_args.IMAGE_FORMATS), "default": "png"},
    "quality": {
        "type": "integer",
        "minimum": screen_args.QUALITY[0],
        "maximum": screen_args.QUALITY[1],
    },
    "timeout": {"type": "number", "minimum": 1, "maximum": 120, "description": "Seconds."},
}

DESCRIPTION: Final = (
    "See and drive a live Linux desktop through pixels (answers carry source: 'vision'); "
    "prefer accessibility actions where an application offers them. 'screenshot' returns a "
    "PNG (width, height, screen_revision); by default every coordinate is a pixel of that "
    "full-resolution image, or send coordinates: 'normalized' (0..1000 on both axes). 'zoom' "
    "returns a region at full resolution, optionally enlarged, with its own "
    "screen_revision, to read small text or aim precisely; grid: true labels coordinates on "
    "the image. Pointer actions that act on what you saw (click, double_click, drag, "
    "mouse_down) require expected_screen_revision; if the screen changed around the point "
    "since that screenshot or zoom they fail with stale_screen and send no input: look again "
    "and choose again. mouse_down/mouse_up and key_down/key_up hold a button or key between "
    "actions: release everything you press; what is left held is released when the "
    "desktop's screen connection closes."
)


class RouterRequests:
    """``RelayRouter.request`` with relay errors as clients see them (a timeout is
    ``relay_timeout``)."""

    def __init__(self, relays: Any) -> None:
        self._relays = relays

    async def request(
        self, relay_id: RelayId, op: str, args: dict[str, Any] | None = None, timeout_s: float = 30
    ) -> Any:
        try:
            return await self._relays.request(relay_id, op, args, timeout_s)
        except OpError as err:
            raise relay_error(err) from err

    def capabilities(self, relay_id: RelayId) -> frozenset[str]:
        """What the relay announced (empty for one not connected anywhere)."""
        return cast(frozenset[str], self._relays.capabilities(relay_id))


async def handle(tool: ScreenTool, ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    """The action's handler over ``tool``: resolve the relay, run the tool, report the session."""
    caller = Caller(ctx.principal.username, ctx.conversation_id, None, ctx.source)
    relay_name = args.get("relay")
    try:
        relay = await ctx.resolve_relay(relay_name if isinstance(relay_name, str) else None)
    except OpError as err:
        await tool.refused(caller, args, err)
        raise
    caller = replace(caller, relay_id=relay.relay_id)
    ctx.desktop_session_id = args.get("desktop_session_id")
    try:
        # Input actions pass the control gate first (a person in charge, Stop; reads do not).
        async with screen_input(ctx, args, functools.partial(tool.refused, caller, args)):
            result = await tool.run(caller, args)
    except OpError as err:
        message, details = schema_field_names(err.message, err.details)
        if message == err.message:
            raise
        raise OpError(err.code, message, details) from err
    ctx.desktop_session_id = result.get("desktop_session_id")
    return result


# Relay argument names that differ from the action's schema: errors name the schema's field.
SCHEMA_FIELDS: Final = {"keys": "key", "to_x": "to", "to_y": "to"}


def schema_field_names(message: str, details: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A relay error worded with the fields the caller sent (``key``, not the relay's ``keys``)."""
    field = details.get("field")
    if not isinstance(field, str) or field not in SCHEMA_FIELDS:
        return message, details
    name = SCHEMA_FIELDS[field]
    if message.startswith(f"{field}:"):
        message = name + message[len(field) :]
    return message, {**details, "field": name}


async def _no_tool(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    raise OpError(ErrorCode.INTERNAL, "this server runs no screen tool")


# The action's definition; the server registers it bound to its tool (:func:`screen_action`).
# The tool audits every attempt itself, with the action's shape (never typed text or pixels).
SCREEN_ACTION: Final = Action(
    name="screen",
    role="write",
    json_schema=tool_schema(PROPERTIES, ("action",)),
    description=DESCRIPTION,
    handler=_no_tool,
)


def screen_action(tool: ScreenTool) -> Action:
    """The ``screen`` action, run by ``tool``."""
    return replace(SCREEN_ACTION, handler=functools.partial(handle, tool))
