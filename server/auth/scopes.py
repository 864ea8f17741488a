"""An API token's scopes: ``read_only`` (only what role ``read`` allows) and one conversation.

A scope narrows what the token's user may do; it never widens it. Every door (the typed
actions, chat, events, MCP, Cua, computer-use, files) asks here, after the user's own role.
"""

from __future__ import annotations

from server.auth.principal import Principal
from server.db.records import Role


def scope_refusal(principal: Principal, conversation_id: str, needed: Role) -> str | None:
    """Why the caller's token may not do what needs role ``needed`` in the conversation (None
    when its scopes allow it). The message names the scope."""
    scope = principal.conversation_scope
    if scope is not None and conversation_id != scope:
        return f"this API token is limited to conversation {scope} (scope conversation)"
    if principal.read_only and needed != "read":
        return f"this API token is read-only (scope read_only): this needs role {needed}"
    return None


def scoped_role(principal: Principal, conversation_id: str, role: Role | None) -> Role | None:
    """The caller's role as the token's scopes leave it: none outside the token's conversation,
    ``read`` at most for a read-only token."""
    if role is None:
        return None
    if principal.conversation_scope not in (None, conversation_id):
        return None
    return "read" if principal.read_only else role
