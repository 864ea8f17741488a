"""The action registry: ``name → Action(name, role, json_schema, description, handler)``.

Every action's schema gets the required ``conversation_id`` here, so no action can forget it.
Other features add their actions with ``register`` (the screen tool registers ``screen``).

Roles (docs/security.md): ``read`` sees the inventory, status, the transcript and who is in
control, and may list and read the files of a desktop's home (the hand-over folder,
docs/files.md), never what is on its screen; every action that returns screen content (pixels,
accessibility text, the clipboard, window titles, running apps) or changes a desktop needs
``write``. An action that only looks says so with ``read_only`` (MCP's read-only hint); its
role still decides who may call it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from server.actions.schema import Schema
from server.db.records import Role

if TYPE_CHECKING:
    from server.actions.context import ActionContext

Handler = Callable[["ActionContext", dict[str, Any]], Awaitable[dict[str, Any]]]

# As long as the audit row's column (``models.ID_LEN``): every id the schema allows fits it.
CONVERSATION_ID: Final[Schema] = {
    "type": "string",
    "pattern": "^[A-Za-z0-9_-]{1,32}$",
    "description": "The conversation the call is made in; it decides which relays are visible "
    "and which role the caller has.",
}


def tool_schema(properties: dict[str, Schema], required: tuple[str, ...] = ()) -> Schema:
    """An object schema with ``conversation_id`` first and required, nothing else allowed."""
    return {
        "type": "object",
        "properties": {"conversation_id": CONVERSATION_ID, **properties},
        "required": ["conversation_id", *required],
        "additionalProperties": False,
    }


@dataclass(frozen=True)
class Action:
    """One typed action; ``audit_op`` set means every attempt is audited under that op."""

    name: str
    role: Role
    json_schema: Schema
    description: str
    handler: Handler = field(repr=False, compare=False)
    audit_op: str | None = None
    read_only: bool = False
    # The relay capability it needs (``shell``: RELAYDESK_CUA_SHELL=1); agents are offered it
    # only where a relay of their conversation announces it.
    needs: str | None = None

    def offered_with(self, capabilities: frozenset[str]) -> bool:
        """Whether a conversation whose relays announce ``capabilities`` is offered it."""
        return self.needs is None or self.needs in capabilities

    @property
    def changes_nothing(self) -> bool:
        """True for an action that only looks (every ``read`` action, and content reads)."""
        return self.role == "read" or self.read_only

    def definition(self) -> dict[str, Any]:
        """The action as a tool definition (name, description, input schema, role)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.json_schema,
            "required_role": self.role,
        }


class ActionRegistry:
    """The actions this server offers, by name."""

    def __init__(self, actions: tuple[Action, ...] | list[Action] = ()) -> None:
        self._actions: dict[str, Action] = {}
        for action in actions:
            self.register(action)

    def register(self, action: Action) -> None:
        """Add an action; a name is registered once."""
        if action.name in self._actions:
            raise ValueError(f"action {action.name!r} is already registered")
        if "conversation_id" not in action.json_schema.get("required", ()):
            raise ValueError(f"action {action.name!r} must require conversation_id")
        self._actions[action.name] = action

    def get(self, name: str) -> Action | None:
        return self._actions.get(name)

    def names(self) -> list[str]:
        return sorted(self._actions)

    def definitions(self) -> list[dict[str, Any]]:
        return [self._actions[name].definition() for name in self.names()]
