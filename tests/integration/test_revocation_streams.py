"""Revocation reaches connections that are already open: a real server process, a real relay and
desktop, the revocation made by ``relaydesk admin`` in a process of its own (no Redis: the
server hears of it only through its own re-checks).

Each test holds a stream or socket open with a credential, revokes that credential the way an
operator does, and asserts that the connection ends within the documented 2 s and that nothing
sent after the revocation runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import pytest_asyncio
import websockets
from websockets.asyncio.client import ClientConnection
from websockets.frames import Close

from server import admin
from server.auth.dependencies import CSRF_HEADER, SESSION_COOKIE
from server.db.store import Store
from tests.relaydesk.test_admin_cli import admin_cli
from tests.support.processes import ProcessTracker, scaled
from tests.support.sse import SseStream, open_sse
from tests.support.stack import (
    QUICK_DESKTOPS,
    Seed,
    ServerProcess,
    seed_action,
    seed_database,
    start_relay,
    start_server,
    wait_until,
)
from wire.errors import CloseCode

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

# What docs/security.md promises for an open stream after a revocation.
BOUND_S = 2.0


@dataclass
class Stack:
    seed: Seed
    server: ServerProcess
    session_id: str

    @property
    def url(self) -> str:
        return self.server.url

    def cua_url(self, scheme: str = "ws") -> str:
        base = self.url.replace("http", scheme, 1)
        return f"{base}/api/v1/conversations/{self.seed.conversation_id}/cua/relay-1/virtual/main"

    @property
    def cua_ws(self) -> str:
        return f"{self.cua_url()}/ws"

    def events_url(self) -> str:
        return f"/api/v1/events?conversation_id={self.seed.conversation_id}"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    root = tmp_path_factory.mktemp("revocation")
    seed = await seed_database(root / "data")
    tracker = ProcessTracker(root / "processes")
    try:
        server = await start_server(tracker.start, seed)
        shell = {"RELAYDESK_CUA_SHELL": "1"}  # desktop_shell: a call that lasts (MCP below)
        start_relay(tracker.start, seed, server.url, env={**QUICK_DESKTOPS, **shell})
        await wait_until(lambda: server.relays_connected() == 1, 30, "the relay to connect")
        started = await seed_action(server.url, seed, "desktop_start", slot="main")
        yield Stack(seed, server, started["desktop"]["desktop_session_id"])
        session = started["desktop"]["desktop_session_id"]
        stop = {"relay": "relay-1", "slot": "main", "desktop_session_id": session}
        await seed_action(server.url, seed, "desktop_stop_confirm", **stop)
    except BaseException:
        for process in tracker.processes:
            print(f"----- {process.name}: {process.log_tail(3000)}")
        raise
    finally:
        tracker.cleanup()


async def _member(seed: Seed, name: str, role: str = "write") -> tuple[str, str]:
    """A new user in the seed's conversation: (API token, token id)."""
    store = await Store.open(seed.database_url)
    try:
        user = await admin.create_user(store, name)
        await store.add_member(seed.conversation_id, user["user_id"], role)  # type: ignore[arg-type]
        token, record = await store.create_api_token(user["user_id"], "streams")
        return token, record.token_id
    finally:
        await store.close()


async def _revoke(seed: Seed, *args: str) -> float:
    """Run ``relaydesk admin ARGS``; the monotonic time it finished."""
    done = await admin_cli(seed, *args)
    assert done.returncode == 0, done.stderr
    return time.monotonic()


async def _ended(stream: SseStream, timeout: float) -> list[Any]:
    """The events up to ``access_revoked``, once the stream has ended after it (fails if that
    does not happen within ``timeout``)."""
    events: list[Any] = []
    async with asyncio.timeout(timeout):
        while not events or events[-1].event != "access_revoked":
            events.append(await stream.events.get())
        while not stream.response.is_stream_consumed:
            await asyncio.sleep(0.01)
    return events


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- the event stream ----------------------------------------------------------------------


async def test_an_event_stream_ends_within_2_s_of_revoke_token(stack: Stack) -> None:
    token, token_id = await _member(stack.seed, "sse-token", "read")
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=scaled(10)) as client,
        open_sse(client, stack.events_url(), _bearer(token)) as stream,
    ):
        assert stream.response.status_code == 200
        assert (await stream.next()).event == "desktop_inventory_changed"
        revoked_at = await _revoke(stack.seed, "revoke-token", token_id)
        events = await _ended(stream, scaled(BOUND_S) + 1)
        ended_after = time.monotonic() - revoked_at
    print(f"event stream ended {ended_after:.2f} s after revoke-token")
    assert ended_after < scaled(BOUND_S)
    assert [e.event for e in events][-1:] == ["access_revoked"], events
    assert "revoked" in events[-1].data["reason"]


