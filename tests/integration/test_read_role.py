"""What a ``read`` member sees of a real desktop: its inventory, status and control state, never
its content — through every door.

A real server, relay and desktop running a GTK form. A ``write`` member types a draft into the
form's text field and puts a secret on the clipboard; a ``read`` member then asks for the
screen, the accessibility tree, one element's text, the clipboard, the windows and the apps over
HTTP, MCP and Cua, and is refused each time with ``forbidden`` naming the role it lacks. The
``write`` member reads all of it back, which shows the refusals are not a broken desktop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio

from server import admin
from server.db.records import parse_role
from server.db.store import Store
from tests.integration.test_mcp import answer, over_http
from tests.support.a11y_stack import FORM, A11yStack, a11y_stack
from tests.support.cua import parse_data_line
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

DRAFT = "draft only writers may read"
CLIPPED = "clipboard only writers may read"
NEEDS_WRITE = "needs role write here"
# Every action that returns desktop content, with arguments that work on the stack's desktop.
CONTENT_READS: dict[str, dict[str, Any]] = {
    "screen": {"action": "screenshot"},
    "desktop_apps": {},
    "desktop_observe": {"window": "relaydesk form"},
    "desktop_find": {"selector": "text", "window": "relaydesk form"},
    "desktop_read": {},  # the field's ref, filled in by the test
    "desktop_wait": {"selector": "text", "window": "relaydesk form", "timeout_ms": 2000},
    "desktop_windows": {},
    "desktop_clipboard_get": {},
}
# The home's files a read member may list and read (docs/files.md).
FILE_READS = {"desktop_files_list", "desktop_file_read"}
# What a read member may still call: the inventory, status, stop request and control state.
INVENTORY_READS: dict[str, dict[str, Any]] = {
    "desktop_list_active": {},
    "desktop_status": {},
    "desktop_stop_request": {},
    "desktop_control": {},
    "desktop_snapshots": {},
}
# Listed to every member, answered to operators only (admin accounts; no desktop content).
OPERATOR_READS = {"desktop_pool"}
# Cua commands that read desktop content, each through one of the actions above.
CUA_READS: dict[str, dict[str, Any]] = {
    "screenshot": {},
    "get_accessibility_tree": {},
    "find_element": {"role": "text"},
    "copy_to_clipboard": {},
    "get_current_window_id": {},
    "get_application_windows": {"app": "python3"},
    "get_active_window_bounds": {},
}

# Cua's home file reads, which a read member may run (docs/files.md), and its file writes.
CUA_FILE_READS: dict[str, dict[str, Any]] = {
    "read_text": {"path": "Downloads/shared.txt"},
    "read_bytes": {"path": "Downloads/shared.txt"},
    "get_file_size": {"path": "Downloads/shared.txt"},
    "file_exists": {"path": "Downloads/shared.txt"},
    "directory_exists": {"path": "Downloads"},
    "list_dir": {"path": "Downloads"},
}
CUA_FILE_WRITES = {"write_text", "write_bytes", "delete_file", "delete_dir"}


@dataclass(frozen=True)
class Members:
    """A ``read`` and a ``write`` member of the stack's conversation (their API tokens)."""

    reader: str
    writer: str


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[A11yStack]:
    async with a11y_stack(tmp_path_factory.mktemp("read-role"), [FORM]) as stack:
        await wait_until(lambda: stack.state() != {}, scaled(30), "the form to start")
        await stack.wait_app("a11y_app.py")
        yield stack


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def members(stack: A11yStack) -> Members:
    store = await Store.open(stack.seed.database_url)
    try:
        tokens = []
        for name, role in (("reader", "read"), ("writer", "write")):
            user = await admin.create_user(store, name)
            await store.add_member(stack.seed.conversation_id, user["user_id"], parse_role(role))
            tokens.append(str((await admin.create_token(store, name))["token"]))
    finally:
        await store.close()
    return Members(*tokens)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def field_ref(stack: A11yStack, members: Members) -> str:
    """The form's text field, holding the writer's draft; the clipboard holds its secret."""
    status, found = await call(
        stack, members.writer, "desktop_find", selector="text", limit=1, window="relaydesk form"
    )
    assert status == 200 and found["count"] == 1, found
    ref = str(found["matches"][0]["ref"])
    status, typed = await call(stack, members.writer, "desktop_type", ref=ref, text=DRAFT)
    assert status == 200, typed
    status, clipped = await call(stack, members.writer, "desktop_clipboard_set", text=CLIPPED)
    assert status == 200, clipped
    return ref


async def call(stack: A11yStack, token: str, name: str, **args: Any) -> tuple[int, dict[str, Any]]:
    body = {"conversation_id": stack.seed.conversation_id, **args}
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(60)) as client:
        response = await client.post(f"/api/v1/actions/{name}", json=body, headers=headers)
    return response.status_code, response.json()


def _args(name: str, ref: str) -> dict[str, Any]:
    return {**CONTENT_READS[name], "ref": ref} if name == "desktop_read" else CONTENT_READS[name]


