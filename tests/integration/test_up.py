"""``relaydesk up``: the all-in-one system as a person starts it."""

from __future__ import annotations

import http.cookiejar
import http.server
import json
import os
import re
import signal
import stat
import textwrap
import threading
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters

from server.db.store import Store
from tests.support.processes import ManagedProcess, ProcessFactory, free_port, scaled
from tests.support.stack import FAST_ENV, QUICK_DESKTOPS, get_json, relaydesk_argv, wait_until

pytestmark = pytest.mark.integration

LINK = re.compile(r"one-time login link: (http://\S+/login/(rdl_\S+))")
TOKEN = re.compile(r"API token \(for admin, shown once\): (rdk_\S+)")
# Settings that would name the server or a token: these tests rely on what up saved.
UNSET = {
    name: ""
    for name in (
        "RELAYDESK_SERVER_URL",
        "RELAYDESK_API_TOKEN",
        "RELAYDESK_URL",
        "RELAYDESK_TOKEN",
        "RELAYDESK_PUBLIC_URL",
        "RELAYDESK_HOST",
        "RELAYDESK_PORT",
        "RELAYDESK_CONVERSATION_ID",
    )
}


def _start_up(factory: ProcessFactory, data_dir: Path, port: int, name: str):
    env = {**FAST_ENV, "RELAYDESK_DATA_DIR": str(data_dir)}
    process = factory(relaydesk_argv("up", "--port", str(port)), name=name, env=env)
    match = process.wait_for_line(LINK, scaled(60))
    return process, match.group(1)


def _relays(port: int) -> int:
    try:
        status, body = get_json(f"http://127.0.0.1:{port}/readyz", timeout=1.0)
    except OSError:
        return -1
    return int(body["relays_connected"]) if status == 200 else -1


async def test_up_serves_logs_in_by_link_and_stops_cleanly_on_ctrl_c(
    tmp_path: Path, process_factory: ProcessFactory
) -> None:
    port = free_port()
    up, link = _start_up(process_factory, tmp_path / "data", port, "up")
    await wait_until(lambda: _relays(port) == 1, 30, "the all-in-one relay to connect")

    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(link, timeout=scaled(10)) as response:
        assert response.status == 200 and b"Sign in" in response.read()  # the button's page
    assert not any(cookie.name == "relaydesk_session" for cookie in jar)
    with opener.open(link, data=b"", timeout=scaled(10)) as response:  # pressing the button
        assert response.status == 200  # redirected to the app
    assert any(cookie.name == "relaydesk_session" for cookie in jar)
    with opener.open(f"http://127.0.0.1:{port}/api/v1/me", timeout=scaled(10)) as response:
        assert b'"username": "admin"' in response.read().replace(b'":"', b'": "')
    with pytest.raises(urllib.error.HTTPError) as reused:
        opener.open(link, data=b"", timeout=scaled(10))
    assert reused.value.code == 400, "a login link works once"

    up.send_signal(signal.SIGINT)
    assert up.wait(scaled(30)) == 0
    await wait_until(lambda: _relays(port) == -1, 10, "the server to stop")
    assert "stopping relay" in up.log_text()
    assert link.rsplit("/", 1)[1] not in up.log_text().replace(link, "")


async def test_up_again_on_the_same_data_dir_reuses_what_it_created(
    tmp_path: Path, process_factory: ProcessFactory
) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    first, first_link = _start_up(process_factory, data_dir, port, "first")
    await wait_until(lambda: _relays(port) == 1, 30, "the first relay")
    first.send_signal(signal.SIGTERM)
    assert first.wait(scaled(30)) == 0

    _second, second_link = _start_up(process_factory, data_dir, port, "second")
    await wait_until(lambda: _relays(port) == 1, 30, "the relay after a restart")
    assert second_link != first_link, "every start mints a fresh login link"
    users = relaydesk_argv("admin", "list", "relays", "--json")
    listing = process_factory(users, name="list", env={"RELAYDESK_DATA_DIR": str(data_dir)})
    assert listing.wait(scaled(30)) == 0
    assert listing.log_text().count('"relay_id"') == 1, "one relay, created once"
    # The relay runs beside the server: it registers the direct viewing path.
    assert '"direct_vnc"' in listing.log_text()


