"""Chat routes with a real store and fake actions/events: roles, limits, commands, the web app."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from server import admin
from server.auth.capability import grant_for, mint
from server.auth.dependencies import Authenticator
from server.auth.errors import AuthError, auth_error_handler
from server.auth.principal import Principal
from server.chat.ports import ChatService
from server.chat.routes import MAX_MESSAGE_CHARS, chat_routes
from server.chat.web import CSP, web_routes
from server.db.rows import DesktopRow
from server.db.store import Store
from server.relays.router import RelayRouter
from server.viewer.assets import viewer_file
from server.viewer.keyboard_state import keyboard_state_route
from tests.support.stack import Seed, seed_database
from wire.errors import ErrorCode, OpError

pytestmark = pytest.mark.unit
SECRET = "test-secret-key"


@dataclass
class FakeActions:
    """Answers actions from canned rows and records every call."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    probed: list[dict[str, Any]] | None = None
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    async def __call__(
        self, principal: Principal, name: str, body: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        self.calls.append((principal.username, name, body))
        answer: tuple[int, dict[str, Any]] = getattr(self, name)(body)
        return answer

    def names(self) -> list[str]:
        return [name for _, name, _ in self.calls]

    def desktop_list_active(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 200, {"ok": True, "desktops": self.rows}

    def desktop_status(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 200, {"ok": True, "desktops": self.rows if self.probed is None else self.probed}

    def desktop_start(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        row = _row("new-session-0001", body["relay"])
        return 200, {"ok": True, "desktop": row, "viewer_url": "/vnc/new/secret-token/"}

    def desktop_attach(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if not self.rows:
            return 409, {"ok": False, "error": {"code": "not_running", "message": "none"}}
        return 200, {"ok": True, "desktop": self.rows[0], "viewer_url": "/vnc/old/tok/"}

    def desktop_stop_request(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if not self.rows:
            return 409, {"ok": False, "error": {"code": "not_running", "message": "none"}}
        return 200, {"ok": True, "confirm_required": True, "desktop": self.rows[0]}


def _row(session: str, relay: str = "relay-1", state: str = "running") -> dict[str, Any]:
    return {
        "relay_id": "r1",
        "relay_name": relay,
        "desktop_session_id": session,
        "kind": "virtual",
        "slot": "main",
        "state": state,
        "started_by": "alice",
        "started_at": "2025-01-01T00:00:00+00:00",
        "can_stop": True,
    }


@dataclass
class Env:
    client: httpx.AsyncClient
    seed: Seed
    store: Store
    actions: FakeActions
    published: list[tuple[str, str, dict[str, Any]]]
    bob_token: str
    hub: FakeHub
    chat: ChatService

    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.seed.api_token}"}

    def messages_url(self, conversation_id: str | None = None) -> str:
        return f"/api/v1/conversations/{conversation_id or self.seed.conversation_id}/messages"

    async def post(self, text: Any, token: str | None = None) -> httpx.Response:
        return await self.client.post(
            self.messages_url(), json={"text": text}, headers=self.auth(token)
        )


LEDS_OFF = {"num_lock": False, "caps_lock": False, "scroll_lock": False, "source": "led_mask"}


@dataclass
class FakeHub:
    answer: Any = field(default_factory=lambda: dict(LEDS_OFF))
    requests: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    async def request(self, relay_id: str, op: str, args: dict[str, Any], timeout: float) -> Any:
        self.requests.append((relay_id, op, args))
        if isinstance(self.answer, OpError):
            raise self.answer
        return self.answer


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Seed, str]:
    """One migrated, seeded database; each test gets a copy (migrating costs ~1 s)."""
    return asyncio.run(_template(tmp_path_factory.mktemp("chat")))


async def _template(folder: Path) -> tuple[Seed, str]:
    seed = await seed_database(folder / "data")
    store = await Store.open(seed.database_url)
    try:
        await admin.create_user(store, "bob")
        bob = await admin.create_token(store, "bob")
        user = await store.get_user_by_name("bob")
        assert user is not None
        await store.add_member(seed.conversation_id, user.user_id, "read")
    finally:
        await store.close()
    return seed, bob["token"]


@pytest.fixture
async def env(tmp_path: Path, template: tuple[Seed, str]) -> AsyncIterator[Env]:
    original, bob_token = template
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    shutil.copy(original.data_dir / "relaydesk.db", data_dir / "relaydesk.db")
    seed = dataclasses.replace(
        original, data_dir=data_dir, database_url=f"sqlite+aiosqlite:///{data_dir / 'relaydesk.db'}"
    )
    store = await Store.open(seed.database_url)
    actions, published, hub = FakeActions(), [], FakeHub()

    async def publish(conversation_id: str, event: str, data: dict[str, Any]) -> str:
        published.append((conversation_id, event, data))
        return "1"

    chat = ChatService(Authenticator(store), store, FakeInventory(), actions, publish)
    app = Starlette(
        routes=[
            *chat_routes(chat),
            keyboard_state_route(store, cast(RelayRouter, hub), SECRET),
            *web_routes(),
            Route("/viewer/{name}", viewer_file),
        ],
        exception_handlers={AuthError: auth_error_handler},
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield Env(client, seed, store, actions, published, bob_token, hub, chat)
    await store.close()


# -- conversations and the transcript ---------------------------------------------------------


async def test_the_callers_conversations_are_listed_with_their_role(env: Env) -> None:
    response = await env.client.get("/api/v1/conversations", headers=env.auth())
    assert response.status_code == 200
    [conversation] = response.json()["conversations"]
    assert conversation["title"] == "Team"
    assert conversation["role"] == "owner"
    detail = await env.client.get(
        f"/api/v1/conversations/{env.seed.conversation_id}", headers=env.auth(env.bob_token)
    )
    assert detail.json()["role"] == "read"
    assert [relay["name"] for relay in detail.json()["relays"]] == ["relay-1"]


async def test_a_message_is_stored_published_and_paged(env: Env) -> None:
    for n in range(5):
        assert (await env.post(f"hello {n}")).status_code == 201
    assert [data["text"] for _, event, data in env.published] == [f"hello {n}" for n in range(5)]
    assert {event for _, event, _ in env.published} == {"message_created"}
    page = (await env.client.get(env.messages_url() + "?limit=2", headers=env.auth())).json()
    assert [m["text"] for m in page["messages"]] == ["hello 3", "hello 4"]
    assert page["has_more"] is True
    before = page["messages"][0]["id"]
    older = await env.client.get(
        env.messages_url() + f"?before={before}&limit=10", headers=env.auth()
    )
    assert [m["text"] for m in older.json()["messages"]] == ["hello 0", "hello 1", "hello 2"]
    assert older.json()["messages"][0]["author"]["username"] == "alice"


async def test_html_is_stored_verbatim_never_interpreted(env: Env) -> None:
    text = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
    response = await env.post(text)
    assert response.json()["message"]["text"] == text
    assert response.headers["content-type"].startswith("application/json")


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"text": "x" * (MAX_MESSAGE_CHARS + 1)}, 413, "limit_reached"),
        ({"text": "   "}, 400, "invalid_args"),
        ({"text": 5}, 400, "invalid_args"),
        ({"words": "hi"}, 400, "invalid_args"),
        ([1, 2], 400, "invalid_args"),
    ],
)
async def test_bad_messages_get_a_clear_error(env: Env, body: Any, status: int, code: str) -> None:
    response = await env.client.post(env.messages_url(), json=body, headers=env.auth())
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    if status == 413:
        assert "4,000" in response.json()["error"]["message"]
    assert env.published == []


async def test_an_oversized_body_is_refused_before_parsing(env: Env) -> None:
    response = await env.client.post(
        env.messages_url(), content=b"{" + b" " * 70_000 + b"}", headers=env.auth()
    )
    assert response.status_code == 413


async def test_a_message_at_the_limit_is_accepted(env: Env) -> None:
    assert (await env.post("y" * MAX_MESSAGE_CHARS)).status_code == 201


async def test_strangers_get_404_and_readers_cannot_post_text(env: Env) -> None:
    other = await env.store.create_conversation("Private")
    stranger = await env.client.get(env.messages_url(other.conversation_id), headers=env.auth())
    assert stranger.status_code == 404
    refused = await env.post("hi", token=env.bob_token)
    assert refused.status_code == 403
    assert "write" in refused.json()["error"]["message"]
    unauthenticated = await env.client.get(env.messages_url())
    assert unauthenticated.status_code == 401
    bad_page = await env.client.get(env.messages_url() + "?limit=0", headers=env.auth())
    assert bad_page.status_code == 400


async def test_cookie_posts_need_the_csrf_header(env: Env) -> None:
    user = await _user(env, "alice")
    secret, csrf = await env.store.create_web_session(user.user_id, 3600)
    env.client.cookies.set("relaydesk_session", secret)
    refused = await env.client.post(env.messages_url(), json={"text": "hi"})
    assert refused.status_code == 403
    accepted = await env.client.post(
        env.messages_url(), json={"text": "hi"}, headers={"X-CSRF-Token": csrf}
    )
    assert accepted.status_code == 201


# -- /desktop commands ------------------------------------------------------------------------


async def test_desktop_starts_when_nothing_runs_and_the_viewer_url_stays_private(
    env: Env,
) -> None:
    response = await env.post("/desktop")
    body = response.json()
    assert response.status_code == 201
    assert env.actions.names() == ["desktop_list_active", "desktop_start"]
    start = {"relay": "relay-1", "kind": "virtual", "slot": "main"}
    assert env.actions.calls[1][2] == {"conversation_id": env.seed.conversation_id, **start}
    reply = body["reply"]
    assert reply["kind"] == "result"
    assert reply["payload"]["outcome"] == "started"
    assert reply["payload"]["open_viewer"] is True
    assert body["private"] == {"viewer_url": "/vnc/new/secret-token/"}
    assert "secret-token" not in str(env.published)
    stored = (await env.client.get(env.messages_url(), headers=env.auth())).json()["messages"]
    assert [m["kind"] for m in stored] == ["user", "result"]
    assert "secret-token" not in str(stored)
    assert stored[1]["payload"]["reply_to"] == stored[0]["id"]


async def test_desktop_attaches_after_the_probe_confirms_the_running_session(env: Env) -> None:
    env.actions.rows = [_row("old-session-0001")]
    body = (await env.post("/desktop relay-1")).json()
    assert env.actions.names() == ["desktop_list_active", "desktop_status", "desktop_attach"]
    assert body["reply"]["payload"]["outcome"] == "attached"
    assert body["private"]["viewer_url"] == "/vnc/old/tok/"


async def test_a_recorded_desktop_that_does_not_answer_is_replaced_and_audited(
    env: Env,
) -> None:
    env.actions.rows = [_row("old-session-0001")]
    env.actions.probed = [_row("old-session-0001", state="failed")]
    body = (await env.post("/desktop")).json()
    assert env.actions.names() == ["desktop_list_active", "desktop_status", "desktop_start"]
    payload = body["reply"]["payload"]
    assert payload["outcome"] == "restarted"
    assert payload["replaced_session_id"] == "old-session-0001"
    assert "did not answer" in body["reply"]["text"]
    audit = [row for row in await env.store.list_audit() if row.op == "chat_open_replace"]
    assert audit
    assert audit[0].desktop_session_id == "old-session-0001"


async def test_stop_only_asks_for_confirmation(env: Env) -> None:
    env.actions.rows = [_row("old-session-0001")]
    payload = (await env.post("/desktop stop")).json()["reply"]["payload"]
    assert env.actions.names() == ["desktop_stop_request"]
    assert payload["outcome"] == "confirm_required"
    assert payload["desktop"]["desktop_session_id"] == "old-session-0001"


async def test_attach_refuses_when_nothing_runs(env: Env) -> None:
    payload = (await env.post("/desktop attach relay-1")).json()["reply"]["payload"]
    assert payload["outcome"] == "not_running"
    assert "desktop_start" not in env.actions.names()


async def test_close_list_and_help_answer_without_side_effects(env: Env) -> None:
    idle = (await env.post("/desktop close")).json()["reply"]
    assert idle["payload"]["outcome"] == "close_viewer"
    assert idle["text"].startswith("No desktop is running")
    env.actions.rows = [_row("s-1")]
    close = (await env.post("/desktop close")).json()["reply"]
    assert "keep running" in close["text"]
    listed = (await env.post("/desktop list")).json()["reply"]["payload"]
    assert listed["desktops"][0]["desktop_session_id"] == "s-1"
    helped = (await env.post("/desktop help")).json()["reply"]["payload"]
    assert len(helped["lines"]) == 18
    assert env.actions.names() == ["desktop_list_active"] * 3


async def test_typos_and_unknown_relays_get_suggestions(env: Env) -> None:
    typo = (await env.post("/desktop lsit relay-1")).json()["reply"]["payload"]
    assert typo == {**typo, "outcome": "parse_error", "suggestion": "/desktop list"}
    unknown = (await env.post("/desktop status relya-1")).json()["reply"]["payload"]
    assert unknown["outcome"] == "unknown_relay"
    assert unknown["suggestion"] == "/desktop status relay-1"
    assert env.actions.calls == []


async def test_an_unknown_word_names_the_relays_the_conversation_can_use(env: Env) -> None:
    relay = await admin.add_relay(env.store, "relay-2", "alice")
    await admin.share_relay(env.store, relay["relay_id"], env.seed.conversation_id)
    reply = (await env.post("/desktop foo")).json()["reply"]
    assert reply["payload"]["outcome"] == "unknown_relay"
    assert reply["payload"]["relays"] == ["relay-1", "relay-2"]
    assert "'foo'" in reply["text"]
    assert "relay-1" in reply["text"] and "relay-2" in reply["text"]
    assert env.actions.calls == []


async def test_several_relays_need_a_name(env: Env) -> None:
    relay = await admin.add_relay(env.store, "relay-2", "alice")
    await admin.share_relay(env.store, relay["relay_id"], env.seed.conversation_id)
    payload = (await env.post("/desktop")).json()["reply"]["payload"]
    assert payload["outcome"] == "choose_relay"
    assert payload["relays"] == ["relay-1", "relay-2"]


async def test_a_reader_runs_read_commands_privately(env: Env) -> None:
    env.actions.rows = [_row("s-1")]
    response = await env.post("/desktop list", token=env.bob_token)
    assert response.status_code == 200
    body = response.json()
    assert body["message"] is None
    assert body["reply"]["payload"]["ephemeral"] is True
    assert env.actions.calls[0][0] == "bob"
    assert env.published == []
    stored = (await env.client.get(env.messages_url(), headers=env.auth())).json()["messages"]
    assert stored == []


async def test_action_errors_are_reported_as_results(env: Env) -> None:
    async def failing(principal: Principal, name: str, body: dict[str, Any]) -> Any:
        if name == "desktop_list_active":
            return 200, {"desktops": []}
        return 403, {"ok": False, "error": {"code": "forbidden", "message": "needs write"}}

    env.chat.invoke = failing
    payload = (await env.post("/desktop")).json()["reply"]["payload"]
    assert payload["outcome"] == "error"
    assert payload["error"] == {"code": "forbidden", "message": "needs write", "status": 403}


@pytest.mark.parametrize(
    "text",
    [
        "/desktop lsit",
        "/desktop nope-relay",
        "/desktop list",
        "/desktop status",
        "/desktop stop",
        "/desktop attach",
        "/desktop close",
        "/desktop help",
        "/dekstop",
        "/desktop list extra",
    ],
)
async def test_every_reply_is_a_sentence(env: Env, text: str) -> None:
    reply = (await env.post(text)).json()["reply"]["text"]
    assert reply[:1].isupper() or reply.startswith("/"), reply


async def _only_relay(env: Env, name: str) -> None:
    relay = await admin.add_relay(env.store, name, "alice")
    await admin.share_relay(env.store, relay["relay_id"], env.seed.conversation_id)
    await admin.unshare_relay(env.store, "relay-1", env.seed.conversation_id)


async def test_a_relay_named_local_is_never_offered_as_the_real_screen(env: Env) -> None:
    """Stop with nothing running offers the command that opens that relay's virtual desktop."""
    await _only_relay(env, "local")
    reply = (await env.post("/desktop stop")).json()["reply"]
    assert reply["payload"]["outcome"] == "not_running"
    assert reply["payload"]["suggestion"] == "/desktop virtual local"
    assert reply["text"] == (
        "No desktop is running on local; nothing to stop. /desktop virtual local starts one."
    )
    attach = (await env.post("/desktop attach")).json()["reply"]["payload"]
    assert attach["suggestion"] == "/desktop virtual local"
    relay = await admin.add_relay(env.store, "status", "alice")
    await admin.share_relay(env.store, relay["relay_id"], env.seed.conversation_id)
    several = (await env.post("/desktop")).json()["reply"]["payload"]
    assert several["commands"] == ["/desktop virtual local", "/desktop virtual status"]


async def test_a_relay_without_its_real_screen_gets_a_next_step(env: Env) -> None:
    async def no_helper(principal: Principal, name: str, body: dict[str, Any]) -> Any:
        if name == "desktop_list_active":
            return 200, {"desktops": []}
        message = "local desktops are not run by the virtual desktop manager"
        return 503, {"ok": False, "error": {"code": "unavailable", "message": message}}

    env.chat.invoke = no_helper
    reply = (await env.post("/desktop local")).json()["reply"]
    assert reply["text"] == (
        "Relay relay-1 does not share its real screen. To share it, run `relaydesk host-helper` "
        "on that relay's host, or use its virtual desktop: /desktop relay-1."
    )
    assert "virtual desktop manager" not in reply["text"]
    assert reply["payload"]["error"]["code"] == "unavailable"


async def test_desktop_docker_opens_a_container_desktop_as_the_api_means_it(env: Env) -> None:
    """ "docker" is the container desktop in the chat as in the API (kind ``docker``)."""
    reply = (await env.post("/desktop docker")).json()["reply"]
    start = [body for _, name, body in env.actions.calls if name == "desktop_start"]
    assert [body["kind"] for body in start] == ["docker"], env.actions.calls
    assert reply["text"] == "Started the container desktop on relay-1."
    assert reply["payload"]["kind"] == "docker"
    await env.post("/desktop virtual")
    plain = [body for _, name, body in env.actions.calls if name == "desktop_start"]
    assert plain[-1]["kind"] == "virtual"


async def test_desktop_docker_on_a_relay_without_containers_says_where_the_virtual_one_is(
    env: Env,
) -> None:
    """Who typed ``/desktop docker`` for the virtual desktop (its old meaning) is told."""

    async def no_containers(principal: Principal, name: str, body: dict[str, Any]) -> Any:
        if name == "desktop_list_active":
            return 200, {"desktops": []}
        message = "this relay does not run desktops in containers (docker_desktop)"
        return 503, {"ok": False, "error": {"code": "unavailable", "message": message}}

    env.chat.invoke = no_containers
    reply = (await env.post("/desktop docker")).json()["reply"]
    assert reply["text"] == (
        "Relay relay-1 cannot run desktops in containers (this relay does not run desktops in "
        "containers (docker_desktop)). /desktop docker opens a desktop in a container of its "
        "own; the relay's virtual desktop is /desktop relay-1."
    )


@dataclass
class FakeInventory:
    rows: dict[tuple[str, str], DesktopRow] = field(default_factory=dict)

    async def row(self, relay_id: str, desktop_session_id: str) -> DesktopRow | None:
        return self.rows.get((relay_id, desktop_session_id))


async def test_a_transcript_read_later_tells_how_each_desktop_ended(env: Env) -> None:
    await env.post("/desktop")
    inventory = FakeInventory()
    inventory.rows[("r1", "new-session-0001")] = DesktopRow(
        relay_id="r1",
        desktop_session_id="new-session-0001",
        kind="virtual",
        slot="main",
        state="stopped",
        started_at="2025-01-01T00:00:00+00:00",
        started_by="alice",
        updated_at="2025-01-01T00:05:00+00:00",
        reason="stopped by bob",
    )
    env.chat.inventory = inventory
    stored = (await env.client.get(env.messages_url(), headers=env.auth())).json()["messages"]
    assert "desktop_now" not in stored[0]
    assert stored[1]["desktop_now"] == {
        "state": "stopped",
        "reason": "stopped by bob",
        "updated_at": "2025-01-01T00:05:00+00:00",
    }


# -- web app ----------------------------------------------------------------------------------


async def test_the_web_app_is_served_with_a_strict_csp_and_exact_types(env: Env) -> None:
    index = await env.client.get("/")
    assert index.status_code == 200
    assert index.headers["content-type"] == "text/html; charset=utf-8"
    assert index.headers["content-security-policy"] == CSP
    assert "default-src 'self'" in CSP
    assert index.headers["cache-control"] == "no-cache"
    script = await env.client.get("/app/main.js")
    assert script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert script.headers["x-content-type-options"] == "nosniff"
    assert (await env.client.get("/app/app.css")).headers["content-type"].startswith("text/css")
    assert (await env.client.get("/app/../../server/config.py")).status_code == 404
    assert (await env.client.get("/app/nope.js")).status_code == 404
    icon = await env.client.get("/favicon.ico")
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/svg+xml"
    assert (await env.client.get("/app/favicon.svg")).text.startswith("<svg")
    bridge = await env.client.get("/viewer/bridge.js")
    assert bridge.headers["content-type"] == "text/javascript; charset=utf-8"
    assert "export function installBridge" in bridge.text


# -- keyboard state ---------------------------------------------------------------------------


async def _user(env: Env, name: str) -> Any:
    user = await env.store.get_user_by_name(name)
    assert user is not None
    return user


def _viewer_token(env: Env, user_id: str, session: str = "sess-1", ttl: int = 60) -> str:
    grant = grant_for(user_id, env.seed.conversation_id, env.seed.relay["relay_id"], session, ttl)
    return mint(SECRET, grant)


async def test_keyboard_state_is_capability_protected_and_never_cached(env: Env) -> None:
    alice = await _user(env, "alice")
    token = _viewer_token(env, alice.user_id)
    response = await env.client.get(f"/vnc/sess-1/{token}/keyboard-state")
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    assert response.json() == {
        "ok": True,
        "known": True,
        "num_lock": False,
        "caps_lock": False,
        "scroll_lock": False,
    }
    assert env.hub.requests == [
        (env.seed.relay["relay_id"], "keyboard.state", {"desktop_session_id": "sess-1"})
    ]
    other = await env.client.get(f"/vnc/sess-2/{token}/keyboard-state")
    forged = await env.client.get(f"/vnc/sess-1/{token[:-3]}abc/keyboard-state")
    bob = await _user(env, "bob")
    reader = await env.client.get(f"/vnc/sess-1/{_viewer_token(env, bob.user_id)}/keyboard-state")
    for refused in (other, forged, reader):
        assert refused.status_code == 403
        assert refused.json()["known"] is False
        assert refused.json()["num_lock"] is None
        assert refused.headers["cache-control"] == "no-store"
    assert len(env.hub.requests) == 1


async def test_keyboard_state_unknown_when_the_relay_cannot_tell(env: Env) -> None:
    alice = await _user(env, "alice")
    token = _viewer_token(env, alice.user_id)
    env.hub.answer = OpError(ErrorCode.NOT_RUNNING, "no such desktop")
    gone = await env.client.get(f"/vnc/sess-1/{token}/keyboard-state")
    assert (gone.status_code, gone.json()["known"]) == (410, False)
    env.hub.answer = {"num_lock": "maybe"}
    odd = await env.client.get(f"/vnc/sess-1/{token}/keyboard-state")
    assert (odd.status_code, odd.json()["known"], odd.json()["num_lock"]) == (200, False, None)
