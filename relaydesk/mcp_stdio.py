"""The forwarding MCP server behind ``relaydesk mcp``: stdio in front, the server's endpoint behind.

Every ``tools/list`` and ``tools/call`` is passed on, as it is, to
``/api/v1/conversations/{id}/mcp`` over Streamable HTTP with the API token, so the tools, their
results and their errors are the server's own (docs/mcp.md). The endpoint is stateless, so each
request goes through a short-lived SDK client of its own (over one kept-alive HTTP client): a
request that fails — the server restarting, the network gone — fails alone, and the next one
connects again. Logs go to stderr; stdout carries the protocol.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from typing import Any, Final
from urllib.parse import quote

import anyio
import httpx
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from relaydesk.client import answer_of

log = logging.getLogger(__name__)

# An action may wait on a desktop (desktop_wait, a slow app): reads get minutes, not seconds.
TIMEOUT: Final = httpx2.Timeout(30.0, read=300.0)


def endpoint_url(server: str, conversation_id: str) -> str:
    """The server's MCP endpoint for a conversation."""
    return f"{server.rstrip('/')}/api/v1/conversations/{quote(conversation_id, safe='')}/mcp"


def reason(err: BaseException) -> str:
    """What went wrong, from inside the task groups that wrap a transport's failure."""
    while isinstance(err, BaseExceptionGroup) and len(err.exceptions) == 1:
        err = err.exceptions[0]
    return str(err) or type(err).__name__


def _protocol_error(err: BaseException) -> MCPError | None:
    while isinstance(err, BaseExceptionGroup) and len(err.exceptions) == 1:
        err = err.exceptions[0]
    return err if isinstance(err, MCPError) else None


class Remote:
    """The conversation's endpoint: one SDK client per request, speaking the version the
    first connection settled on (no discovery round trip per request)."""

    def __init__(self, endpoint: str, http: httpx2.AsyncClient) -> None:
        self.endpoint, self.http = endpoint, http
        self.mode = "auto"
        self.server_version = ""
        self.instructions: str | None = None

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[Client]:
        transport = streamable_http_client(self.endpoint, http_client=self.http)
        async with Client(transport, mode=self.mode) as client:
            yield client

    async def learn(self) -> None:
        """Connect once: the protocol version, the server's version and its instructions."""
        async with self.client() as client:
            version = client.protocol_version
            self.mode = version if version in MODERN_PROTOCOL_VERSIONS else "legacy"
            self.server_version = client.server_info.version if client.server_info else ""
            self.instructions = client.instructions


def forwarding_server(remote: Remote) -> Server[Any]:
    """A stdio-side MCP server whose tools are the remote endpoint's."""

    async def list_tools(
        _ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        try:
            async with remote.client() as client:
                return await client.list_tools(cursor=params.cursor if params else None)
        except Exception as err:
            raise _protocol_error(err) or MCPError(
                types.INTERNAL_ERROR, f"the relaydesk server did not answer: {reason(err)}"
            ) from None

    async def call_tool(
        _ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            async with remote.client() as client:
                return await client.call_tool(params.name, params.arguments)
        except Exception as err:
            if (protocol := _protocol_error(err)) is not None:
                raise protocol from None
            log.warning("tool call %s did not reach the server: %s", params.name, reason(err))
            text = f"the relaydesk server did not answer: {reason(err)}; try again"
            return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)

    return Server(
        "relaydesk",
        version=remote.server_version,
        instructions=remote.instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def check_endpoint(endpoint: str, headers: dict[str, str]) -> None:
    """One ``ping``, so that a refusal (token, conversation) is told in the server's words
    (``ApiError``) before the client sees a server at all."""
    ping = {"jsonrpc": "2.0", "id": 0, "method": "ping"}
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(headers={**headers, **accept}, timeout=30.0) as http:
        answer_of(await http.post(endpoint, json=ping))


async def serve_stdio(endpoint: str, token: str) -> None:
    """Check ``endpoint``, then serve MCP on stdin/stdout until stdin closes."""
    headers = {"Authorization": f"Bearer {token}"}
    await check_endpoint(endpoint, headers)
    async with httpx2.AsyncClient(headers=headers, timeout=TIMEOUT) as http:
        remote = Remote(endpoint, http)
        await remote.learn()
        local = forwarding_server(remote)
        async with stdio_server() as (read, write):
            await local.run(read, write, local.create_initialization_options())


def run(endpoint: str, token: str) -> int:
    """``relaydesk mcp``'s exit status: 0 when the client closed stdin, 1 when the endpoint
    refused or could not be reached at start (said on stderr)."""
    try:
        anyio.run(serve_stdio, endpoint, token)
    except Exception as err:  # the command's boundary: one line saying why, the trace logged
        log.debug("MCP forwarding ended", exc_info=True)
        print(f"relaydesk: MCP endpoint {endpoint}: {reason(err)}", file=sys.stderr)
        return 1
    return 0
