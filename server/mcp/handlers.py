"""The MCP server: ``tools/list`` and ``tools/call`` over the action registry.

Each request is served for the caller the endpoint admitted (:class:`McpCaller`, kept in the
ASGI scope of the HTTP request that carried it). Tools are read from ``services.actions`` on
every list, so an action registered anywhere is a tool at once; a call runs through
``server.actions.invoke`` with ``source="mcp"``, so roles, schema checks and audit are the
typed actions' own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from starlette.requests import Request

from server.actions.invoke import ActionRunner
from server.mcp import tools
from server.mcp.caller import CALLER_KEY, McpCaller
from server.version import server_version
from wire.errors import InvalidArgs

SOURCE: Final = "mcp"
INSTRUCTIONS: Final = (
    "Live Linux desktops of one relaydesk conversation. Start or find a desktop with "
    "desktop_list_active / desktop_start. See and act through the accessibility tree first "
    "(desktop_apps, desktop_observe, desktop_find, desktop_click, desktop_type, …: refs like "
    "@<snapshot>:e<n>); fall back to pixels with the screen tool (screenshot, then click with "
    "that screenshot's screen_revision as expected_screen_revision). Errors are JSON "
    "{ok: false, error: {code, message, suggestion?}}."
)


def _request_of(ctx: ServerRequestContext[Any, Any]) -> Request:
    request = ctx.request
    if not isinstance(request, Request) or not isinstance(request.scope.get(CALLER_KEY), McpCaller):
        raise RuntimeError("an MCP request reached the server without an admitted caller")
    return request


def _caller(ctx: ServerRequestContext[Any, Any]) -> McpCaller:
    caller: McpCaller = _request_of(ctx).scope[CALLER_KEY]
    return caller


def _no_header_parameters(_tool: str) -> None:
    """No tool declares parameters carried in ``Mcp-Param-*`` headers: nothing to check there
    (without this the SDK would list every tool again before each call)."""
    return None


# The capabilities the relays of a conversation announce, by conversation id.
Capabilities = Callable[[str], Awaitable[frozenset[str]]]


def build_server(actions: ActionRunner, capabilities: Capabilities) -> Server[Any]:
    """The MCP server relaydesk's endpoint serves (tools only): ``actions`` as tools, those
    that need a relay's opt-in only where a relay of the conversation has it."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """Every action the caller's role allows, as a tool (one page)."""
        caller = _caller(ctx)
        offered = await capabilities(caller.conversation_id)
        listed = tools.tools_for(actions.registry, caller.role, offered)
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """The action ``params.name`` in the caller's conversation; its answer as a result."""
        caller = _caller(ctx)
        if actions.registry.get(params.name) is None:
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name[:64]!r}")
        try:
            body = tools.bound_arguments(params.arguments, caller.conversation_id)
        except InvalidArgs as err:
            return tools.refused(err)
        status, answer = await actions.invoke(
            caller.principal,
            params.name,
            body,
            source=SOURCE,
            request_id=caller.request_id,
        )
        return tools.tool_result(status, answer)

    return Server(
        "relaydesk",
        version=server_version(),
        title="relaydesk",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=_no_header_parameters,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
