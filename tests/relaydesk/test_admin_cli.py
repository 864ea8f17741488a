"""``relaydesk admin`` revocation commands, run as an operator runs them, against a live server.

Every command is a real ``python -m relaydesk admin …`` process on the server's database; what
it changed is checked where a user meets it: the HTTP API of a server running in-process.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import text

from relaydesk.cli import build_parser
from server.auth.dependencies import SESSION_COOKIE
from server.db.cache import READ_CACHE_TTL_S
from server.db.engine import create_engine
from server.db.store import Store
from tests.support.processes import scaled
from tests.support.stack import Seed, inprocess_server, seed_database, wait_until

pytestmark = pytest.mark.integration

# The bound a revocation made elsewhere takes, plus time for a request round trip.
BOUND_S = READ_CACHE_TTL_S + scaled(1.0)


@dataclass
class Cli:
    returncode: int
    stdout: str
    stderr: str

    @property
    def error(self) -> str:
        """The last line on stderr (the first names the database the command used)."""
        return self.stderr.strip().splitlines()[-1]

    def json(self) -> Any:
        assert self.returncode == 0, self.stderr
        return json.loads(self.stdout)


async def admin_cli(seed: Seed, *args: str) -> Cli:
    """``relaydesk admin ARGS`` on the seed's database, as a separate process."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relaydesk",
        "admin",
        *args,
        env={**os.environ, **seed.env()},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), scaled(60))
    assert process.returncode is not None
    return Cli(process.returncode, out.decode(), err.decode())


@pytest_asyncio.fixture
async def deployment(tmp_path: Path) -> AsyncIterator[tuple[Seed, httpx.AsyncClient]]:
    seed = await seed_database(tmp_path / "data")
    async with (
        inprocess_server(seed) as (_app, base),
        httpx.AsyncClient(base_url=base, timeout=scaled(10)) as client,
    ):
        yield seed, client


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _me(client: httpx.AsyncClient, headers: dict[str, str]) -> int:
    return (await client.get("/api/v1/me", headers=headers)).status_code


async def _login(client: httpx.AsyncClient, seed: Seed) -> httpx.Response:
    body = {"username": "alice", "password": seed.user["password"]}
    response = await client.post("/api/v1/login", json=body)
    client.cookies.clear()  # each request below names the cookie it means
    return response