async def test_an_event_stream_ends_when_its_user_is_disabled(stack: Stack) -> None:
    token, _ = await _member(stack.seed, "sse-disabled", "read")
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=scaled(10)) as client,
        open_sse(client, stack.events_url(), _bearer(token)) as stream,
    ):
        await stream.next()
        revoked_at = await _revoke(stack.seed, "disable-user", "sse-disabled")
        events = await _ended(stream, scaled(BOUND_S) + 1)
        assert time.monotonic() - revoked_at < scaled(BOUND_S)
    assert events[-1].event == "access_revoked"


async def test_a_cookie_event_stream_ends_when_its_session_logs_out(stack: Stack) -> None:
    seed = stack.seed
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(10)) as browser:
        credentials = {"username": "alice", "password": seed.user["password"]}
        login = await browser.post("/api/v1/login", json=credentials)
        assert login.status_code == 200, login.text
        csrf = (await browser.get("/api/v1/me")).json()["csrf_token"]
        cookie = {SESSION_COOKIE: browser.cookies[SESSION_COOKIE]}
        async with (
            httpx.AsyncClient(base_url=stack.url, cookies=cookie) as other_tab,
            open_sse(other_tab, stack.events_url()) as stream,
        ):
            await stream.next()
            logout = await browser.post("/api/v1/logout", headers={CSRF_HEADER: csrf})
            assert logout.status_code in (200, 204), logout.text
            logged_out = time.monotonic()
            events = await _ended(stream, scaled(BOUND_S) + 1)
            assert time.monotonic() - logged_out < scaled(BOUND_S)
    assert events[-1].event == "access_revoked"


# -- Cua's WebSocket ----------------------------------------------------------------------


async def _cua(ws: ClientConnection, command: str, **params: Any) -> dict[str, Any]:
    await ws.send(json.dumps({"command": command, "params": params}))
    reply: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), scaled(30)))
    return reply


async def _closed(ws: ClientConnection, timeout: float, *, replies_allowed: bool = False) -> Close:
    """The close frame the server sent, once the socket closed within ``timeout``; with
    ``replies_allowed`` False any message before it fails the test (a command that ran)."""
    async with asyncio.timeout(timeout):
        with contextlib.suppress(websockets.ConnectionClosed):
            while True:
                message = await ws.recv()
                assert replies_allowed, f"a reply after revocation: {message!r}"
    assert ws.protocol.close_rcvd is not None, "the server sent no close frame"
    return ws.protocol.close_rcvd


async def _cursor(stack: Stack) -> tuple[int, int]:
    """Where the desktop's pointer is, asked with the seed's own (live) token over HTTP."""
    body = {"command": "get_cursor_position", "params": {}}
    async with httpx.AsyncClient(timeout=scaled(30)) as client:
        url, headers = f"{stack.cua_url('http')}/cmd", _bearer(stack.seed.api_token)
        response = await client.post(url, json=body, headers=headers)
    assert response.status_code == 200, response.text
    reply = json.loads(response.text.removeprefix("data: "))
    assert reply["success"], reply
    return int(reply["position"]["x"]), int(reply["position"]["y"])


async def test_a_cua_socket_closes_within_2_s_and_runs_nothing_after_revoke_token(
    stack: Stack,
) -> None:
    token, token_id = await _member(stack.seed, "cua-agent")
    async with websockets.connect(stack.cua_ws, additional_headers=_bearer(token)) as ws:
        assert (await _cua(ws, "move_cursor", x=11, y=12))["success"]
        assert await _cursor(stack) == (11, 12)
        revoked_at = await _revoke(stack.seed, "revoke-token", token_id)
        # The very next command: refused unrun if the socket is still open, or not even sent.
        with contextlib.suppress(websockets.ConnectionClosed):
            await ws.send(json.dumps({"command": "move_cursor", "params": {"x": 77, "y": 66}}))
        closed = await _closed(ws, scaled(BOUND_S) + 1)
        closed_after = time.monotonic() - revoked_at
    print(f"Cua socket closed {closed_after:.2f} s after revoke-token")
    assert closed_after < scaled(BOUND_S)
    assert closed.code == CloseCode.UNAUTHORIZED
    assert "revoked" in closed.reason
    assert await _cursor(stack) == (11, 12), "the command sent after revocation ran"


