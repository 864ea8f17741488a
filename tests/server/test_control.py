"""Control on a real in-process server: the actions, the events, grants and Stop, bad input.

Desktops enter the inventory the way a relay's start result would put them there; an agent's
input is the gate every input path passes (``server.control.gate.agent_input``) with a body
that stands for the input, so what is checked here is what the server decides and shows.
Runs on the in-process store and, with the Redis tier, on Redis (two replicas sharing it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from server import admin
from server.actions.context import ActionContext
from server.app import check_settings
from server.auth.capability import grant_for, mint
from server.auth.principal import Principal
from server.config import ConfigError, Settings
from server.control.gate import DesktopTarget, agent_input, resolve_target
from server.control.model import DesktopKey
from server.db.store import Store
from tests.support.redis import redis_server, redis_url  # noqa: F401 (fixtures)
from tests.support.sse import open_sse
from tests.support.stack import Seed, inprocess_server, seed_database, wait_until
from wire.errors import ErrorCode, OpError
from wire.ids import RelayId, UserId

pytestmark = pytest.mark.unit

STORES = ["memory", pytest.param("redis", marks=pytest.mark.redis)]
SESSION = "c" * 32
# Short enough that a test sees the lock lapse and the cooldown end; never a timing assertion.
IDLE_S = 0.6
COOLDOWN_S = 1.0


async def _people(seed: Seed) -> dict[str, str]:
    """A read-only member of the seed's conversation, and an owner of another conversation
    that sees no relay; returns their API tokens."""
    store = await Store.open(seed.database_url)
    try:
        await admin.create_user(store, "reader")
        await admin.create_user(store, "outsider")
        await admin.create_user(store, "bot")
        await store.add_member(seed.conversation_id, (await _user(store, "reader")), "read")
        await store.add_member(seed.conversation_id, (await _user(store, "bot")), "write")
        await admin.create_conversation(store, "Other", ["outsider:owner"])
        return {
            name: (await admin.create_token(store, name))["token"]
            for name in ("reader", "outsider", "bot")
        }
    finally:
        await store.close()


async def _user(store: Store, name: str) -> str:
    user = await store.get_user_by_name(name)
    assert user is not None
    return user.user_id


@pytest_asyncio.fixture(params=STORES)
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""
    seed = await seed_database(tmp_path / "data")
    tokens = await _people(seed)
    settings = {
        "redis_url": url,
        "cluster_secret": "test-cluster-secret" if url else "",
        "takeover_idle_s": IDLE_S,
        "agent_regrant_cooldown_s": COOLDOWN_S,
    }
    async with (
        inprocess_server(seed, **settings) as (app, base),
        httpx.AsyncClient(base_url=base, timeout=10) as client,
    ):
        relay = RelayId(seed.relay["relay_id"])
        row = {"desktop_session_id": SESSION, "kind": "virtual", "slot": "main"}
        await app.state.parts.inventory.record_started(relay, row)
        yield app, client, seed, tokens


Caller = str | dict[str, str]  # an API token (an agent), or a person's web session headers


def _auth(caller: Caller) -> dict[str, str]:
    return caller if isinstance(caller, dict) else {"Authorization": f"Bearer {caller}"}


async def _as_person(client: httpx.AsyncClient, seed: Seed) -> dict[str, str]:
    """Alice signed in to the web app: her session cookie and CSRF token."""
    login = await client.post(
        "/api/v1/login", json={"username": "alice", "password": seed.user["password"]}
    )
    assert login.status_code == 200, login.text
    cookie = login.cookies["relaydesk_session"]
    client.cookies.clear()
    return {"Cookie": f"relaydesk_session={cookie}", "X-CSRF-Token": login.json()["csrf_token"]}


async def _action(
    client: httpx.AsyncClient, token: Caller, name: str, conversation_id: str, **args: Any
) -> tuple[int, Any]:
    body = {"conversation_id": conversation_id, **args}
    response = await client.post(f"/api/v1/actions/{name}", json=body, headers=_auth(token))
    return response.status_code, response.json()


def agent_context(app: Any, seed: Seed, name: str = "bot") -> ActionContext:
    """The context an agent's typed action runs in (an API token of user ``name``)."""
    parts = app.state.parts
    principal = Principal(UserId(f"id-{name}"), name, False, "token")
    return ActionContext(
        parts.actions.parts, principal, seed.conversation_id, "write", "api", "req-1"
    )


async def _target(app: Any, seed: Seed) -> DesktopTarget:
    ctx = agent_context(app, seed)
    await ctx.resolve_relay(None)
    return await resolve_target(ctx)