async def _refused_within_bound(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    """``/me`` answers 401 with these credentials within the bound, and keeps doing so."""
    started = time.monotonic()
    await wait_until(lambda: _refused(client, headers), BOUND_S, "the credential to be refused")
    assert time.monotonic() - started <= BOUND_S
    assert await _me(client, headers) == 401


async def _refused(client: httpx.AsyncClient, headers: dict[str, str]) -> bool:
    return await _me(client, headers) == 401


# -- API tokens -------------------------------------------------------------------------


async def test_list_tokens_shows_tokens_but_never_a_secret(
    deployment: tuple[Seed, httpx.AsyncClient],
) -> None:
    seed, _client = deployment
    assert (await admin_cli(seed, "create-token", "alice", "--json")).json()["token"]
    listed = (await admin_cli(seed, "list-tokens", "--json")).json()
    assert [row["user"] for row in listed] == ["alice", "alice"]
    assert set(listed[0]) >= {"token_id", "name", "user", "created_at", "last_used_at", "revoked"}
    assert not any(row["revoked"] for row in listed)
    for args in (("list-tokens", "--json"), ("list-tokens", "alice"), ("list-tokens",)):
        shown = await admin_cli(seed, *args)
        assert shown.returncode == 0, shown.stderr
        assert "rdk_" not in shown.stdout + shown.stderr
        assert seed.api_token not in shown.stdout + shown.stderr
    assert (await admin_cli(seed, "list-tokens", "nobody")).returncode == 1


async def test_a_revoked_token_is_refused_by_the_api_within_the_bound(
    deployment: tuple[Seed, httpx.AsyncClient],
) -> None:
    seed, client = deployment
    headers = _bearer(seed.api_token)
    assert await _me(client, headers) == 200  # the server now caches this token's answer
    [token] = (await admin_cli(seed, "list-tokens", "alice", "--json")).json()
    revoked = (await admin_cli(seed, "revoke-token", token["token_id"], "--json")).json()
    assert revoked == {
        "token_id": token["token_id"],
        "name": token["name"],
        "revoked": True,
        "was_live": True,
    }
    await _refused_within_bound(client, headers)
    [listed] = (await admin_cli(seed, "list-tokens", "--json")).json()
    assert listed["revoked"] and listed["last_used_at"] is not None
    again = (await admin_cli(seed, "revoke-token", token["token_id"], "--json")).json()
    assert again["was_live"] is False
    missing = await admin_cli(seed, "revoke-token", "f" * 32)
    assert missing.returncode == 1
    assert missing.error.startswith("relaydesk: no API token") and "Traceback" not in missing.stderr


async def test_a_token_is_named_listed_and_revoked_by_its_name(
    deployment: tuple[Seed, httpx.AsyncClient],
) -> None:
    seed, client = deployment
    made = (await admin_cli(seed, "create-token", "alice", "--name", "ci-bot", "--json")).json()
    assert (made["name"], made["expires_at"], made["read_only"]) == ("ci-bot", None, False)
    again = await admin_cli(seed, "create-token", "alice", "--name", "ci-bot")
    assert again.returncode == 1 and "already has a live API token named 'ci-bot'" in again.error
    unnamed = (await admin_cli(seed, "create-token", "alice", "--json")).json()
    assert unnamed["name"] != "ci-bot" and unnamed["name"].startswith("default")

    table = await admin_cli(seed, "list-tokens", "alice")
    assert "ci-bot" in table.stdout and "EXPIRES_AT" in table.stdout
    assert made["token"] not in table.stdout + table.stderr

    assert await _me(client, _bearer(made["token"])) == 200
    secret = await admin_cli(seed, "revoke-token", made["token"])
    assert secret.returncode == 2 and "that is the token itself" in secret.stderr
    revoked = (await admin_cli(seed, "revoke-token", "ci-bot", "--json")).json()
    assert revoked["token_id"] == made["token_id"] and revoked["was_live"] is True
    await _refused_within_bound(client, _bearer(made["token"]))
    assert await _me(client, _bearer(unnamed["token"])) == 200, "only the named one"
    audit = json.dumps((await admin_cli(seed, "audit", "--json")).json())
    assert made["token"] not in audit and unnamed["token"] not in audit
    assert '"op": "admin.revoke-token"' in audit


async def test_an_expired_token_answers_401_token_expired(
    deployment: tuple[Seed, httpx.AsyncClient],
) -> None:
    seed, client = deployment
    made = (await admin_cli(seed, "create-token", "alice", "--expires-in", "1s", "--json")).json()
    assert made["expires_at"] is not None

    async def expired() -> bool:
        answer = await client.get("/api/v1/conversations", headers=_bearer(made["token"]))
        return answer.status_code == 401 and answer.json()["error"]["code"] == "token_expired"

    await wait_until(expired, 30, "the token to expire")
    answer = await client.get("/api/v1/me", headers=_bearer(made["token"]))
    assert answer.status_code == 401 and "has expired" in answer.json()["error"]["message"]
    assert await _me(client, _bearer(seed.api_token)) == 200, "other tokens are unaffected"
    bad = await admin_cli(seed, "create-token", "alice", "--expires-in", "soon")
    assert bad.returncode == 2 and "not a duration" in bad.stderr


async def test_a_read_only_token_is_refused_every_write_naming_its_scope(
    deployment: tuple[Seed, httpx.AsyncClient],
) -> None:
    seed, client = deployment
    made = (await admin_cli(seed, "create-token", "alice", "--read-only", "--json")).json()
    assert made["read_only"] is True
    headers, cid = _bearer(made["token"]), seed.conversation_id

    listed = await client.post(
        "/api/v1/actions/desktop_list_active", json={"conversation_id": cid}, headers=headers
    )
    assert listed.status_code == 200, listed.text
    started = await client.post(
        "/api/v1/actions/desktop_start", json={"conversation_id": cid}, headers=headers
    )
    assert started.status_code == 403, started.text
    assert "read-only (scope read_only)" in started.json()["error"]["message"]
    said = await client.post(
        f"/api/v1/conversations/{cid}/messages", json={"text": "hello"}, headers=headers
    )
    assert said.status_code == 403 and "scope read_only" in said.json()["error"]["message"]
    [conversation] = (await client.get("/api/v1/conversations", headers=headers)).json()[
        "conversations"
    ]
    assert conversation["role"] == "read"
    tools = await _mcp_tools(client, cid, headers)
    assert "desktop_list_active" in tools and "desktop_start" not in tools


async def test_a_conversation_scoped_token_is_refused_other_conversations(
    deployment: tuple[Seed, httpx.AsyncClient],
) -> None:
    seed, client = deployment
    other = await admin_cli(
        seed, "create-conversation", "Other", "--member", "alice:owner", "--json"
    )
    other_id = other.json()["conversation_id"]
    made = await admin_cli(
        seed, "create-token", "alice", "--conversation", seed.conversation_id, "--json"
    )
    token = made.json()
    assert token["conversation"] == seed.conversation_id
    headers = _bearer(token["token"])

    mine = await client.post(
        "/api/v1/actions/desktop_list_active",
        json={"conversation_id": seed.conversation_id},
        headers=headers,
    )
    assert mine.status_code == 200, mine.text
    theirs = await client.post(
        "/api/v1/actions/desktop_list_active", json={"conversation_id": other_id}, headers=headers
    )
    assert theirs.status_code == 403, theirs.text
    assert "limited to conversation" in theirs.json()["error"]["message"]
    listed = (await client.get("/api/v1/conversations", headers=headers)).json()
    assert [c["conversation_id"] for c in listed["conversations"]] == [seed.conversation_id]
    page = await client.get(f"/api/v1/conversations/{other_id}/messages", headers=headers)
    assert page.status_code == 403 and "scope conversation" in page.json()["error"]["message"]
    mcp = await client.post(
        f"/api/v1/conversations/{other_id}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        headers={**headers, "Accept": "application/json, text/event-stream"},
    )
    assert mcp.status_code == 404
    missing = await admin_cli(seed, "create-token", "alice", "--conversation", "0" * 32)
    assert missing.returncode == 1 and "no conversation" in missing.error
    # The user's own membership is unchanged: an unscoped token still reaches both.
    both = (await client.get("/api/v1/conversations", headers=_bearer(seed.api_token))).json()
    assert len(both["conversations"]) == 2


async def _mcp_tools(client: httpx.AsyncClient, cid: str, headers: dict[str, str]) -> list[str]:
    accept = {**headers, "Accept": "application/json, text/event-stream"}
    url = f"/api/v1/conversations/{cid}/mcp"
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    assert (await client.post(url, json=init, headers=accept)).status_code == 200
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    answer = await client.post(url, json=listing, headers=accept)
    assert answer.status_code == 200, answer.text
    return [tool["name"] for tool in answer.json()["result"]["tools"]]


# -- users ------------------------------------------------------------------------------


async def test_a_disabled_user_cannot_log_in_and_their_cookie_and_token_stop_working(
    deployment: tuple[Seed, httpx.AsyncClient],
) -> None:
    seed, client = deployment
    login = await _login(client, seed)
    assert login.status_code == 200
    cookie = {"Cookie": f"{SESSION_COOKIE}={login.cookies[SESSION_COOKIE]}"}
    assert await _me(client, cookie) == 200
    assert await _me(client, _bearer(seed.api_token)) == 200

    disabled = (await admin_cli(seed, "disable-user", "alice", "--json")).json()
    assert disabled["disabled"] and disabled["changed"]
    assert await _me(client, cookie) == 401, "a web session ends on the next request"
    assert (await _login(client, seed)).status_code == 401
    await _refused_within_bound(client, _bearer(seed.api_token))
    [alice] = (await admin_cli(seed, "list", "users", "--json")).json()
    assert alice["disabled"] is True

    assert (await admin_cli(seed, "enable-user", "alice", "--json")).json()["changed"]
    assert (await _login(client, seed)).status_code == 200
    assert await _me(client, _bearer(seed.api_token)) == 200
    assert await _me(client, cookie) == 401, "sessions ended by disabling stay ended"
    missing = await admin_cli(seed, "disable-user", "nobody")
    assert (missing.returncode, missing.error) == (1, "relaydesk: no user 'nobody'")


# -- relays -----------------------------------------------------------------------------


async def _status(client: httpx.AsyncClient, seed: Seed) -> httpx.Response:
    body = {"conversation_id": seed.conversation_id, "relay": seed.relay["name"]}
    return await client.post(
        "/api/v1/actions/desktop_status", json=body, headers=_bearer(seed.api_token)
    )


async def test_an_unshared_relay_disappears_from_the_conversation(
    deployment: tuple[Seed, httpx.AsyncClient],
) -> None:
    seed, client = deployment
    assert (await _status(client, seed)).status_code != 404  # visible (not connected: 502)
    args = ("unshare-relay", seed.relay["name"], seed.conversation_id, "--json")
    assert (await admin_cli(seed, *args)).json()["was_shared"] is True

    async def hidden() -> bool:
        response = await _status(client, seed)
        return response.status_code == 404 and response.json()["error"]["code"] == (
            "relay_not_found"
        )

    await wait_until(hidden, BOUND_S, "the unshared relay to be 404 in the conversation")
    [conversation] = (await admin_cli(seed, "list", "conversations", "--json")).json()
    assert conversation["relays"] == []
    assert (await admin_cli(seed, *args)).json()["was_shared"] is False
    unknown = await admin_cli(seed, "unshare-relay", seed.relay["name"], "nope")
    assert (unknown.returncode, unknown.error) == (1, "relaydesk: no conversation 'nope'")


async def _relay_row(seed: Seed, name: str) -> dict[str, Any]:
    relays = (await admin_cli(seed, "list", "relays", "--json")).json()
    [row] = [r for r in relays if r["name"] == name]
    return dict(row)


async def test_co_located_flag_is_set_at_registration_and_changed_later(tmp_path: Path) -> None:
    seed = await seed_database(tmp_path / "data")
    assert (await _relay_row(seed, "relay-1"))["co_located"] is False
    args = ("add-relay", "beside", "--owner", "alice", "--co-located", "--json")
    assert (await admin_cli(seed, *args)).json()["co_located"] is True
    assert (await _relay_row(seed, "beside"))["co_located"] is True
    unset = (await admin_cli(seed, "set-relay", "beside", "--no-co-located", "--json")).json()
    assert unset["co_located"] is False
    assert (await _relay_row(seed, "beside"))["co_located"] is False
    assert (await admin_cli(seed, "set-relay", "beside")).returncode == 2  # says nothing to set


async def test_rotating_and_revoking_a_relay_token(tmp_path: Path) -> None:
    seed = await seed_database(tmp_path / "data")
    rotated = (await admin_cli(seed, "rotate-relay-token", "relay-1", "--json")).json()
    assert rotated["token"].startswith("rdr_") and rotated["token"] != seed.relay_token
    store = await Store.open(seed.database_url)
    try:
        assert await store.authenticate_relay(seed.relay_token) is None
        assert await store.authenticate_relay(rotated["token"]) is not None
        assert (await admin_cli(seed, "revoke-relay", "relay-1", "--json")).json()["revoked"]
        assert await store.authenticate_relay(rotated["token"]) is None
    finally:
        await store.close()
    assert (await _relay_row(seed, "relay-1"))["revoked"] is True
    human = await admin_cli(seed, "rotate-relay-token", "relay-1")
    assert human.returncode == 0 and re.search(r"^token:\s+rdr_", human.stdout, re.M), (
        "printed once, to the operator"
    )
    missing = await admin_cli(seed, "revoke-relay", "nope")
    assert (missing.returncode, missing.error) == (1, "relaydesk: no relay 'nope'")


# -- sessions ---------------------------------------------------------------------------


async def _sessions(store: Store, user_id: str) -> tuple[str, str]:
    """An expired and a live web session of the user (secrets)."""
    expired, _ = await store.create_web_session(user_id, ttl_s=0)
    live, _ = await store.create_web_session(user_id, ttl_s=3600)
    return expired, live


async def _session_rows(url: str) -> int:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return int((await conn.execute(text("SELECT count(*) FROM web_sessions"))).scalar_one())
    finally:
        await engine.dispose()


async def test_purge_sessions_removes_expired_and_keeps_live(tmp_path: Path) -> None:
    seed = await seed_database(tmp_path / "data")
    store = await Store.open(seed.database_url)
    try:
        _expired, live = await _sessions(store, seed.user["user_id"])
        await store.create_login_link(seed.user["user_id"], ttl_s=0)
        assert (await admin_cli(seed, "purge-sessions", "--json")).json() == {"purged": 2}
        assert await store.get_web_session(live) is not None
        assert await store.purge_expired_sessions() == 0
    finally:
        await store.close()


async def test_the_server_purges_expired_sessions_on_a_schedule(tmp_path: Path) -> None:
    seed = await seed_database(tmp_path / "data")
    store = await Store.open(seed.database_url)
    try:
        _expired, live = await _sessions(store, seed.user["user_id"])
        assert await _session_rows(seed.database_url) == 2
        async with inprocess_server(seed, session_purge_interval_s=0.2):
            # Expired before the server started: the first run at start-up or the next.
            await _sessions(store, seed.user["user_id"])  # expires while it runs
            await wait_until(
                lambda: _only_live_left(seed.database_url, 2),
                10,
                "the server to purge the expired sessions",
            )
        assert await store.get_web_session(live) is not None
    finally:
        await store.close()


async def _only_live_left(url: str, live: int) -> bool:
    return await _session_rows(url) == live


# -- help -------------------------------------------------------------------------------

# Each command and the arguments its --help must explain.
COMMANDS = {
    "list-tokens": ("user",),
    "revoke-token": ("TOKEN", "--user"),
    "create-token": ("user", "--name", "--expires-in", "--read-only", "--conversation"),
    "revoke-relay": ("relay",),
    "rotate-relay-token": ("relay",),
    "disable-user": ("user",),
    "enable-user": ("user",),
    "unshare-relay": ("relay", "conversation"),
    "set-relay": ("relay", "--co-located, --no-co-located"),
    "add-relay": ("--co-located",),
    "purge-sessions": ("--json",),
    "set-conversation": ("conversation", "--record, --no-record"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_explains_itself_and_its_arguments(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["admin", command, "--help"])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[lines.index("") + 1].strip(), "a description under the usage line"
    for argument in COMMANDS[command]:
        # The last mention: the usage lines above may name it too.
        line = max(i for i, text in enumerate(lines) if text.strip().startswith(argument))
        explained = lines[line].strip()[len(argument) :].strip() or lines[line + 1].strip()
        assert explained, f"{command} {argument} has no help text"


# -- the audit log -----------------------------------------------------------------------------


async def test_administrative_changes_are_audited_and_reads_are_not(tmp_path: Path) -> None:
    seed = await seed_database(tmp_path / "data")
    created = await admin_cli(seed, "create-user", "carol", "--json")
    assert created.returncode == 0, created.stderr
    assert (await admin_cli(seed, "disable-user", "carol")).returncode == 0
    assert (await admin_cli(seed, "set-relay", "relay-1", "--co-located")).returncode == 0
    assert (await admin_cli(seed, "revoke-relay", "nope")).returncode == 1
    assert (await admin_cli(seed, "list", "users")).returncode == 0

    rows = (await admin_cli(seed, "audit", "--json")).json()
    changes = [(r["op"], r["outcome"]) for r in rows if r["op"].startswith("admin.")]
    assert sorted(changes) == [
        ("admin.create-user", "ok"),
        ("admin.disable-user", "ok"),
        ("admin.revoke-relay", "refused"),
        ("admin.set-relay", "ok"),
    ]
    made = next(r for r in rows if r["op"] == "admin.create-user")
    assert made["actor"].startswith("cli:") and made["source"] == "cli"
    assert made["details"] == {"name": "carol", "admin": False}
    assert created.json()["password"] not in json.dumps(rows), "no secret in the audit log"