async def test_a_read_member_gets_403_naming_the_role_for_every_content_read(
    stack: A11yStack, members: Members, field_ref: str
) -> None:
    for name in CONTENT_READS:
        status, body = await call(stack, members.reader, name, **_args(name, field_ref))
        assert status == 403, (name, body)
        assert body["error"] == {"code": "forbidden", "message": f"{name} {NEEDS_WRITE}"}, body
        assert DRAFT not in str(body) and CLIPPED not in str(body)


async def test_a_write_member_reads_the_same_content(
    stack: A11yStack, members: Members, field_ref: str
) -> None:
    answers = {}
    for name in CONTENT_READS:
        status, body = await call(stack, members.writer, name, **_args(name, field_ref))
        assert status == 200, (name, body)
        answers[name] = body
    assert answers["desktop_read"]["text"] == DRAFT
    assert answers["desktop_clipboard_get"]["text"] == CLIPPED
    assert "relaydesk form" in {w["name"] for w in answers["desktop_windows"]["windows"]}
    assert answers["screen"]["width"] == 1280


async def test_a_read_member_still_sees_the_inventory_status_and_control(
    stack: A11yStack, members: Members
) -> None:
    for name, args in INVENTORY_READS.items():
        status, body = await call(stack, members.reader, name, **args)
        assert status == 200, (name, body)
    status, listed = await call(stack, members.reader, "desktop_list_active")
    assert [d["desktop_session_id"] for d in listed["desktops"]] == [stack.session_id]


async def test_mcp_lists_no_content_tool_to_a_read_member_and_refuses_a_call(
    stack: A11yStack, members: Members, field_ref: str
) -> None:
    async with over_http(stack, token=members.reader) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        refused = await client.call_tool("desktop_read", {"ref": field_ref})
        clipboard = await client.call_tool("desktop_clipboard_get", {})
    assert listed == set(INVENTORY_READS) | FILE_READS | OPERATOR_READS
    for result, name in ((refused, "desktop_read"), (clipboard, "desktop_clipboard_get")):
        body = answer(result)
        assert result.is_error and body["error"]["message"] == f"{name} {NEEDS_WRITE}", body
    async with over_http(stack, token=members.writer) as client:
        written = {tool.name for tool in (await client.list_tools()).tools}
        read = answer(await client.call_tool("desktop_read", {"ref": field_ref}))
    assert set(CONTENT_READS) <= written and read["text"] == DRAFT


async def cua(stack: A11yStack, token: str, command: str, **params: Any) -> dict[str, Any]:
    base = f"{stack.url}/api/v1/conversations/{stack.seed.conversation_id}/cua/relay-1"
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(timeout=scaled(60)) as http:
        response = await http.post(
            f"{base}/virtual/main/cmd",
            json={"command": command, "params": params},
            headers=headers,
        )
    assert response.status_code == 200, response.text
    return parse_data_line(response.text)


async def test_cua_refuses_a_read_member_every_content_command(
    stack: A11yStack, members: Members, field_ref: str
) -> None:
    for command, params in CUA_READS.items():
        reply = await cua(stack, members.reader, command, **params)
        assert reply["success"] is False, (command, reply)
        assert reply["error"].startswith("forbidden: ") and NEEDS_WRITE in reply["error"], reply
    assert (await cua(stack, members.reader, "version"))["success"] is True
    copied = await cua(stack, members.writer, "copy_to_clipboard")
    assert copied == {"success": True, "content": CLIPPED}


async def cua_commands(stack: A11yStack, token: str) -> dict[str, Any]:
    """``GET …/commands`` for ``token``'s member: what Cua's client is offered."""
    base = f"{stack.url}/api/v1/conversations/{stack.seed.conversation_id}/cua/relay-1"
    async with httpx.AsyncClient(timeout=scaled(60)) as http:
        response = await http.get(
            f"{base}/virtual/main/commands", headers={"Authorization": f"Bearer {token}"}
        )
    assert response.status_code == 200, response.text
    listed: dict[str, Any] = response.json()
    return listed


async def test_cua_lists_to_a_read_member_only_commands_it_may_run(
    stack: A11yStack, members: Members
) -> None:
    status, shared = await call(
        stack, members.writer, "desktop_file_write", path="Downloads/shared.txt", content="seen"
    )
    assert status == 200, shared
    offered = await cua_commands(stack, members.reader)
    listed = set(offered["commands"])
    assert listed and not listed & set(CUA_READS), listed
    assert set(CUA_FILE_READS) <= listed and not listed & CUA_FILE_WRITES, listed
    assert set(offered["aliases"].values()) <= listed
    for command in listed:  # every one it is offered runs for it
        reply = await cua(stack, members.reader, command, **CUA_FILE_READS.get(command, {}))
        assert reply["success"] is True, (command, reply)
    read = await cua(stack, members.reader, "read_text", path="Downloads/shared.txt")
    assert read["content"] == "seen", read
    refused = await cua(stack, members.reader, "write_text", path="Downloads/x.txt", content="x")
    assert refused["success"] is False and NEEDS_WRITE in refused["error"], refused
    written = set((await cua_commands(stack, members.writer))["commands"])
    assert set(CUA_READS) <= written and listed < written
