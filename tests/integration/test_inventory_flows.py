"""Inventory, typed actions and compare-and-stop against a real relay running real desktops.

One in-process server and one relay subprocess serve the whole module (each desktop start costs
about a second). Tests run in file order; the relay-kill test and the secret scan come last.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import pytest_asyncio

from server import admin
from server.db.records import Role, parse_role
from server.db.store import Store
from tests.support.processes import ManagedProcess, ProcessTracker, scaled
from tests.support.sse import open_sse
from tests.support.stack import Seed, inprocess_server, seed_database, start_relay, wait_until
from wire.ids import RelayId

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

ROLES = ("none", "read", "write", "owner")
ACTIONS = (
    "desktop_list_active",
    "desktop_start",
    "desktop_status",
    "desktop_attach",
    "desktop_stop_request",
    "desktop_stop_confirm",
)
NEEDS_WRITE = {"desktop_start", "desktop_attach", "desktop_stop_confirm"}
BOGUS_SESSION = "0" * 32


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@dataclass
class Stack:
    app: Any
    url: str
    seed: Seed
    tracker: ProcessTracker
    relay: ManagedProcess
    tokens: dict[str, str]
    secrets: list[str]
    logs: Capture
    client: httpx.AsyncClient = field(init=False)

    @property
    def relay_id(self) -> RelayId:
        return RelayId(self.seed.relay["relay_id"])

    async def call(self, name: str, role: str = "owner", **args: Any) -> tuple[int, Any]:
        args.setdefault("conversation_id", self.seed.conversation_id)
        response = await self.client.post(
            f"/api/v1/actions/{name}",
            json=args,
            headers={"Authorization": f"Bearer {self.tokens[role]}"},
        )
        return response.status_code, response.json()

    async def audit(self) -> list[Any]:
        return list(await self.app.state.parts.store.list_audit(limit=10_000))


async def _role_users(seed: Seed) -> tuple[dict[str, str], list[str]]:
    store = await Store.open(seed.database_url)
    tokens = {"owner": seed.api_token}
    secrets = [seed.api_token, seed.relay_token, seed.user["password"]]
    try:
        roles: tuple[Role, ...] = ("read", "write")
        for role in ("none", *roles):
            user = await admin.create_user(store, f"user-{role}")
            secrets.append(user["password"])
            tokens[role] = (await admin.create_token(store, f"user-{role}"))["token"]
            if role in roles:
                await store.add_member(seed.conversation_id, user["user_id"], parse_role(role))
    finally:
        await store.close()
    return tokens, [*secrets, *tokens.values()]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    root = tmp_path_factory.mktemp("inventory")
    seed = await seed_database(root / "data")
    tokens, secrets = await _role_users(seed)
    capture = Capture()
    root_logger = logging.getLogger()
    level = root_logger.level
    root_logger.setLevel(logging.INFO)
    root_logger.addHandler(capture)
    tracker = ProcessTracker(root / "processes")
    try:
        async with inprocess_server(seed) as (app, url):
            relay = start_relay(tracker.start, seed, url)
            stack = Stack(app, url, seed, tracker, relay, tokens, secrets, capture)
            await wait_until(
                lambda: app.state.parts.relays.is_connected(stack.relay_id), 20, "relay"
            )
            async with httpx.AsyncClient(base_url=url, timeout=scaled(30)) as client:
                stack.client = client
                yield stack
                await _stop_everything(stack)
            tracker.cleanup()
    finally:
        root_logger.removeHandler(capture)
        root_logger.setLevel(level)
        for process in tracker.processes:
            print(f"----- {process.name}: {process.log_tail(1500)}")


async def _stop_everything(stack: Stack) -> None:
    """Leave no desktop behind: compare-and-stop every live row (relays may have restarted)."""
    for row in await stack.app.state.parts.inventory.live_rows(stack.relay_id):
        await stack.call(
            "desktop_stop_confirm",
            relay="relay-1",
            kind=row.kind,
            slot=row.slot,
            desktop_session_id=row.desktop_session_id,
        )


async def _running_main(stack: Stack) -> dict[str, Any]:
    status, body = await stack.call("desktop_start", slot="main")
    assert status == 200, body
    return dict(body["desktop"])


async def test_full_flow_start_list_attach_stop(stack: Stack) -> None:
    status, started = await stack.call("desktop_start", slot="flow")
    assert status == 200, started
    desktop = started["desktop"]
    session = desktop["desktop_session_id"]
    assert desktop["state"] == "running" and desktop["relay_name"] == "relay-1"
    # Absolute (the server's listen address, no public URL set): an agent opens it as given.
    assert started["viewer_url"].startswith(f"{stack.url}/vnc/{session}/")
    # (urllib, not httpx: httpx logs the URL it gets, and the logs must hold no capability)
    page = await asyncio.to_thread(urllib.request.urlopen, started["viewer_url"], None, scaled(10))
    with page:
        assert page.status == 200 and "text/html" in page.headers["Content-Type"]

    status, listed = await stack.call("desktop_list_active")
    assert status == 200
    assert session in [row["desktop_session_id"] for row in listed["desktops"]]

    status, attached = await stack.call("desktop_attach", slot="flow")
    assert status == 200 and attached["desktop"]["desktop_session_id"] == session

    status, request = await stack.call("desktop_stop_request", slot="flow", role="read")
    assert status == 200 and request["confirm_required"] is True
    assert request["desktop"]["desktop_session_id"] == session
    confirm_args = request["confirm"]["args"]

    status, stopped = await stack.call("desktop_stop_confirm", **confirm_args)
    assert status == 200 and stopped["stopped"] is True, stopped
    assert stopped["desktop"]["state"] == "stopped"

    # the acknowledgement was "lost": the same confirmation again is a harmless no-op
    status, again = await stack.call("desktop_stop_confirm", **confirm_args)
    assert (status, again["ok"], again["was_running"]) == (200, True, False)

    status, listed = await stack.call("desktop_list_active", probe=True)
    assert session not in [row["desktop_session_id"] for row in listed["desktops"]]
    assert listed["probes"] == {"relay-1": "ok"}
    status, attached = await stack.call("desktop_attach", slot="flow")
    assert (status, attached["error"]["code"]) == (409, "not_running")

    ops = [(a.op, a.outcome) for a in await stack.audit() if a.desktop_session_id == session]
    assert ops == [
        ("desktop.start", "ok"),
        ("desktop.attach", "ok"),
        ("desktop.stop_request", "ok"),
        ("agent.grant", "created"),  # an API token's stop passes the control gate
        ("desktop.stop_confirm", "stopped"),
        ("desktop.stop_confirm", "was_not_running"),
    ]


async def test_a_stale_confirmation_never_stops_the_newer_session(stack: Stack) -> None:
    rng = random.Random(4)
    status, body = await stack.call("desktop_start", slot="race")
    assert status == 200
    current = body["desktop"]["desktop_session_id"]
    for round_no in range(20):
        stale = {
            "relay": "relay-1",
            "kind": "virtual",
            "slot": "race",
            "desktop_session_id": current,
        }
        # someone else stops A and starts B in the same slot, with real timing jitter
        status, _ = await stack.call("desktop_stop_confirm", role="write", **stale)
        assert status == 200
        if round_no % 2:
            # the stale confirmation races B's start: the relay's lock decides either way
            started, confirmed = await asyncio.gather(
                stack.call("desktop_start", slot="race"),
                _after(rng.uniform(0, 0.3), stack.call("desktop_stop_confirm", **stale)),
            )
            assert started[0] == 200
            assert confirmed[0] in (200, 409), confirmed
            if confirmed[0] == 200:
                assert confirmed[1]["was_running"] is False
        else:
            started = await stack.call("desktop_start", slot="race")
            assert started[0] == 200
            confirmed = await stack.call("desktop_stop_confirm", **stale)
            assert confirmed[0] == 409, confirmed
        newer = started[1]["desktop"]["desktop_session_id"]
        assert newer != current
        if confirmed[0] == 409:
            assert confirmed[1]["error"]["code"] == "session_conflict"
            assert confirmed[1]["error"]["current_session_id"] == newer
        status, rows = await stack.call("desktop_status")
        running = [r["desktop_session_id"] for r in rows["desktops"] if r["slot"] == "race"]
        assert running == [newer], f"round {round_no}: B must keep running"
        current = newer
    status, _ = await stack.call(
        "desktop_stop_confirm", relay="relay-1", slot="race", desktop_session_id=current
    )
    assert status == 200
    conflicts = [a for a in await stack.audit() if a.outcome == "conflict"]
    assert len(conflicts) >= 10


async def _after(delay: float, call: Any) -> Any:
    await asyncio.sleep(delay)  # deliberate jitter, not a readiness wait
    return await call


def _expected(action: str, role: str) -> int | None:
    """403 when the role is too weak; None: authorised (any non-auth answer)."""
    if role == "none" or (role == "read" and action in NEEDS_WRITE):
        return 403
    return None


async def test_role_matrix_for_every_action(stack: Stack) -> None:
    main = await _running_main(stack)
    args: dict[str, dict[str, Any]] = {
        "desktop_list_active": {},
        "desktop_start": {"slot": "main"},  # already running: no new desktop
        "desktop_status": {},
        "desktop_attach": {"slot": "main"},
        "desktop_stop_request": {"slot": "main"},
        "desktop_stop_confirm": {
            "relay": "relay-1",
            "slot": "main",
            "desktop_session_id": BOGUS_SESSION,
        },
    }
    outcomes = {}
    for action in ACTIONS:
        for role in ROLES:
            status, body = await stack.call(action, role=role, **args[action])
            outcomes[(action, role)] = status
            expected = _expected(action, role)
            if expected is not None:
                assert status == expected and body["error"]["code"] == "forbidden", (action, role)
            else:
                assert status in (200, 409), (action, role, body)
    assert outcomes[("desktop_stop_confirm", "write")] == 409
    status, rows = await stack.call("desktop_status")
    assert main["desktop_session_id"] in [r["desktop_session_id"] for r in rows["desktops"]]


async def test_missing_conversation_id_is_400_on_every_action(stack: Stack) -> None:
    names = [
        a["name"]
        for a in (
            await stack.client.get(
                "/api/v1/actions", headers={"Authorization": f"Bearer {stack.tokens['read']}"}
            )
        ).json()["actions"]
    ]
    assert set(ACTIONS) <= set(names)
    for name in names:
        response = await stack.client.post(
            f"/api/v1/actions/{name}",
            json={"relay": "relay-1"},
            headers={"Authorization": f"Bearer {stack.tokens['owner']}"},
        )
        body = response.json()
        assert response.status_code == 400, (name, body)
        assert body["error"]["field"] == "conversation_id"


BAD_INPUTS: list[tuple[str, Any, int, str, str | None]] = [
    # action, body (dict, or raw bytes), status, code, field
    ("desktop_nope", {}, 404, "not_found", None),
    ("desktop_start", b"{not json", 400, "invalid_args", "body"),
    ("desktop_start", b"[1, 2]", 400, "invalid_args", "body"),
    ("desktop_start", {"slot": "Main Slot"}, 400, "invalid_args", "slot"),
    ("desktop_start", {"depth": "24"}, 400, "invalid_args", "depth"),
    ("desktop_start", {"audio": "yes"}, 400, "invalid_args", "audio"),
    ("desktop_start", {"colour": "blue"}, 400, "invalid_args", "colour"),
    ("desktop_start", {"relay": "no-such-relay"}, 404, "relay_not_found", None),
    ("desktop_attach", {"desktop_session_id": BOGUS_SESSION}, 409, "not_running", None),
    (
        "desktop_stop_request",
        {"desktop_session_id": "x" * 80},
        400,
        "invalid_args",
        "desktop_session_id",
    ),
    ("desktop_stop_confirm", {"relay": "relay-1"}, 400, "invalid_args", "desktop_session_id"),
    (
        "desktop_stop_confirm",
        {"relay": "relay-1", "slot": "nobody-here", "desktop_session_id": BOGUS_SESSION},
        200,
        "",
        None,
    ),
    ("desktop_list_active", {"probe": 1}, 400, "invalid_args", "probe"),
]


async def test_bad_input_gets_structured_errors_and_changes_nothing(stack: Stack) -> None:
    before = await stack.app.state.parts.inventory.live_rows(stack.relay_id)
    audit_before = len(await stack.audit())
    audited = 0
    for name, body, status, code, field_name in BAD_INPUTS:
        headers = {"Authorization": f"Bearer {stack.tokens['owner']}"}
        if isinstance(body, bytes):
            json_type = {**headers, "Content-Type": "application/json"}
            response = await stack.client.post(
                f"/api/v1/actions/{name}", content=body, headers=json_type
            )
        else:
            body = {"conversation_id": stack.seed.conversation_id, **body}
            response = await stack.client.post(
                f"/api/v1/actions/{name}", json=body, headers=headers
            )
        reply = response.json()
        assert response.status_code == status, (name, body, reply)
        audited += name != "desktop_nope" and name.startswith(
            ("desktop_start", "desktop_attach", "desktop_stop")
        )
        if status == 200:
            assert reply["was_running"] is False
            continue
        assert reply["ok"] is False and reply["error"]["code"] == code, reply
        assert reply["error"]["message"]
        if field_name is not None:
            assert reply["error"]["field"] == field_name
        if name == "desktop_nope":
            assert "desktop_start" in reply["error"]["actions"]
    huge = b'{"conversation_id": "' + b"x" * (stack.app.state.parts.settings.max_body_bytes) + b'"}'
    response = await stack.client.post(
        "/api/v1/actions/desktop_start",
        content=huge,
        headers={"Authorization": f"Bearer {stack.tokens['owner']}"},
    )
    assert response.status_code == 413 and response.json()["ok"] is False
    audited += 1
    response = await stack.client.post("/api/v1/actions/desktop_list_active", json={})
    assert response.status_code == 401
    assert await stack.app.state.parts.inventory.live_rows(stack.relay_id) == before
    assert len(await stack.audit()) - audit_before == audited


async def test_a_killed_relay_turns_rows_unknown_then_reconciles(stack: Stack) -> None:
    main = await _running_main(stack)
    session = main["desktop_session_id"]
    headers = {"Authorization": f"Bearer {stack.tokens['read']}"}
    url = f"/api/v1/events?conversation_id={stack.seed.conversation_id}"
    async with open_sse(stack.client, url, headers) as sse:
        snapshot = await sse.next()
        assert snapshot.event == "desktop_inventory_changed"
        stack.relay.send_signal(signal.SIGKILL)
        event = await sse.next(timeout=stack.app.state.parts.settings.liveness_timeout_s + 1)
        assert event.event == "desktop_inventory_changed"
        states = {r["desktop_session_id"]: r["state"] for r in event.data["desktops"]}
        assert states[session] == "unknown"

        # an unknown row on an unreachable relay: 502, and it stays unknown
        status, body = await stack.call(
            "desktop_stop_confirm", relay="relay-1", slot="main", desktop_session_id=session
        )
        assert (status, body["error"]["code"]) == (502, "relay_unreachable")
        row = await stack.app.state.parts.inventory.row(stack.relay_id, session)
        assert row.state == "unknown"

        stack.relay = start_relay(stack.tracker.start, stack.seed, stack.url, name="relay-again")
        reconciled = await sse.next(timeout=30)
        row = await stack.app.state.parts.inventory.row(stack.relay_id, session)
        assert row.state in ("running", "stopped"), row
        if row.state == "stopped":
            assert row.reason == "relay_restarted"
        assert all(r["state"] != "unknown" for r in reconciled.data["desktops"])


async def test_no_secret_in_audit_rows_or_logs(stack: Stack) -> None:
    rows = await stack.audit()
    assert rows, "the flows above must have been audited"
    text = "\n".join(repr(row) for row in rows) + "\n".join(stack.logs.lines)
    text += "".join(p.log_text() for p in stack.tracker.processes)
    for secret in stack.secrets:
        assert secret not in text
    assert "/vnc/" not in text, "viewer URLs carry a capability token"
    for marker in ("rdk_", "rdr_", "rds_", "password="):
        assert marker not in "\n".join(repr(row) for row in rows)
    assert any(line.startswith("[desktop-audit] op=") for line in stack.logs.lines)
