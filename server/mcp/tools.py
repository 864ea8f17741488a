"""The action registry as MCP tools, and action answers as MCP tool results (pure).

A tool is an action bound to one conversation: its input schema is the action's schema without
``conversation_id``, which the endpoint supplies. An answer becomes a tool result: the action's
JSON answer as text; pictures (``image`` + ``format``, and a ``preview``'s image) move out of
the text into image content; an error answer is a tool error whose text is the one error body
``{ok: false, error: {code, message, …}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import mcp_types as types

from server.actions.registry import Action, ActionRegistry
from server.actions.schema import Schema
from server.db.records import Role, role_allows
from server.errors import error_body
from wire import jsontext
from wire.errors import InvalidArgs

BOUND_ARGUMENT: Final = "conversation_id"
IMAGE_MIME_TYPES: Final[Mapping[str, str]] = {
    "png": "image/png",
    "jpeg": "image/jpeg",
    "webp": "image/webp",
}


def input_schema(action: Action) -> Schema:
    """The action's schema with ``conversation_id`` taken out (the endpoint supplies it)."""
    schema = action.json_schema
    properties = {k: v for k, v in schema.get("properties", {}).items() if k != BOUND_ARGUMENT}
    required = [name for name in schema.get("required", ()) if name != BOUND_ARGUMENT]
    bound: Schema = {**schema, "type": "object", "properties": properties}
    if required:
        bound["required"] = required
    else:
        bound.pop("required", None)
    return bound


def tool_of(action: Action) -> types.Tool:
    """One action as an MCP tool; actions that only look say so in their annotations."""
    return types.Tool(
        name=action.name,
        description=action.description,
        input_schema=input_schema(action),
        annotations=types.ToolAnnotations(read_only_hint=action.changes_nothing),
    )


def tools_for(
    registry: ActionRegistry, role: Role, capabilities: frozenset[str]
) -> list[types.Tool]:
    """The tools a member with ``role`` may call, by name: those the conversation's relays
    (announcing ``capabilities``) can carry out."""
    actions = (registry.get(name) for name in registry.names())
    return [
        tool_of(a)
        for a in actions
        if a is not None and role_allows(role, a.role) and a.offered_with(capabilities)
    ]


def bound_arguments(arguments: Mapping[str, Any] | None, conversation_id: str) -> dict[str, Any]:
    """The action's body: the tool's arguments plus the endpoint's conversation.

    A ``conversation_id`` argument naming another conversation is refused (``InvalidArgs``):
    the endpoint's conversation is the only one its tools act in.
    """
    given = dict(arguments or {})
    named = given.get(BOUND_ARGUMENT, conversation_id)
    if named != conversation_id:
        raise InvalidArgs(
            BOUND_ARGUMENT,
            "this endpoint acts in its own conversation only; leave conversation_id out",
        )
    return {**given, BOUND_ARGUMENT: conversation_id}


def _text(value: Any) -> types.TextContent:
    return types.TextContent(text=jsontext.dumps_text(value))


def _without_image(value: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k != "image"}


def _pictures(answer: Mapping[str, Any]) -> tuple[dict[str, Any], list[types.ImageContent]]:
    """The answer without base64 pictures, and those pictures (the image, then its preview)."""
    mime_type = IMAGE_MIME_TYPES.get(str(answer.get("format")))
    if mime_type is None or not isinstance(answer.get("image"), str):
        return dict(answer), []
    images = [types.ImageContent(data=answer["image"], mime_type=mime_type)]
    rest = _without_image(answer)
    preview = answer.get("preview")
    if isinstance(preview, Mapping) and isinstance(preview.get("image"), str):
        images.append(types.ImageContent(data=preview["image"], mime_type=mime_type))
        rest["preview"] = _without_image(preview)
    return rest, images


def tool_result(status: int, answer: Mapping[str, Any]) -> types.CallToolResult:
    """``invoke``'s ``(status, body)`` as a tool result (an error answer is a tool error)."""
    if status != 200:
        return types.CallToolResult(content=[_text(answer)], is_error=True)
    rest, images = _pictures(answer)
    content: list[types.ContentBlock] = [_text(rest), *images]
    return types.CallToolResult(content=content)


def refused(err: InvalidArgs) -> types.CallToolResult:
    """A tool error for arguments refused before the action ran."""
    return types.CallToolResult(content=[_text(error_body(err))], is_error=True)