async def _agent_acts(app: Any, seed: Seed, name: str = "bot") -> str:
    """One agent input through the gate; ``ok`` or the refusal's code."""
    ctx = agent_context(app, seed, name)
    await ctx.resolve_relay(None)
    try:
        async with agent_input(ctx, await resolve_target(ctx)) as grant:
            grant.acted("click", x=10, y=20)
    except OpError as err:
        return err.code.value
    return "ok"


async def test_take_control_and_hand_back_through_the_actions(server: Any) -> None:
    app, client, seed, _ = server
    token, cid = seed.api_token, seed.conversation_id
    person = await _as_person(client, seed)
    status, body = await _action(client, token, "desktop_control", cid)
    assert (status, body["control"]["state"]) == (200, "idle")
    status, body = await _action(client, person, "desktop_take_control", cid)
    assert status == 200, body
    assert body["control"] == {
        "state": "person",
        "name": "alice",
        "held": True,
        "until": None,
        "agent": None,
    }
    assert await _agent_acts(app, seed) == "takeover_active"
    await asyncio.sleep(IDLE_S * 1.5)  # past the idle time: the hold is not input, it stays
    assert await _agent_acts(app, seed) == "takeover_active"
    status, body = await _action(client, person, "desktop_hand_back", cid)
    assert (status, body["control"]["state"]) == (200, "idle")
    assert await _agent_acts(app, seed) == "ok"
    status, body = await _action(client, token, "desktop_control", cid)
    assert (body["control"]["state"], body["control"]["name"]) == ("agent", "bot")
    rows = await app.state.parts.store.list_audit()
    ops = [(row.op, row.outcome, row.actor) for row in rows]
    assert ("desktop.take_control", "ok", "alice") in ops
    assert ("desktop.hand_back", "ok", "alice") in ops
    assert ("agent.grant", "created", "bot") in ops


async def test_a_persons_input_refuses_the_agent_until_idle(server: Any) -> None:
    app, _, seed, _ = server
    key = DesktopKey(seed.relay["relay_id"], SESSION)
    control = app.state.parts.control
    # The control clock stands still until the test moves it: a loaded machine's pauses
    # between the person's input and the agent's act never count as the person's idle time.
    now = [time.time()]
    control._clock = lambda: now[0]
    assert await _agent_acts(app, seed) == "ok"
    control.person_input(key, "alice", seed.user["user_id"])
    assert await _agent_acts(app, seed) == "takeover_active"
    info = await control.state(key)
    assert (info["state"], info["name"], info["agent"]) == ("person", "alice", "bot")
    now[0] += IDLE_S / 2
    assert await _agent_acts(app, seed) == "takeover_active"
    now[0] += IDLE_S
    assert await _agent_acts(app, seed) == "ok"


async def _ok(app: Any, seed: Seed) -> bool:
    return await _agent_acts(app, seed) == "ok"


async def test_stop_ends_the_request_in_flight_and_refuses_a_regrant_for_the_cooldown(
    server: Any,
) -> None:
    app, client, seed, _ = server
    ctx = agent_context(app, seed)
    await ctx.resolve_relay(None)
    target = await resolve_target(ctx)
    in_flight = asyncio.Event()

    async def long_input() -> None:
        async with agent_input(ctx, target):
            in_flight.set()
            await asyncio.sleep(60)  # an input the relay takes long to finish

    task = asyncio.create_task(long_input())
    await asyncio.wait_for(in_flight.wait(), 5)
    person = await _as_person(client, seed)
    status, body = await _action(client, person, "agent_stop", seed.conversation_id)
    assert status == 200, body
    assert (body["stopped"], body["cancelled"], body["regrant_after_s"]) == (["bot"], 1, COOLDOWN_S)
    with pytest.raises(OpError) as ended:
        await asyncio.wait_for(task, 5)
    assert ended.value.code is ErrorCode.STOPPED_BY_USER
    assert await _agent_acts(app, seed) == "stopped_by_user"
    assert await _agent_acts(app, seed, "other-agent") == "ok"  # Stop named no one else...
    began = time.monotonic()
    await wait_until(lambda: _ok(app, seed), 5, "the cooldown to end")
    assert time.monotonic() - began >= COOLDOWN_S * 0.5
    rows = [row for row in await app.state.parts.store.list_audit() if row.op == "agent.grant"]
    outcomes = [(row.outcome, row.actor, row.reason) for row in rows]
    assert ("revoked", "alice", "stopped_by_user") in outcomes
    assert ("refused", "bot", "stopped_by_user") in outcomes
    assert [o for o in outcomes if o[:2] == ("created", "bot")][-1:]  # a new grant after it
    assert all("rdk_" not in repr(row.details) for row in rows)


