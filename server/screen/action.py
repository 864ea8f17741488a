"""The ``screen`` typed action: its tool definition and the handler the registry calls.

The schema is worded for an LLM reading it as a tool definition. The handler resolves the
relay through the registry's context (visibility, role and conversation are checked there)
and hands the call to the server's one :class:`ScreenTool` (``Services.screen_tool``, made
by ``server.screen.feature``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

from server.actions.context import ActionContext
from server.actions.errors import relay_error
from server.actions.registry import Action, tool_schema
from server.actions.schema import Schema
from server.screen.request import BUTTONS, DIRECTIONS, FORMATS, MAX_AMOUNT, MAX_TEXT
from server.screen.tool import Caller
from wire.errors import OpError
from wire.ids import RelayId
from wire.screen_actions import SCREEN_ACTIONS

_POINT: Final[Schema] = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
    "required": ["x", "y"],
    "additionalProperties": False,
}

PROPERTIES: Final[dict[str, Schema]] = {
    "action": {
        "type": "string",
        "enum": list(SCREEN_ACTIONS),
        "description": "What to do. Take a screenshot first; click, double_click and drag "
        "must name the screen_revision of the screenshot their point was chosen on.",
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
    "x": {
        "type": "integer",
        "description": "Horizontal pixel in the FULL-RESOLUTION screenshot (not the preview); "
        "0 is the left edge. For click, double_click, move, and scroll (where to scroll).",
    },
    "y": {
        "type": "integer",
        "description": "Vertical pixel in the full-resolution screenshot; 0 is the top edge.",
    },
    "button": {"type": "string", "enum": list(BUTTONS), "default": "left"},
    "text": {
        "type": "string",
        "maxLength": MAX_TEXT,
        "description": "For type: the text to type, exactly (any Unicode characters).",
    },
    "key": {
        "type": "string",
        "maxLength": 200,
        "description": "For key: a key or chord, e.g. 'Return', 'ctrl+shift+t', 'alt+F4'.",
    },
    "amount": {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_AMOUNT,
        "description": "For scroll: wheel clicks (default 3).",
    },
    "direction": {
        "type": "string",
        "enum": list(DIRECTIONS),
        "description": "For scroll: direction (default down).",
    },
    "from": {**_POINT, "description": "For drag: start point {x, y} (full resolution)."},
    "to": {**_POINT, "description": "For drag: end point {x, y} (full resolution)."},
    "target_bbox": {
        "type": "object",
        "properties": {k: {"type": "integer"} for k in ("x", "y", "width", "height")},
        "required": ["x", "y", "width", "height"],
        "additionalProperties": False,
        "description": "Optional box (full resolution) of the element being clicked; the point "
        "must lie inside. Only changes inside it (plus a margin) refuse the click as stale.",
    },
    "expected_screen_revision": {
        "type": "string",
        "maxLength": 1024,
        "description": "Required for click, double_click and drag: the screen_revision returned "
        "by the screenshot the point was chosen on. If the screen changed there since, the "
        "action is refused with stale_screen and nothing is clicked.",
    },
    "preview_max_width": {
        "type": "integer",
        "minimum": 16,
        "description": "Screenshot: also return a smaller preview of at most this width. "
        "Coordinates stay full resolution: scale preview pixels by width/preview.width.",
    },
    "format": {"type": "string", "enum": list(FORMATS), "default": "png"},
    "quality": {"type": "integer", "minimum": 1, "maximum": 100},
    "timeout": {"type": "number", "minimum": 1, "maximum": 120, "description": "Seconds."},
}

DESCRIPTION: Final = (
    "See and drive a live Linux desktop. 'screenshot' returns a PNG (width, height, "
    "screen_revision); all coordinates are pixels of that full-resolution image. Pointer "
    "actions that act on what you saw (click, double_click, drag) require "
    "expected_screen_revision; if the screen changed around the point since that screenshot "
    "they fail with stale_screen and send no input: take a new screenshot and choose again."
)


class HubRequests:
    """``hub.request`` with relay errors as clients see them (a timeout is relay_timeout)."""

    def __init__(self, hub: Any) -> None:
        self._hub = hub

    async def request(
        self, relay_id: RelayId, op: str, args: dict[str, Any] | None = None, timeout_s: float = 30
    ) -> Any:
        try:
            return await self._hub.request(relay_id, op, args, timeout_s)
        except OpError as err:
            raise relay_error(err) from err


async def handle(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    """The registry's handler: resolve the relay, run the tool, report the session."""
    tool = ctx.services.screen_tool
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


# The tool audits every attempt itself, with the action's shape (never typed text or pixels).
SCREEN_ACTION: Final = Action(
    name="screen",
    role="write",
    json_schema=tool_schema(PROPERTIES, ("action",)),
    description=DESCRIPTION,
    handler=handle,
)
