"""MCP end to end: the official SDK's client against a real server, relay and desktop.

Over Streamable HTTP (``/api/v1/conversations/{id}/mcp``) and over ``relaydesk mcp`` (stdio,
forwarding to that endpoint), the client lists the tools, takes a screenshot (an image of the
desktop's size), clicks the form's Save button guarded by that screenshot's revision, and
observes the form through its accessibility tree. What the app really did is read from the
state file it writes, not from the tools under test. Refusals: a wrong token, a conversation
the caller is not in, a read-only member, bad arguments. The examples run here too.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
import pytest_asyncio
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from PIL import Image

from server import admin
from server.db.records import parse_role
from server.db.store import Store
from tests.support.a11y_stack import FORM, A11yStack, a11y_stack
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples"
WIDTH, HEIGHT = 1280, 800  # the stack's desktop geometry
# Streamable HTTP as the SDK's client speaks it (2026-07-28), as a 2025-11-25 client does
# (initialize, then requests without the per-request envelope), and ``relaydesk mcp`` on stdio.
TRANSPORTS = ("http", "http-2025", "stdio")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[A11yStack]:
    async with a11y_stack(tmp_path_factory.mktemp("mcp"), [FORM]) as stack:
        await wait_until(lambda: stack.state() != {}, scaled(30), "the form to start")
        await stack.wait_app("a11y_app.py")
        yield stack


def _endpoint(stack: A11yStack, conversation_id: str | None = None) -> str:
    conversation = conversation_id or stack.seed.conversation_id
    return f"{stack.url}/api/v1/conversations/{conversation}/mcp"


@contextlib.asynccontextmanager
async def over_http(
    stack: A11yStack, token: str | None = None, *, mode: str = "auto"
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token or stack.seed.api_token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=scaled(60)) as http,
        Client(streamable_http_client(_endpoint(stack), http_client=http), mode=mode) as client,
    ):
        yield client


@contextlib.asynccontextmanager
async def over_stdio(
    stack: A11yStack, params: StdioServerParameters | None = None
) -> AsyncIterator[Client]:
    params = params or StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "relaydesk",
            "mcp",
            "--server",
            stack.url,
            "--conversation",
            stack.seed.conversation_id,
        ],
        env={**os.environ, "RELAYDESK_API_TOKEN": stack.seed.api_token},
    )
    async with Client(params, read_timeout_seconds=scaled(60)) as client:
        yield client


def desk(stack: A11yStack, transport: str) -> contextlib.AbstractAsyncContextManager[Client]:
    if transport == "stdio":
        return over_stdio(stack)
    return over_http(stack, mode="legacy" if transport == "http-2025" else "auto")


def answer(result: types.CallToolResult) -> dict[str, Any]:
    text = next(c for c in result.content if isinstance(c, types.TextContent)).text
    body: dict[str, Any] = json.loads(text)
    return body


def ok(result: types.CallToolResult) -> dict[str, Any]:
    body = answer(result)
    assert not result.is_error and body["ok"] is True, body
    return body


def tool_error(result: types.CallToolResult, code: str) -> dict[str, Any]:
    body = answer(result)
    assert result.is_error and body["ok"] is False, body
    assert body["error"]["code"] == code, body
    error: dict[str, Any] = body["error"]
    return error


async def _save_button(client: Client) -> dict[str, Any]:
    found = ok(
        await client.call_tool(
            "desktop_find", {"selector": 'push_button[name="Save"]', "window": "relaydesk form"}
        )
    )
    assert found["count"] == 1, found
    match: dict[str, Any] = found["matches"][0]
    return match


async def _member(stack: A11yStack, name: str, role: str | None) -> str:
    """A new user's API token; a member of the stack's conversation with ``role`` (if any)."""
    store = await Store.open(stack.seed.database_url)
    try:
        user = await admin.create_user(store, name)
        if role is not None:
            await store.add_member(stack.seed.conversation_id, user["user_id"], parse_role(role))
        token: str = (await admin.create_token(store, name))["token"]
        return token
    finally:
        await store.close()


# -- the tools, over both transports -----------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_tools_are_the_actions_without_the_conversation(stack, transport):
    async with desk(stack, transport) as client:
        listed = await client.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert {"screen", "desktop_observe", "desktop_click", "desktop_start"} <= set(tools)
    registry = stack.app.state.parts.actions.registry
    # The stack's relay has no shell opt-in: the shell and file tools are not offered.
    assert set(tools) == set(registry.names()) - {"desktop_shell", "desktop_file"}
    for tool in tools.values():
        assert "conversation_id" not in tool.input_schema["properties"], tool.name
    observe, screen = tools["desktop_observe"].annotations, tools["screen"].annotations
    assert observe is not None and observe.read_only_hint is True
    assert screen is not None and screen.read_only_hint is False


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_screenshot_is_image_content_of_the_desktops_size(stack, transport):
    async with desk(stack, transport) as client:
        result = await client.call_tool("screen", {"action": "screenshot"})
    info = ok(result)
    images = [c for c in result.content if isinstance(c, types.ImageContent)]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    picture = Image.open(io.BytesIO(base64.b64decode(images[0].data)))
    assert picture.format == "PNG" and picture.size == (WIDTH, HEIGHT)
    assert (info["width"], info["height"]) == (WIDTH, HEIGHT)
    assert info["screen_revision"] and "image" not in info


async def test_a_zoom_is_image_content_of_the_zoomed_size(stack):
    region = {"x": 40, "y": 40, "width": 200, "height": 100}
    async with over_http(stack) as client:
        result = await client.call_tool(
            "screen", {"action": "zoom", "region": region, "scale": 2, "format": "jpeg"}
        )
    info = ok(result)
    (image,) = [c for c in result.content if isinstance(c, types.ImageContent)]
    picture = Image.open(io.BytesIO(base64.b64decode(image.data)))
    assert image.mime_type == "image/jpeg" and picture.format == "JPEG"
    assert picture.size == (400, 200) == (info["width"], info["height"])
    assert info["coordinates"] == "zoom" and info["region"] == region


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_guarded_click_presses_the_button_seen_on_the_screenshot(stack, transport):
    before = stack.state()["clicks"]
    async with desk(stack, transport) as client:
        x, y, width, height = (await _save_button(client))["bounds"]
        shot = ok(await client.call_tool("screen", {"action": "screenshot"}))
        unguarded = await client.call_tool(
            "screen", {"action": "click", "x": x + width // 2, "y": y + height // 2}
        )
        tool_error(unguarded, "missing_screen_revision")
        clicked = await client.call_tool(
            "screen",
            {
                "action": "click",
                "x": x + width // 2,
                "y": y + height // 2,
                "expected_screen_revision": shot["screen_revision"],
            },
        )
    assert ok(clicked)["guard"]["checked"] is True
    await wait_until(lambda: stack.state()["clicks"] == before + 1, scaled(10), "the Save click")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_observe_reads_the_form_through_its_accessibility_tree(stack, transport):
    async with desk(stack, transport) as client:
        seen = ok(await client.call_tool("desktop_observe", {"window": "relaydesk form"}))
        save = await _save_button(client)
        before = stack.state()["clicks"]
        clicked = ok(await client.call_tool("desktop_click", {"ref": save["ref"]}))
    assert seen["source"] == "a11y"
    assert 'push_button "Save"' in seen["text"] and 'check_box "Remember me"' in seen["text"]
    assert clicked["method"] == "native"
    await wait_until(lambda: stack.state()["clicks"] == before + 1, scaled(10), "the ref click")


async def test_calls_are_audited_as_mcp(stack):
    async with over_http(stack) as client:
        ok(await client.call_tool("screen", {"action": "screenshot"}))

    async def audited() -> bool:
        store = await Store.open(stack.seed.database_url)
        try:
            rows = await admin.list_audit(store, limit=1000)
        finally:
            await store.close()
        return any(r["op"] == "screen.screenshot" and r["source"] == "mcp" for r in rows)

    await wait_until(audited, scaled(10), "the audit row of the MCP screenshot")


# -- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("screen", {"action": "click", "x": "left", "y": 3}, "x"),
        ("screen", {"action": "teleport"}, "action"),
        ("desktop_click", {"ref": "Save"}, "ref"),
        ("desktop_start", {"slot": "Not A Slot"}, "slot"),
        ("desktop_observe", {"max_nodes": 1}, "max_nodes"),
        ("desktop_list_active", {"conversation_id": "another"}, "conversation_id"),
    ],
)
async def test_bad_arguments_are_tool_errors_naming_the_field(stack, tool, arguments, field):
    async with over_http(stack) as client:
        error = tool_error(await client.call_tool(tool, arguments), "invalid_args")
    assert error["field"] == field, error


async def test_an_action_error_is_a_tool_error_with_code_message_and_suggestion(stack):
    async with over_http(stack) as client:
        result = await client.call_tool("desktop_observe", {"app": "no-such-app"})
    error = tool_error(result, "app_not_found")
    assert error["message"] and error["suggestion"], error


async def test_an_unknown_tool_is_a_protocol_error(stack):
    async with over_http(stack) as client:
        with pytest.raises(MCPError, match="unknown tool"):
            await client.call_tool("desktop_teleport", {})


async def test_a_wrong_or_missing_token_is_401(stack):
    ping = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(timeout=scaled(30)) as http:
        missing = await http.post(_endpoint(stack), json=ping, headers=accept)
        wrong_token = {**accept, "Authorization": "Bearer rdk_wrong"}
        wrong = await http.post(_endpoint(stack), json=ping, headers=wrong_token)
    for refused in (missing, wrong):
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "unauthorized"
        assert refused.headers["www-authenticate"].startswith("Bearer")
    with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK's own error for an HTTP 401
        async with over_http(stack, token="rdk_wrong") as client:
            await client.list_tools()


async def test_another_conversation_is_refused_like_a_missing_one(stack):
    store = await Store.open(stack.seed.database_url)
    try:
        await admin.create_user(store, "outsider")
        other = await admin.create_conversation(store, "Other", ["outsider:owner"])
    finally:
        await store.close()
    ping = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {stack.seed.api_token}",
    }
    async with httpx.AsyncClient(timeout=scaled(30)) as http:
        answers = [
            await http.post(_endpoint(stack, conversation), json=ping, headers=headers)
            for conversation in (other["conversation_id"], "no-such-conversation")
        ]
    for refused in answers:
        assert refused.status_code == 404, refused.text
        assert refused.json()["error"] == {"code": "not_found", "message": "conversation not found"}


async def test_a_read_member_neither_observes_nor_acts(stack):
    token = await _member(stack, "mcp-reader", "read")
    clicks = stack.state()["clicks"]
    async with over_http(stack) as owner:
        save = await _save_button(owner)
    async with over_http(stack, token=token) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        refused = await client.call_tool("screen", {"action": "screenshot"})
        unfound = await client.call_tool("desktop_find", {"selector": "push_button"})
        click = await client.call_tool("desktop_click", {"ref": save["ref"]})
    assert "desktop_list_active" in tools
    assert not {"screen", "desktop_observe", "desktop_find", "desktop_click"} & tools
    tool_error(unfound, "forbidden")
    tool_error(refused, "forbidden")
    tool_error(click, "forbidden")
    assert stack.state()["clicks"] == clicks


async def test_the_stdio_command_says_why_the_server_refused(stack):
    command = [
        sys.executable,
        "-m",
        "relaydesk",
        "mcp",
        "--server",
        stack.url,
        "--conversation",
        stack.seed.conversation_id,
    ]
    refused = await _run(command, {**os.environ, "RELAYDESK_API_TOKEN": "rdk_wrong"})
    assert refused.returncode == 1 and refused.stdout == ""
    assert "401 unauthorized: invalid or revoked token" in refused.stderr
    env = {k: v for k, v in os.environ.items() if k != "RELAYDESK_API_TOKEN"}
    usage = await _run(command, env)
    assert usage.returncode == 2 and "RELAYDESK_API_TOKEN" in usage.stderr


# -- the examples ------------------------------------------------------------------------------


def _client_configuration(stack: A11yStack) -> dict[str, Any]:
    text = (EXAMPLES / "mcp_client.json").read_text(encoding="utf-8")
    text = (
        text.replace("http://127.0.0.1:8400", stack.url)
        .replace("CONVERSATION_ID", stack.seed.conversation_id)
        .replace("rdk_YOUR_API_TOKEN", stack.seed.api_token)
    )
    servers: dict[str, Any] = json.loads(text)["mcpServers"]
    return servers


async def test_the_client_configuration_example_connects_both_ways(stack):
    servers = _client_configuration(stack)
    stdio, http = servers["relaydesk"], servers["relaydesk-http"]
    command = shutil.which(stdio["command"], path=str(Path(sys.executable).parent))
    assert command, "the relaydesk command is installed beside this interpreter"
    params = StdioServerParameters(
        command=command, args=stdio["args"], env={**os.environ, **stdio["env"]}
    )
    async with over_stdio(stack, params) as client:
        from_stdio = {tool.name for tool in (await client.list_tools()).tools}
    assert http["type"] == "http"
    async with (
        httpx2.AsyncClient(headers=http["headers"], timeout=scaled(60)) as session,
        Client(streamable_http_client(http["url"], http_client=session)) as client,
    ):
        from_http = {tool.name for tool in (await client.list_tools()).tools}
    assert "screen" in from_stdio and from_stdio == from_http


async def test_the_agent_example_runs(stack, tmp_path):
    out = tmp_path / "screen.png"
    env = {
        **os.environ,
        "RELAYDESK_SERVER_URL": stack.url,
        "RELAYDESK_API_TOKEN": stack.seed.api_token,
        "RELAYDESK_CONVERSATION_ID": stack.seed.conversation_id,
    }
    process = await _run([sys.executable, str(EXAMPLES / "mcp_agent.py"), "--out", str(out)], env)
    assert process.returncode == 0, process.stdout + process.stderr
    assert "tools:" in process.stdout and "screen" in process.stdout
    assert f"screenshot: {WIDTH}x{HEIGHT} image/png" in process.stdout
    assert 'push_button "Save"' in process.stdout
    assert Image.open(out).size == (WIDTH, HEIGHT)


async def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The command's outcome, run off the event loop (the server under test shares it)."""
    return await asyncio.to_thread(
        subprocess.run,
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=False,
        cwd=REPO_ROOT,
    )


