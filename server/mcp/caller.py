"""Who an admitted MCP request is served for, and where the endpoint keeps that for the
handlers: the ASGI scope of the HTTP request that carried it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from server.auth.principal import Principal
from server.db.records import Role

CALLER_KEY: Final = "relaydesk.mcp_caller"


@dataclass(frozen=True)
class McpCaller:
    """Who an MCP request is served for, in which conversation and with which role."""

    principal: Principal
    conversation_id: str
    role: Role
    request_id: str