async def test_an_idle_cua_socket_closes_within_2_s_of_revoke_token(stack: Stack) -> None:
    token, token_id = await _member(stack.seed, "cua-idle")
    async with websockets.connect(stack.cua_ws, additional_headers=_bearer(token)) as ws:
        assert (await _cua(ws, "get_screen_size"))["success"]
        revoked_at = await _revoke(stack.seed, "revoke-token", token_id)
        await asyncio.wait_for(ws.wait_closed(), scaled(BOUND_S) + 1)
        assert time.monotonic() - revoked_at < scaled(BOUND_S)
        assert ws.close_code == CloseCode.UNAUTHORIZED


# -- viewer and audio WebSockets ------------------------------------------------------------


async def test_a_viewer_closes_within_2_s_when_its_user_is_disabled(stack: Stack) -> None:
    token, _ = await _member(stack.seed, "viewer-person")
    headers = {**_bearer(token), "Content-Type": "application/json"}
    body = {"conversation_id": stack.seed.conversation_id, "relay": "relay-1", "slot": "main"}
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(30)) as client:
        attached = await client.post("/api/v1/actions/desktop_attach", json=body, headers=headers)
    assert attached.status_code == 200, attached.text
    path = httpx.URL(attached.json()["viewer_url"]).path
    socket_url = stack.url.replace("http", "ws", 1) + path + "websockify"
    async with websockets.connect(socket_url, subprotocols=["binary"]) as viewer:  # type: ignore[list-item]
        assert (await asyncio.wait_for(viewer.recv(), scaled(10)))[:4] == b"RFB "
        revoked_at = await _revoke(stack.seed, "disable-user", "viewer-person")
        closed = await _closed(viewer, scaled(BOUND_S) + 1, replies_allowed=True)
        assert time.monotonic() - revoked_at < scaled(BOUND_S)
        assert closed.code == CloseCode.VIEWER_FORBIDDEN
        assert "revoked" in closed.reason


async def _attach(stack: Stack, client: httpx.AsyncClient, headers: dict[str, str]) -> str:
    """``desktop_attach`` with ``client``'s credential: the viewer URL's path."""
    body = {"conversation_id": stack.seed.conversation_id, "relay": "relay-1", "slot": "main"}
    attached = await client.post("/api/v1/actions/desktop_attach", json=body, headers=headers)
    assert attached.status_code == 200, attached.text
    return str(urlsplit(attached.json()["viewer_url"]).path)  # an agent's ends in ?view_only=1


def _socket(stack: Stack, path: str, end: str = "websockify") -> str:
    return stack.url.replace("http", "ws", 1) + path + end


async def _viewer_closes_after(stack: Stack, path: str, revoke: Any) -> None:
    """Open the viewer at ``path``, run ``revoke()``; the viewer must close within the bound."""
    socket_url = _socket(stack, path)
    async with websockets.connect(socket_url, subprotocols=["binary"]) as viewer:  # type: ignore[list-item]
        assert (await asyncio.wait_for(viewer.recv(), scaled(10)))[:4] == b"RFB "
        revoked_at = await revoke()
        closed = await _closed(viewer, scaled(BOUND_S) + 1, replies_allowed=True)
        closed_after = time.monotonic() - revoked_at
    print(f"viewer closed {closed_after:.2f} s after the revocation")
    assert closed_after < scaled(BOUND_S)
    assert closed.code == CloseCode.VIEWER_FORBIDDEN
    assert "revoked" in closed.reason


async def test_a_viewer_an_api_token_minted_closes_within_2_s_of_revoke_token(
    stack: Stack,
) -> None:
    token, token_id = await _member(stack.seed, "viewer-agent")
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(30)) as client:
        path = await _attach(stack, client, _bearer(token))
    await _viewer_closes_after(stack, path, lambda: _revoke(stack.seed, "revoke-token", token_id))
    # Its capability opens nothing any more, though it has not expired: "Access denied".
    async with websockets.connect(_socket(stack, path), subprotocols=["binary"]) as again:  # type: ignore[list-item]
        closed = await _closed(again, scaled(BOUND_S))
    assert closed.code == CloseCode.VIEWER_FORBIDDEN and "revoked" in closed.reason


async def test_a_viewer_a_web_session_minted_closes_within_2_s_of_logout(stack: Stack) -> None:
    seed = stack.seed
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(30)) as browser:
        credentials = {"username": "alice", "password": seed.user["password"]}
        assert (await browser.post("/api/v1/login", json=credentials)).status_code == 200
        csrf = {CSRF_HEADER: (await browser.get("/api/v1/me")).json()["csrf_token"]}
        path = await _attach(stack, browser, csrf)

        async def logout() -> float:
            answer = await browser.post("/api/v1/logout", headers=csrf)
            assert answer.status_code in (200, 204), answer.text
            return time.monotonic()

        await _viewer_closes_after(stack, path, logout)