async def test_stop_with_no_agent_says_so(server: Any) -> None:
    _, client, seed, _ = server
    person = await _as_person(client, seed)
    status, body = await _action(client, person, "agent_stop", seed.conversation_id)
    assert (status, body["stopped"], body["cancelled"]) == (200, [], 0)


async def test_control_changes_reach_the_dock_and_a_viewer_over_sse(server: Any) -> None:
    app, client, seed, _ = server
    sid = SESSION
    token = mint(
        app.state.parts.settings.secret_key,
        grant_for(seed.user["user_id"], seed.conversation_id, seed.relay["relay_id"], sid, 600),
    )
    dock_url = f"/api/v1/events?conversation_id={seed.conversation_id}"
    async with (
        open_sse(client, dock_url, _auth(seed.api_token)) as dock,
        open_sse(client, f"/vnc/{sid}/{token}/control") as viewer,
    ):
        snapshot = await dock.next()
        assert snapshot.data["desktops"][0]["control"]["state"] == "idle"
        first = await viewer.next()
        assert (first.event, first.data["control"]["state"]) == ("control", "idle")
        person = await _as_person(client, seed)
        began = time.monotonic()
        await _action(client, person, "desktop_take_control", seed.conversation_id)
        changed = await _next_of(dock, "desktop_control_changed")
        seen = await _next_of(viewer, "control")
        assert time.monotonic() - began < 1.0
        for event in (changed, seen):
            assert event.data["desktop_session_id"] == sid
            assert (event.data["control"]["state"], event.data["control"]["name"]) == (
                "person",
                "alice",
            )
        await _action(client, person, "desktop_hand_back", seed.conversation_id)
        assert await _agent_acts(app, seed) == "ok"
        action = await _next_of(viewer, "agent_action")
        assert (action.data["agent"], action.data["action"], action.data["x"]) == (
            "bot",
            "click",
            10,
        )
    status, listed = await _action(
        client, seed.api_token, "desktop_list_active", seed.conversation_id
    )
    assert status == 200
    assert listed["desktops"][0]["control"]["state"] == "agent"


async def _next_of(stream: Any, name: str) -> Any:
    while (event := await stream.next(timeout=5)).event != name:
        pass
    return event


async def test_the_viewer_feed_needs_a_valid_capability(server: Any) -> None:
    app, client, seed, _ = server
    secret = app.state.parts.settings.secret_key
    forged = mint(
        "another-key",
        grant_for(seed.user["user_id"], seed.conversation_id, seed.relay["relay_id"], SESSION, 600),
    )
    response = await client.get(f"/vnc/{SESSION}/{forged}/control")
    assert (response.status_code, response.json()["error"]["code"]) == (403, "forbidden")
    expired = mint(
        secret,
        grant_for(seed.user["user_id"], seed.conversation_id, seed.relay["relay_id"], SESSION, -10),
    )
    assert (await client.get(f"/vnc/{SESSION}/{expired}/control")).status_code == 401
    store = app.state.parts.store
    reader = await _user(store, "reader")
    read_only = mint(
        secret, grant_for(reader, seed.conversation_id, seed.relay["relay_id"], SESSION, 600)
    )
    assert (await client.get(f"/vnc/{SESSION}/{read_only}/control")).status_code == 403


