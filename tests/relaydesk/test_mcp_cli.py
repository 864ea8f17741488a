"""``relaydesk mcp``: its forwarding server's behaviour when a request fails, in-process.

Its usage, from the command itself, is in tests/relaydesk/test_cli.py; the end-to-end runs over
stdio against a real desktop are in tests/integration/test_mcp.py.
"""

from __future__ import annotations

from pathlib import Path

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from relaydesk.mcp_stdio import Remote, endpoint_url, forwarding_server
from tests.support.processes import free_port, scaled
from tests.support.stack import inprocess_server, seed_database

pytestmark = pytest.mark.unit


def test_the_endpoint_url_quotes_the_conversation() -> None:
    assert endpoint_url("https://desk.example.org/", "c1") == (
        "https://desk.example.org/api/v1/conversations/c1/mcp"
    )
    assert endpoint_url("http://h:1", "a/b") == "http://h:1/api/v1/conversations/a%2Fb/mcp"


async def test_a_request_that_cannot_reach_the_server_fails_alone(tmp_path: Path) -> None:
    seed = await seed_database(tmp_path / "data")
    headers = {"Authorization": f"Bearer {seed.api_token}"}
    async with (
        inprocess_server(seed) as (_app, url),
        httpx2.AsyncClient(headers=headers, timeout=scaled(30)) as http,
    ):
        remote = Remote(endpoint_url(url, seed.conversation_id), http)
        await remote.learn()
        live = remote.endpoint
        async with Client(forwarding_server(remote)) as local:
            remote.endpoint = endpoint_url(f"http://127.0.0.1:{free_port()}", "c")  # nobody there
            failed = await local.call_tool("desktop_list_active", {})
            with pytest.raises(MCPError, match="did not answer"):
                await local.list_tools()
            remote.endpoint = live  # the server is back
            answered = await local.call_tool("desktop_list_active", {})
            with pytest.raises(MCPError, match="unknown tool"):
                await local.call_tool("desktop_teleport", {})
    assert failed.is_error
    text = failed.content[0]
    assert isinstance(text, types.TextContent) and "did not answer" in text.text
    assert not answered.is_error