async def test_an_audio_socket_an_api_token_minted_closes_within_2_s_of_revoke_token(
    stack: Stack,
) -> None:
    token, token_id = await _member(stack.seed, "audio-agent")
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(30)) as client:
        path = await _attach(stack, client, _bearer(token))
    async with websockets.connect(_socket(stack, path, "audio")) as audio:
        first = await asyncio.wait_for(audio.recv(), scaled(10))  # the stream's opening message
        assert first, "the audio stream sent nothing"
        revoked_at = await _revoke(stack.seed, "revoke-token", token_id)
        closed = await _closed(audio, scaled(BOUND_S) + 1, replies_allowed=True)
        closed_after = time.monotonic() - revoked_at
    assert closed_after < scaled(BOUND_S)
    assert closed.code == CloseCode.VIEWER_FORBIDDEN and "revoked" in closed.reason


# -- the viewer's control feed ----------------------------------------------------------------


async def test_a_control_feed_ends_within_2_s_when_its_user_is_disabled(stack: Stack) -> None:
    token, _ = await _member(stack.seed, "feed-person")
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(30)) as client:
        path = await _attach(stack, client, _bearer(token))
        async with open_sse(client, path + "control") as stream:
            assert stream.response.status_code == 200
            assert (await stream.next()).event == "control"
            revoked_at = await _revoke(stack.seed, "disable-user", "feed-person")
            events = await _ended(stream, scaled(BOUND_S) + 1)
            ended_after = time.monotonic() - revoked_at
    print(f"control feed ended {ended_after:.2f} s after disable-user")
    assert ended_after < scaled(BOUND_S)
    assert events[-1].event == "access_revoked"


# -- an MCP call ------------------------------------------------------------------------------


async def test_an_mcp_call_still_running_ends_401_within_2_s_of_revoke_token(
    stack: Stack,
) -> None:
    token, token_id = await _member(stack.seed, "mcp-agent")
    url = f"{stack.url}/api/v1/conversations/{stack.seed.conversation_id}/mcp"
    headers = {**_bearer(token), "Accept": "application/json, text/event-stream"}
    marker = f"mcp-ran-{token_id[:8]}"
    arguments = {"command": f"sleep 10; touch $HOME/{marker}", "timeout_s": 30}
    params = {"name": "desktop_shell", "arguments": arguments}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    async with httpx.AsyncClient(timeout=scaled(30)) as client:
        running = asyncio.create_task(client.post(url, json=call, headers=headers))
        await asyncio.sleep(1.0)  # the command is running on the desktop
        assert not running.done(), running.result().text
        revoked_at = await _revoke(stack.seed, "revoke-token", token_id)
        answer = await asyncio.wait_for(running, scaled(BOUND_S) + 1)
        ended_after = time.monotonic() - revoked_at
    print(f"MCP call ended {ended_after:.2f} s after revoke-token: {answer.status_code}")
    assert ended_after < scaled(BOUND_S)
    assert answer.status_code == 401, answer.text
    assert "revoked" in answer.json()["error"]["message"]
    await asyncio.sleep(11)  # past the command's sleep: had it gone on, the file would be there
    probe = {"command": f"test -e $HOME/{marker} && echo ran || echo killed", "timeout_s": 10}
    result = await seed_action(stack.url, stack.seed, "desktop_shell", **probe)
    assert result["stdout"] == "killed\n", "the command went on after the revocation"


async def test_a_cua_http_command_still_running_ends_401_within_2_s_of_revoke_token(
    stack: Stack,
) -> None:
    token, token_id = await _member(stack.seed, "cua-http")
    marker = f"cua-ran-{token_id[:8]}"
    shell = {"command": f"sleep 10; touch $HOME/{marker}", "timeout": 30}
    body = {"command": "run_command", "params": shell}
    async with httpx.AsyncClient(timeout=scaled(30)) as client:
        url = f"{stack.cua_url('http')}/cmd"
        running = asyncio.create_task(client.post(url, json=body, headers=_bearer(token)))
        await asyncio.sleep(1.0)  # the command is running on the desktop
        assert not running.done(), running.result().text
        revoked_at = await _revoke(stack.seed, "revoke-token", token_id)
        answer = await asyncio.wait_for(running, scaled(BOUND_S) + 1)
        ended_after = time.monotonic() - revoked_at
    assert ended_after < scaled(BOUND_S)
    assert answer.status_code == 401, answer.text
    assert "revoked" in answer.json()["error"]["message"]
    await asyncio.sleep(11)  # past the command's sleep: had it gone on, the file would be there
    probe = {"command": f"test -e $HOME/{marker} && echo ran || echo killed", "timeout_s": 10}
    result = await seed_action(stack.url, stack.seed, "desktop_shell", **probe)
    assert result["stdout"] == "killed\n", "the command went on after the revocation"