async def test_bad_input_gets_a_clear_refusal(server: Any) -> None:
    app, client, seed, tokens = server
    cid = seed.conversation_id
    person = await _as_person(client, seed)
    cases: list[tuple[Caller, str, str, dict[str, Any], int, str, str | None]] = [
        # (caller, action, conversation, args, status, code, field)
        (tokens["reader"], "desktop_take_control", cid, {}, 403, "forbidden", None),
        (tokens["reader"], "agent_stop", cid, {}, 403, "forbidden", None),
        (tokens["reader"], "desktop_hand_back", cid, {}, 403, "forbidden", None),
        (tokens["outsider"], "desktop_take_control", cid, {}, 403, "forbidden", None),
        (person, "desktop_take_control", cid, {"relay": "nope"}, 404, "relay_not_found", None),
        (person, "agent_stop", cid, {"agent": "nobody"}, 404, "not_found", "agent"),
        (person, "agent_stop", cid, {"agent": ""}, 400, "invalid_args", "agent"),
        (person, "desktop_take_control", cid, {"slot": "Bad Slot"}, 400, "invalid_args", "slot"),
        (person, "desktop_hand_back", cid, {"kind": "tank"}, 400, "invalid_args", "kind"),
        (seed.api_token, "desktop_control", cid, {"extra": 1}, 400, "invalid_args", "extra"),
        (
            person,
            "desktop_take_control",
            cid,
            {"desktop_session_id": "d" * 32},
            409,
            "not_running",
            None,
        ),
        (seed.api_token, "desktop_control", cid, {"slot": "other"}, 409, "not_running", None),
    ]
    other = (
        await app.state.parts.store.list_conversations_for(
            await _user(app.state.parts.store, "outsider")
        )
    )[0].conversation_id
    # An API token is an agent: take, hand back and Stop are refused before anything else.
    cases.append(
        (
            tokens["outsider"],
            "desktop_take_control",
            other,
            {"relay": seed.relay["name"]},
            403,
            "forbidden",
            None,
        )
    )
    for caller, name, conversation, args, status, code, field in cases:
        got, body = await _action(client, caller, name, conversation, **args)
        assert (got, body["error"]["code"]) == (status, code), (name, args, body)
        assert body["error"].get("field") == field, (name, args, body)


async def test_a_stopped_desktop_refuses_take_hand_back_and_stop(server: Any) -> None:
    app, client, seed, _ = server
    relay = RelayId(seed.relay["relay_id"])
    await app.state.parts.control.take(DesktopKey(relay, SESSION), "alice", None)
    await app.state.parts.inventory.record_ended(relay, SESSION, "stopped", "stopped by alice")
    person = await _as_person(client, seed)
    for name in ("desktop_take_control", "desktop_hand_back", "agent_stop", "desktop_control"):
        status, body = await _action(
            client, person, name, seed.conversation_id, desktop_session_id=SESSION
        )
        assert (status, body["error"]["code"]) == (409, "not_running"), (name, body)
    # the ended desktop left no control state behind
    assert (await app.state.parts.control.state(DesktopKey(relay, SESSION)))["state"] == "idle"


@pytest.mark.redis
async def test_two_replicas_share_control_through_redis(
    tmp_path: Path,
    redis_url: str,  # noqa: F811 (fixture)
) -> None:
    seed = await seed_database(tmp_path / "data")
    await _people(seed)
    settings = {
        "redis_url": redis_url,
        "cluster_secret": "test-cluster-secret",
        "takeover_idle_s": 30.0,
        "agent_regrant_cooldown_s": COOLDOWN_S,
    }
    async with (
        inprocess_server(seed, **settings) as (one, _),
        inprocess_server(seed, **settings) as (two, _),
    ):
        relay = RelayId(seed.relay["relay_id"])
        row = {"desktop_session_id": "e" * 32, "kind": "virtual", "slot": "main"}
        await one.state.parts.inventory.record_started(relay, row)
        key = DesktopKey(relay, "e" * 32)
        one.state.parts.control.person_input(key, "alice", seed.user["user_id"])
        await wait_until(lambda: _refused(two, seed), 5, "the other replica to see the person")
        await one.state.parts.control.hand_back(key)
        ctx = agent_context(two, seed)
        await ctx.resolve_relay(None)
        target = await resolve_target(ctx)
        in_flight = asyncio.Event()

        async def long_input() -> None:
            async with agent_input(ctx, target):
                in_flight.set()
                await asyncio.sleep(60)

        task = asyncio.create_task(long_input())
        await asyncio.wait_for(in_flight.wait(), 5)
        stopped = await one.state.parts.control.stop(key, "alice")
        assert [g.agent_name for g in stopped.revoked] == ["bot"]
        with pytest.raises(OpError) as ended:
            await asyncio.wait_for(task, 5)  # ended on the replica the request was on
        assert ended.value.code is ErrorCode.STOPPED_BY_USER


async def _refused(app: Any, seed: Seed) -> bool:
    return await _agent_acts(app, seed) == "takeover_active"


async def _say(client: httpx.AsyncClient, seed: Seed, token: Caller, text: str) -> Any:
    url = f"/api/v1/conversations/{seed.conversation_id}/messages"
    response = await client.post(url, json={"text": text}, headers=_auth(token))
    assert response.status_code in (200, 201), response.text
    return response.json()["reply"]