async def test_up_on_a_port_another_server_holds_fails_at_once_naming_it(
    tmp_path: Path, process_factory: ProcessFactory
) -> None:
    port = free_port()
    other = http.server.ThreadingHTTPServer(("127.0.0.1", port), _AlwaysReady)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        env = {**FAST_ENV, "RELAYDESK_DATA_DIR": str(tmp_path / "data")}
        argv = relaydesk_argv("up", "--host", "127.0.0.1", "--port", str(port))
        up = process_factory(argv, name="up", env=env)
        assert up.wait(scaled(30)) == 1
        assert f"cannot serve on 127.0.0.1:{port}" in up.log_text()
        assert "relaydesk is up" not in up.log_text()
        assert "login link" not in up.log_text()
    finally:
        other.shutdown()
        other.server_close()


class _AlwaysReady(http.server.BaseHTTPRequestHandler):
    """Another server: it answers every request, /readyz included, with 200."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        return


def _block(text: str, title: str) -> str:
    """The indented block printed under ``title``."""
    lines = text.split(title + "\n", 1)[1].splitlines()
    block = []
    for line in lines:
        if not line.startswith("    "):
            break
        block.append(line)
    return textwrap.dedent("\n".join(block))


def _cli(process_factory: ProcessFactory, data_dir: Path, name: str, *args: str) -> ManagedProcess:
    env = {**UNSET, "RELAYDESK_DATA_DIR": str(data_dir)}
    process = process_factory(relaydesk_argv(*args), name=name, env=env)
    process.wait(scaled(60))
    return process


async def test_up_prints_what_an_agent_needs_and_saves_it_for_the_other_commands(
    tmp_path: Path, process_factory: ProcessFactory
) -> None:
    data_dir = tmp_path / "data"
    port = free_port()  # not 8400: nothing may assume the default port
    up, _link = _start_up(process_factory, data_dir, port, "up")
    up.wait_for_line("api_headers=", scaled(30))
    text = up.log_text()
    token = TOKEN.search(text)
    assert token, text
    api_token = token.group(1)
    url = f"http://127.0.0.1:{port}"

    saved_file = data_dir / "client.json"
    assert stat.S_IMODE(saved_file.stat().st_mode) == 0o600
    saved = json.loads(saved_file.read_text())
    assert (saved["server_url"], saved["api_token"]) == (url, api_token)
    conversation = saved["conversation_id"]
    assert f"conversation: {conversation}" in text and f"relay: {saved['relay']}" in text
    await wait_until(lambda: _relays(port) == 1, 30, "the all-in-one relay to connect")

    # MCP over HTTP, as printed: the conversation's tools.
    http_entry = json.loads(_block(text, "MCP over HTTP (client configuration):"))
    entry = http_entry["mcpServers"]["relaydesk"]
    assert entry["url"] == f"{url}/api/v1/conversations/{conversation}/mcp"
    listed = await _mcp_http_tools(entry["url"], entry["headers"])
    assert "desktop_start" in listed

    # MCP over stdio, as printed.
    stdio = json.loads(_block(text, "MCP over stdio (client configuration):"))
    command = stdio["mcpServers"]["relaydesk"]
    params = StdioServerParameters(
        command=command["command"], args=command["args"], env={**os.environ, **command["env"]}
    )
    async with Client(params, read_timeout_seconds=scaled(60)) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
    assert "desktop_list_active" in tools

    # Cua, as printed: its status endpoint answers with the printed URL and header.
    cua = _block(text, "Cua (the cua-computer client, Python):")
    base = re.search(r'api_base_url="([^"]+)"', cua)
    assert base and f"/cua/{saved['relay']}/virtual/main" in base.group(1)
    assert f'"Authorization": "Bearer {api_token}"' in cua
    async with httpx.AsyncClient(timeout=scaled(20)) as http:
        status = await http.get(
            base.group(1) + "/status", headers={"Authorization": f"Bearer {api_token}"}
        )
    assert status.status_code == 200, status.text

    # The other commands find the server, token and conversation with no flag at all.
    listed_desktops = _cli(process_factory, data_dir, "desktops", "desktops", "list")
    assert listed_desktops.returncode == 0, listed_desktops.log_text()
    assert "no desktops running" in listed_desktops.log_text()
    login = _cli(process_factory, data_dir, "login-link", "admin", "login-link", "admin")
    assert login.returncode == 0, login.log_text()
    assert f"{url}/login/rdl_" in login.log_text()

    # An explicit server wins, and the saved token is never sent to it.
    elsewhere = f"http://127.0.0.1:{free_port()}"
    other = _cli(process_factory, data_dir, "other", "desktops", "list", "--server", elsewhere)
    assert other.returncode == 2 and "no API token" in other.log_text()


async def test_the_next_start_keeps_the_saved_token_without_printing_it(
    tmp_path: Path, process_factory: ProcessFactory
) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    first, _link = _start_up(process_factory, data_dir, port, "first")
    api_token = first.wait_for_line(TOKEN, scaled(30)).group(1)
    first.send_signal(signal.SIGTERM)
    assert first.wait(scaled(30)) == 0

    again, _ = _start_up(process_factory, data_dir, port, "again")
    again.wait_for_line("api_headers=", scaled(30))
    assert api_token not in again.log_text() and not TOKEN.search(again.log_text())
    assert f"in {data_dir / 'client.json'}" in again.log_text()
    assert json.loads((data_dir / "client.json").read_text())["api_token"] == api_token
    listed = _cli(process_factory, data_dir, "desktops", "desktops", "list")
    assert listed.returncode == 0, listed.log_text()


async def _mcp_http_tools(url: str, headers: dict[str, str]) -> list[str]:
    """``tools/list`` over the stateless Streamable HTTP endpoint, as a client sends it."""
    accept = {**headers, "Accept": "application/json, text/event-stream"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    async with httpx.AsyncClient(timeout=scaled(30)) as http:
        answer = await http.post(url, json=initialize, headers=accept)
        assert answer.status_code == 200, answer.text
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        answer = await http.post(url, json=listing, headers=accept)
        assert answer.status_code == 200, answer.text
    return [tool["name"] for tool in answer.json()["result"]["tools"]]


async def test_ctrl_c_stops_the_desktops_says_which_and_records_them_stopped(
    tmp_path: Path, process_factory: ProcessFactory
) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    env = {**FAST_ENV, **QUICK_DESKTOPS, "RELAYDESK_DATA_DIR": str(data_dir)}
    up = process_factory(relaydesk_argv("up", "--port", str(port)), name="up", env=env)
    token = up.wait_for_line(TOKEN, scaled(60)).group(1)
    await wait_until(lambda: _relays(port) == 1, 30, "the all-in-one relay to connect")
    saved = json.loads((data_dir / "client.json").read_text())
    started = await _action(port, token, "desktop_start", saved["conversation_id"])
    session = started["desktop"]["desktop_session_id"]

    up.send_signal(signal.SIGINT)  # the terminal's Ctrl-C: to the whole process group
    assert up.wait(scaled(60)) == 0
    log = up.log_text()
    assert f"stopped the virtual desktop in slot main (session {session})" in log, log
    assert "desktop failed" not in log, log

    rows = await _rows(data_dir, started["desktop"]["relay_id"])
    assert [(r.desktop_session_id, r.state, r.reason) for r in rows] == [
        (session, "stopped", "relay_stopped")
    ]


async def _action(port: int, token: str, name: str, conversation: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=scaled(60)) as http:
        answer = await http.post(
            f"http://127.0.0.1:{port}/api/v1/actions/{name}",
            json={"conversation_id": conversation},
            headers={"Authorization": f"Bearer {token}"},
        )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def _rows(data_dir: Path, relay_id: str) -> list[Any]:
    store = await Store.open(f"sqlite+aiosqlite:///{data_dir / 'relaydesk.db'}")
    try:
        return list(await store.desktops_for_relay(relay_id))
    finally:
        await store.close()
