"""No agent's viewer on a relay that denies apps: a real server process and a real relay started
with ``RELAYDESK_DENY_APPS``, with a real desktop.

A VNC stream cannot be masked, so an API token gets no viewer URL there (``desktop_start``
answers ``viewer_url: null`` with the reason, ``desktop_attach`` 403 ``policy_denied``), and a
view-only capability — one minted before the relay announced ``denied_apps`` — is refused at
the viewer's and the audio's WebSocket with 403 ``policy_denied``. A person's viewer opens as
before and streams the desktop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import pytest
import pytest_asyncio
import websockets

from server.auth.capability import grant_for, mint
from server.auth.dependencies import CSRF_HEADER
from server.config import load_or_create_secret
from tests.support.processes import ProcessTracker, scaled
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

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

DENY = {"RELAYDESK_DENY_APPS": "keepassxc"}


@dataclass
class Stack:
    seed: Seed
    server: ServerProcess
    started: dict[str, object]

    @property
    def session_id(self) -> str:
        desktop = self.started["desktop"]
        assert isinstance(desktop, dict)
        return str(desktop["desktop_session_id"])

    def socket_url(self, path: str, end: str = "websockify") -> str:
        return self.server.url.replace("http", "ws", 1) + urlsplit(path).path + end


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    root = tmp_path_factory.mktemp("agent-viewer-policy")
    seed = await seed_database(root / "data")
    tracker = ProcessTracker(root / "processes")
    try:
        server = await start_server(tracker.start, seed)
        start_relay(tracker.start, seed, server.url, env={**QUICK_DESKTOPS, **DENY})
        await wait_until(lambda: server.relays_connected() == 1, 30, "the relay to connect")
        started = await seed_action(server.url, seed, "desktop_start", slot="main")
        yield Stack(seed, server, started)
        session = Stack(seed, server, started).session_id
        stop = {"relay": "relay-1", "slot": "main", "desktop_session_id": session}
        await seed_action(server.url, seed, "desktop_stop_confirm", **stop)
    except BaseException:
        for process in tracker.processes:
            print(f"----- {process.name}: {process.log_tail(3000)}")
        raise
    finally:
        tracker.cleanup()


def _agent_capability(stack: Stack) -> str:
    """A view-only capability, genuine (the server's own key): as if minted before the relay
    announced ``denied_apps``."""
    key = load_or_create_secret(stack.seed.data_dir)
    seed = stack.seed
    where = (str(seed.user["user_id"]), seed.conversation_id, str(seed.relay["relay_id"]))
    grant = grant_for(*where, stack.session_id, 600)
    return mint(key, grant)


async def test_an_agents_desktop_start_answers_no_viewer_url_and_why(stack: Stack) -> None:
    assert stack.started["viewer_url"] is None
    assert stack.started["viewer_expires_at"] is None
    refused = stack.started["viewer_refused"]
    assert isinstance(refused, dict) and refused["code"] == "policy_denied"
    assert "denies apps" in refused["message"]
    # The desktop itself started: the agent still works through the screen tool.
    again = await seed_action(stack.server.url, stack.seed, "desktop_start", slot="main")
    assert again["already_running"] is True and again["viewer_url"] is None


async def test_an_agents_attach_is_403_policy_denied(stack: Stack) -> None:
    body = {"conversation_id": stack.seed.conversation_id, "relay": "relay-1", "slot": "main"}
    headers = {"Authorization": f"Bearer {stack.seed.api_token}"}
    async with httpx.AsyncClient(base_url=stack.server.url, timeout=scaled(30)) as client:
        answer = await client.post("/api/v1/actions/desktop_attach", json=body, headers=headers)
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"]["code"] == "policy_denied"


@pytest.mark.parametrize("end", ["websockify", "audio"])
async def test_a_view_only_capability_is_refused_403_policy_denied(stack: Stack, end: str) -> None:
    path = f"/vnc/{stack.session_id}/{_agent_capability(stack)}/"
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(stack.socket_url(path, end), subprotocols=["binary"]):  # type: ignore[list-item]
            pass
    assert refused.value.response.status_code == 403
    assert json.loads(refused.value.response.body)["error"]["code"] == "policy_denied"


async def test_a_persons_viewer_opens_and_streams_the_desktop(stack: Stack) -> None:
    seed = stack.seed
    async with httpx.AsyncClient(base_url=stack.server.url, timeout=scaled(30)) as browser:
        login = {"username": seed.user["username"], "password": seed.user["password"]}
        assert (await browser.post("/api/v1/login", json=login)).status_code == 200
        csrf = (await browser.get("/api/v1/me")).json()["csrf_token"]
        body = {"conversation_id": seed.conversation_id, "relay": "relay-1", "slot": "main"}
        attached = await browser.post(
            "/api/v1/actions/desktop_attach", json=body, headers={CSRF_HEADER: csrf}
        )
    assert attached.status_code == 200, attached.text
    url = attached.json()["viewer_url"]
    assert url and "view_only" not in url
    async with websockets.connect(stack.socket_url(url), subprotocols=["binary"]) as viewer:  # type: ignore[list-item]
        banner = await asyncio.wait_for(viewer.recv(), scaled(10))
    assert banner[:4] == b"RFB "