async def test_chat_commands_take_hand_back_and_stop_the_agent(server: Any) -> None:
    app, client, seed, tokens = server
    key = DesktopKey(seed.relay["relay_id"], SESSION)
    person = await _as_person(client, seed)
    reply = await _say(client, seed, person, "/desktop take")
    assert reply["payload"]["outcome"] == "took_control"
    assert reply["text"].startswith("You have control of the desktop on relay-1")
    assert (await app.state.parts.control.state(key))["held"] is True
    reply = await _say(client, seed, person, "/desktop hand-back relay-1")
    assert reply["payload"]["outcome"] == "handed_back"
    assert (await app.state.parts.control.state(key))["state"] == "idle"
    reply = await _say(client, seed, person, "/desktop stop-agent")
    assert (reply["payload"]["outcome"], reply["text"]) == (
        "no_agent",
        "No agent is acting on the desktop on relay-1.",
    )
    assert await _agent_acts(app, seed) == "ok"
    reply = await _say(client, seed, person, "/desktop stop-agent")
    assert reply["payload"]["outcome"] == "agent_stopped"
    assert reply["text"] == (
        f"Stopped bot on relay-1: its run ended and its input is refused for {COOLDOWN_S:g} s."
    )
    assert await _agent_acts(app, seed) == "stopped_by_user"
    reply = await _say(client, seed, tokens["reader"], "/desktop take")
    assert reply["payload"]["outcome"] == "error"
    assert reply["payload"]["error"]["code"] == "forbidden"
    await app.state.parts.inventory.record_ended(
        RelayId(seed.relay["relay_id"]), SESSION, "stopped", "stopped by alice"
    )
    reply = await _say(client, seed, person, "/desktop take")
    assert reply["payload"]["outcome"] == "not_running"
    assert reply["text"] == (
        "No desktop is running on relay-1; nothing to control. /desktop relay-1 starts one."
    )


async def test_a_spent_grant_expires_and_a_new_one_is_minted(tmp_path: Path) -> None:
    seed = await seed_database(tmp_path / "data")
    overrides = '{"relay-1": {"budget": 2, "idle_s": 60}}'
    async with inprocess_server(seed, agent_grant_relays=overrides) as (app, _):
        relay = RelayId(seed.relay["relay_id"])
        row = {"desktop_session_id": SESSION, "kind": "virtual", "slot": "main"}
        await app.state.parts.inventory.record_started(relay, row)
        assert [await _agent_acts(app, seed) for _ in range(3)] == ["ok", "ok", "ok"]
        rows = [r for r in await app.state.parts.store.list_audit() if r.op == "agent.grant"]
        assert [(r.outcome, r.reason) for r in rows] == [
            ("created", None),
            ("expired", "budget"),
            ("created", None),
        ]
        assert rows[0].details is not None and rows[0].details["budget"] == 2


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("not json", "is not JSON"),
        ('["relay-1"]', "JSON object"),
        ('{"relay-1": 5}', "'relay-1' must map to an object"),
        ('{"relay-1": {"budgets": 5}}', "'relay-1' has 'budgets'"),
        ('{"relay-1": {"budget": 0}}', "'relay-1' budget must be a number from 1"),
        ('{"relay-1": {"budget": 2.5}}', "'relay-1' budget"),
        ('{"relay-1": {"idle_s": true}}', "'relay-1' idle_s"),
    ],
)
def test_a_bad_per_relay_grant_setting_stops_the_server_naming_it(raw: str, problem: str) -> None:
    settings = Settings(secret_key="k", agent_grant_relays=raw)
    with pytest.raises(ConfigError, match="RELAYDESK_AGENT_GRANT_RELAYS") as refused:
        check_settings(settings)
    assert problem in str(refused.value)


async def test_stop_holds_the_agent_in_its_slot_after_the_desktop_ends(server: Any) -> None:
    app, client, seed, _ = server
    relay = RelayId(seed.relay["relay_id"])
    inventory = app.state.parts.inventory
    assert await _agent_acts(app, seed) == "ok"
    person = await _as_person(client, seed)
    status, body = await _action(client, person, "agent_stop", seed.conversation_id)
    assert (status, body["stopped"]) == (200, ["bot"])
    await inventory.record_ended(relay, SESSION, "stopped", "stopped by alice")
    row = {"desktop_session_id": "f" * 32, "kind": "virtual", "slot": "main"}
    await inventory.record_started(relay, row)
    assert await _agent_acts(app, seed) == "stopped_by_user"  # a new desktop, the same slot
    assert await _agent_acts(app, seed, "other-agent") == "ok"
    await wait_until(lambda: _ok(app, seed), 5, "the cooldown to end")