# -- files in the desktop's home (docs/files.md) ----------------------------------------------


def _home(stack: A11yStack) -> Path:
    """The desktop's home, as the relay recorded it (read beside the tools under test)."""
    state = stack.seed.data_dir / "relay-state" / "desktops.json"
    desktops = json.loads(state.read_text(encoding="utf-8"))["desktops"]
    (found,) = [d for d in desktops if d["desktop_session_id"] == stack.session_id]
    return Path(found["home"])


async def test_the_file_tools_write_list_read_and_delete_in_the_home(stack):
    home = _home(stack)
    on_disk = home / "Downloads" / "from-mcp.txt"
    text = "written over MCP\nsecond line ✓\n"
    async with over_http(stack) as client:
        written = ok(
            await client.call_tool(
                "desktop_file_write", {"path": "Downloads/from-mcp.txt", "content": text}
            )
        )
        assert on_disk.read_text(encoding="utf-8") == text
        assert written["size"] == len(text.encode()) == on_disk.stat().st_size
        assert on_disk.stat().st_uid == home.stat().st_uid  # the desktop's own user

        listed = ok(await client.call_tool("desktop_files_list", {"path": "~/Downloads"}))
        (entry,) = [e for e in listed["entries"] if e["name"] == "from-mcp.txt"]
        assert (entry["type"], entry["size"]) == ("file", on_disk.stat().st_size)

        read = ok(await client.call_tool("desktop_file_read", {"path": str(on_disk)}))
        assert read["content"] == text and read["eof"] is True

        ok(await client.call_tool("desktop_file_delete", {"path": "Downloads/from-mcp.txt"}))
        assert not on_disk.exists()
        gone = tool_error(
            await client.call_tool("desktop_file_read", {"path": "Downloads/from-mcp.txt"}),
            "not_found",
        )
        assert gone["message"]


async def test_the_file_tools_refuse_a_path_that_leaves_the_home(stack):
    home = _home(stack)
    outside = home.parent / "mcp-escape.txt"
    passwd = Path("/etc/passwd").read_text(encoding="utf-8")
    async with over_http(stack) as client:
        for tool, arguments in (
            ("desktop_file_write", {"path": "../mcp-escape.txt", "content": "escaped"}),
            ("desktop_file_write", {"path": str(outside), "content": "escaped"}),
            ("desktop_file_read", {"path": "/etc/passwd"}),
            ("desktop_files_list", {"path": "Downloads/../.."}),
            ("desktop_file_delete", {"path": "/etc/passwd"}),
        ):
            result = await client.call_tool(tool, arguments)
            error = tool_error(result, "path_outside_home")
            assert "escape" not in error["message"] and "passwd" not in error["message"]
            assert "root:" not in str(answer(result))
    assert not outside.exists()
    assert Path("/etc/passwd").read_text(encoding="utf-8") == passwd
