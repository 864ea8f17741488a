"""Store behaviour, identical on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from argon2 import PasswordHasher
from sqlalchemy import text

from server import admin
from server.db.audit import AuditRow
from server.db.engine import create_engine
from server.db.errors import AlreadyExists, InvalidValue, NotFound
from server.db.records import role_allows
from server.db.store import Store
from server.secrets.passwords import fast_hasher
from tests.support import postgres

pytestmark = pytest.mark.integration

# Fixtures shared with the other server suites.
database_url = postgres.database_url
postgres_cluster = postgres.postgres_cluster
sqlite_template = postgres.sqlite_template


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class CountingHasher(PasswordHasher):
    def __init__(self) -> None:
        cheap = fast_hasher()
        super().__init__(
            time_cost=cheap.time_cost, memory_cost=cheap.memory_cost, parallelism=cheap.parallelism
        )
        self.verifications = 0

    def verify(self, hash: str | bytes, password: str | bytes) -> Literal[True]:
        self.verifications += 1
        return super().verify(hash, password)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def hasher() -> CountingHasher:
    return CountingHasher()


@pytest.fixture
async def store(
    database_url: str, clock: FakeClock, hasher: CountingHasher
) -> AsyncIterator[Store]:
    opened = await Store.open(database_url, password_hasher=hasher, clock=clock)
    yield opened
    await opened.close()


async def _all_values(url: str, table: str) -> list[Any]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(text(f"SELECT * FROM {table}"))).all()  # noqa: S608
    finally:
        await engine.dispose()
    return [value for row in rows for value in row]


# -- users -----------------------------------------------------------------------------


async def test_ping_and_dialect(store: Store, database_url: str) -> None:
    assert await store.ping()
    assert store.dialect in database_url


async def test_create_and_get_user(store: Store) -> None:
    user = await store.create_user("alice", "s3cret-pass", is_admin=True)
    assert len(user.user_id) == 32
    assert user.is_admin
    assert user.created_at.tzinfo is not None
    assert await store.get_user(user.user_id) == user
    assert await store.get_user_by_name("alice") == user
    assert await store.get_user("0" * 32) is None
    assert [u.username for u in await store.list_users()] == ["alice"]


async def test_duplicate_username_is_rejected(store: Store) -> None:
    await store.create_user("alice", "one")
    with pytest.raises(AlreadyExists, match="alice"):
        await store.create_user("alice", "two")


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "-leading"])
async def test_bad_username_is_rejected(store: Store, name: str) -> None:
    with pytest.raises(InvalidValue):
        await store.create_user(name, "pw")


async def test_password_is_stored_as_argon2(store: Store, database_url: str) -> None:
    await store.create_user("alice", "plain-text-password")
    values = await _all_values(database_url, "users")
    assert "plain-text-password" not in values
    assert any(isinstance(v, str) and v.startswith("$argon2id$") for v in values)


async def test_verify_password(store: Store, hasher: CountingHasher) -> None:
    user = await store.create_user("alice", "right")
    assert await store.verify_password("alice", "right") == user
    assert await store.verify_password("alice", "wrong") is None
    before = hasher.verifications
    assert await store.verify_password("nobody", "right") is None
    # Unknown users cost one argon2 verification too, so timing does not reveal them.
    assert hasher.verifications == before + 1


async def test_set_password(store: Store) -> None:
    user = await store.create_user("alice", "old")
    await store.set_password(user.user_id, "new")
    assert await store.verify_password("alice", "old") is None
    assert await store.verify_password("alice", "new") == user
    with pytest.raises(NotFound):
        await store.set_password(user.user_id[::-1], "x")
    with pytest.raises(InvalidValue):
        await store.set_password(user.user_id, "")


# -- API tokens ------------------------------------------------------------------------


async def test_api_token_roundtrip(store: Store, clock: FakeClock, database_url: str) -> None:
    user = await store.create_user("alice", "pw")
    token, record = await store.create_api_token(user.user_id, "cli")
    assert token.startswith("rdk_")
    assert len(token) > 40
    assert record.last_used_at is None
    assert record.name == "cli"
    assert await store.authenticate_api_token(token) == user
    [listed] = await store.list_api_tokens(user.user_id)
    assert listed.last_used_at == clock.now
    values = await _all_values(database_url, "api_tokens")
    assert token not in values
    assert hashlib.sha256(token.encode()).hexdigest() in values


async def test_unknown_and_revoked_tokens_fail(store: Store) -> None:
    user = await store.create_user("alice", "pw")
    token, record = await store.create_api_token(user.user_id)
    assert await store.authenticate_api_token("rdk_" + "A" * 43) is None
    assert await store.authenticate_api_token("not-a-token") is None
    assert await store.revoke_api_token(record.token_id)
    assert not await store.revoke_api_token(record.token_id)
    assert await store.authenticate_api_token(token) is None


async def test_list_every_users_tokens_and_get_one(store: Store) -> None:
    alice = await store.create_user("alice", "pw")
    bob = await store.create_user("bob", "pw")
    _, first = await store.create_api_token(alice.user_id, "a")
    _, second = await store.create_api_token(bob.user_id, "b")
    listed = await store.list_api_tokens()
    assert {t.token_id for t in listed} == {first.token_id, second.token_id}
    assert await store.list_api_tokens(bob.user_id) == [second]
    assert await store.get_api_token(first.token_id) == first
    assert await store.get_api_token("f" * 32) is None


# -- disabled users --------------------------------------------------------------------


async def test_a_disabled_user_is_refused_everywhere_and_keeps_their_data(store: Store) -> None:
    alice = await store.create_user("alice", "pw")
    token, _ = await store.create_api_token(alice.user_id)
    secret, _ = await store.create_web_session(alice.user_id, ttl_s=60)
    link = await store.create_login_link(alice.user_id, ttl_s=60)
    conv = await store.create_conversation("Team", [(alice.user_id, "owner")])
    assert await store.authenticate_api_token(token) is not None  # cached from here on
    assert await store.disable_user(alice.user_id)
    assert not await store.disable_user(alice.user_id)  # already disabled
    assert await store.verify_password("alice", "pw") is None
    assert await store.get_web_session(secret) is None
    assert await store.authenticate_api_token(token) is None
    assert await store.consume_login_link(link) is None
    assert await store.get_role(conv.conversation_id, alice.user_id) is None
    kept = await store.get_user(alice.user_id)
    assert kept is not None and kept.disabled_at is not None
    assert [m.username for m in await store.list_members(conv.conversation_id)] == ["alice"]
    assert len(await store.list_api_tokens(alice.user_id)) == 1


async def test_an_enabled_user_is_let_in_again_but_old_sessions_stay_ended(store: Store) -> None:
    alice = await store.create_user("alice", "pw")
    token, _ = await store.create_api_token(alice.user_id)
    secret, _ = await store.create_web_session(alice.user_id, ttl_s=60)
    await store.disable_user(alice.user_id)
    assert await store.enable_user(alice.user_id)
    assert not await store.enable_user(alice.user_id)
    assert await store.verify_password("alice", "pw") is not None
    assert await store.authenticate_api_token(token) is not None
    assert await store.get_web_session(secret) is None
    with pytest.raises(NotFound):
        await store.disable_user("0" * 32)


async def test_token_for_unknown_user(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.create_api_token("f" * 32)


# -- web sessions and login links -----------------------------------------------------


async def test_web_session_lifecycle(store: Store, clock: FakeClock) -> None:
    user = await store.create_user("alice", "pw")
    secret, csrf = await store.create_web_session(user.user_id, ttl_s=60)
    session = await store.get_web_session(secret)
    assert session is not None
    assert session.user_id == user.user_id
    assert session.csrf_token == csrf
    assert csrf != secret
    assert csrf not in repr(session)
    assert await store.get_web_session(secret + "x") is None
    clock.advance(61)
    assert await store.get_web_session(secret) is None
    assert await store.purge_expired_sessions() == 1


async def test_purge_removes_expired_sessions_and_spent_links_and_keeps_live_ones(
    store: Store, clock: FakeClock, database_url: str
) -> None:
    user = await store.create_user("alice", "pw")
    await store.create_web_session(user.user_id, ttl_s=10)
    live, _ = await store.create_web_session(user.user_id, ttl_s=100)
    await store.create_login_link(user.user_id, ttl_s=10)
    used = await store.create_login_link(user.user_id, ttl_s=100)
    fresh = await store.create_login_link(user.user_id, ttl_s=100)
    assert await store.consume_login_link(used) is not None
    clock.advance(10)
    assert await store.purge_expired_sessions() == 3
    assert await store.purge_expired_sessions() == 0
    assert await store.get_web_session(live) is not None
    assert await store.consume_login_link(fresh) is not None
    assert len(await _all_values(database_url, "web_sessions")) == 5  # one row, five columns


async def test_delete_web_session(store: Store) -> None:
    user = await store.create_user("alice", "pw")
    secret, _ = await store.create_web_session(user.user_id, ttl_s=60)
    await store.delete_web_session(secret)
    assert await store.get_web_session(secret) is None


async def test_login_link_is_one_time(store: Store) -> None:
    user = await store.create_user("alice", "pw")
    token = await store.create_login_link(user.user_id, ttl_s=60)
    assert token.startswith("rdl_")
    assert await store.consume_login_link(token) == user
    assert await store.consume_login_link(token) is None


async def test_login_link_expires(store: Store, clock: FakeClock) -> None:
    user = await store.create_user("alice", "pw")
    token = await store.create_login_link(user.user_id, ttl_s=60)
    clock.advance(60)
    assert await store.consume_login_link(token) is None


# -- conversations ---------------------------------------------------------------------


async def test_conversation_roles(store: Store) -> None:
    alice = await store.create_user("alice", "pw")
    bob = await store.create_user("bob", "pw")
    carol = await store.create_user("carol", "pw")
    conv = await store.create_conversation(
        "Desktop", [(alice.user_id, "owner"), (bob.user_id, "read")]
    )
    assert await store.get_role(conv.conversation_id, alice.user_id) == "owner"
    assert await store.get_role(conv.conversation_id, bob.user_id) == "read"
    assert await store.get_role(conv.conversation_id, carol.user_id) is None
    await store.add_member(conv.conversation_id, bob.user_id, "write")
    assert await store.get_role(conv.conversation_id, bob.user_id) == "write"
    members = await store.list_members(conv.conversation_id)
    assert [(m.username, m.role) for m in members] == [("alice", "owner"), ("bob", "write")]


async def test_bad_role_and_unknown_member(store: Store) -> None:
    alice = await store.create_user("alice", "pw")
    conv = await store.create_conversation("c", [])
    with pytest.raises(InvalidValue, match="role"):
        await store.add_member(conv.conversation_id, alice.user_id, "admin")  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        await store.add_member(conv.conversation_id, "e" * 32, "read")
    with pytest.raises(NotFound):
        await store.add_member("e" * 32, alice.user_id, "read")
    # A failed creation leaves nothing behind.
    with pytest.raises(NotFound):
        await store.create_conversation("half", [(alice.user_id, "read"), ("e" * 32, "read")])
    assert await store.get_conversation_by_title("half") is None


async def test_list_conversations_for(store: Store) -> None:
    alice = await store.create_user("alice", "pw")
    first = await store.create_conversation("first", [(alice.user_id, "owner")])
    await store.create_conversation("other", [])
    second = await store.create_conversation("Desktop", [(alice.user_id, "read")])
    mine = await store.list_conversations_for(alice.user_id)
    assert [(m.conversation_id, m.role) for m in mine] == [
        (first.conversation_id, "owner"),
        (second.conversation_id, "read"),
    ]
    assert await store.get_conversation_by_title("Desktop") == second
    assert len(await store.list_conversations()) == 3


def test_role_order() -> None:
    assert role_allows("owner", "write")
    assert role_allows("write", "read")
    assert not role_allows("read", "write")
    assert not role_allows(None, "read")


# -- relays ----------------------------------------------------------------------------


async def test_relay_token_lifecycle(store: Store, database_url: str) -> None:
    owner = await store.create_user("alice", "pw")
    relay, token = await store.add_relay("lab-1", owner.user_id)
    assert token.startswith("rdr_")
    assert not relay.connected
    assert not relay.revoked
    assert await store.authenticate_relay(token) == relay
    assert token not in await _all_values(database_url, "relays")
    new_token = await store.rotate_relay_token(relay.relay_id)
    assert await store.authenticate_relay(token) is None
    assert await store.authenticate_relay(new_token) == relay
    await store.revoke_relay(relay.relay_id)
    assert await store.authenticate_relay(new_token) is None
    assert (await store.get_relay(relay.relay_id)).revoked  # type: ignore[union-attr]


async def test_relay_co_located_flag(store: Store) -> None:
    owner = await store.create_user("alice", "pw")
    remote, _ = await store.add_relay("remote", owner.user_id)
    beside, token = await store.add_relay("beside", owner.user_id, co_located=True)
    assert (remote.co_located, beside.co_located) == (False, True)
    authenticated = await store.authenticate_relay(token)
    assert authenticated is not None and authenticated.co_located
    await store.set_relay_co_located(beside.relay_id, False)
    assert not (await store.get_relay(beside.relay_id)).co_located  # type: ignore[union-attr]
    await store.set_relay_co_located(remote.relay_id, True)
    assert [r.co_located for r in await store.list_relays()] == [False, True]
    with pytest.raises(NotFound):
        await store.set_relay_co_located("0" * 32, True)


async def test_relay_names(store: Store) -> None:
    owner = await store.create_user("alice", "pw")
    relay, _ = await store.add_relay("lab", owner.user_id)
    with pytest.raises(AlreadyExists):
        await store.add_relay("lab", owner.user_id)
    with pytest.raises(InvalidValue):
        await store.add_relay("bad name", owner.user_id)
    with pytest.raises(NotFound):
        await store.add_relay("orphan", "0" * 32)
    assert await store.get_relay_by_name("lab") == relay
    assert [r.name for r in await store.list_relays()] == ["lab"]


async def test_relay_presence(store: Store, clock: FakeClock) -> None:
    owner = await store.create_user("alice", "pw")
    relay, _ = await store.add_relay("lab", owner.user_id)
    await store.set_relay_presence(
        relay.relay_id,
        connected=True,
        relay_version="0.1.0",
        protocol_version=1,
        capabilities=["session_identity", "virtual_desktop"],
    )
    seen = await store.get_relay(relay.relay_id)
    assert seen is not None
    assert seen.connected
    assert seen.last_seen_at == clock.now
    assert seen.capabilities == ("session_identity", "virtual_desktop")
    clock.advance(5)
    await store.touch_relay(relay.relay_id)
    await store.set_relay_presence(relay.relay_id, connected=False)
    gone = await store.get_relay(relay.relay_id)
    assert gone is not None
    assert not gone.connected
    assert gone.last_seen_at == clock.now
    assert gone.relay_version == "0.1.0"
    assert gone.protocol_version == 1
    with pytest.raises(NotFound):
        await store.touch_relay("0" * 32)


async def test_touching_live_relays_records_them_connected(store: Store, clock: FakeClock) -> None:
    # A replica reaping a dead one records its relays gone; one that reconnected elsewhere in
    # the meantime is connected again once its new replica touches its live relays.
    owner = await store.create_user("alice", "pw")
    relay, _ = await store.add_relay("lab", owner.user_id)
    other, _ = await store.add_relay("other", owner.user_id)
    await store.set_relay_presence(relay.relay_id, connected=True)
    await store.set_relay_presence(relay.relay_id, connected=False)  # the reaper, late
    clock.advance(5)
    assert await store.touch_relays([relay.relay_id]) == []
    seen, untouched = await store.get_relay(relay.relay_id), await store.get_relay(other.relay_id)
    assert seen is not None and untouched is not None
    assert (seen.connected, seen.last_seen_at) == (True, clock.now)
    assert not untouched.connected


async def test_relay_visibility(store: Store) -> None:
    owner = await store.create_user("alice", "pw")
    relay, _ = await store.add_relay("lab", owner.user_id)
    shared = await store.create_conversation("shared", [])
    private = await store.create_conversation("private", [])
    await store.share_relay(relay.relay_id, shared.conversation_id)
    await store.share_relay(relay.relay_id, shared.conversation_id)
    assert await store.is_relay_visible(relay.relay_id, shared.conversation_id)
    assert not await store.is_relay_visible(relay.relay_id, private.conversation_id)
    assert await store.relays_visible_in(shared.conversation_id) == [relay]
    assert await store.relays_visible_in(private.conversation_id) == []
    assert await store.unshare_relay(relay.relay_id, shared.conversation_id)
    assert not await store.unshare_relay(relay.relay_id, shared.conversation_id)
    assert not await store.is_relay_visible(relay.relay_id, shared.conversation_id)
    with pytest.raises(NotFound):
        await store.share_relay(relay.relay_id, "0" * 32)


# -- audit and messages ----------------------------------------------------------------


async def test_audit_rows(store: Store, clock: FakeClock) -> None:
    first = await store.write_audit(
        AuditRow(
            op="desktop_start",
            actor="alice",
            outcome="ok",
            relay_id="r1",
            desktop_session_id="s1",
            details={"geometry": "1280x800", "viewer_token": "abc", "nested": {"Password": "x"}},
        )
    )
    assert first.details == {
        "geometry": "1280x800",
        "viewer_token": "[redacted]",
        "nested": {"Password": "[redacted]"},
    }
    clock.advance(10)
    await store.write_audit(AuditRow(op="desktop_stop_confirm", actor="bob", outcome="conflict"))
    await store.write_audit(AuditRow(op="desktop_attach", actor="bob", outcome="ok", relay_id="r1"))
    assert [a.op for a in await store.list_audit(relay_id="r1")] == [
        "desktop_start",
        "desktop_attach",
    ]
    assert [a.outcome for a in await store.list_audit(since=clock.now)] == ["conflict", "ok"]
    assert [a.op for a in await store.list_audit(limit=1)] == ["desktop_attach"]


async def test_audit_rows_past_retention_are_pruned(store: Store, clock: FakeClock) -> None:
    await store.write_audit(AuditRow(op="desktop_start", actor="alice", outcome="ok"))
    clock.advance(91 * 24 * 3600)
    await store.write_audit(AuditRow(op="desktop_stop_confirm", actor="alice", outcome="ok"))
    removed = await store.prune_audit(clock.now - timedelta(days=90))
    assert removed == 1
    assert [a.op for a in await store.list_audit()] == ["desktop_stop_confirm"]


async def test_messages_page_backwards(store: Store) -> None:
    alice = await store.create_user("alice", "pw")
    conv = await store.create_conversation("c", [(alice.user_id, "owner")])
    ids = [
        (await store.add_message(conv.conversation_id, alice.user_id, f"m{i}")).message_id
        for i in range(5)
    ]
    result = await store.add_message(
        conv.conversation_id, None, "done", kind="result", payload={"ok": True}
    )
    page = await store.list_messages(conv.conversation_id, limit=3)
    assert [m.text for m in page] == ["m3", "m4", "done"]
    assert page[-1].payload == {"ok": True}
    assert page[-1].author_id is None
    older = await store.list_messages(conv.conversation_id, before_id=ids[3], limit=10)
    assert [m.message_id for m in older] == ids[:3]
    assert result.kind == "result"
    with pytest.raises(NotFound):
        await store.add_message("0" * 32, alice.user_id, "x")


# -- admin functions (the CLI's back end) ----------------------------------------------


async def test_admin_create_user_and_token(store: Store) -> None:
    created = await admin.create_user(store, "alice")
    assert set(created) == {"user_id", "username", "password"}
    assert len(created["password"]) >= 20
    assert await store.verify_password("alice", created["password"]) is not None
    token = await admin.create_token(store, "alice")
    assert token["token"].startswith("rdk_") and token["name"] == "default"
    assert (token["read_only"], token["conversation"], token["expires_at"]) == (False, None, None)
    assert await store.authenticate_api_token(token["token"]) is not None
    with pytest.raises(admin.AdminError, match="already exists"):
        await admin.create_user(store, "alice", "pw")
    with pytest.raises(admin.AdminError, match="no user"):
        await admin.create_token(store, "nobody")


async def test_admin_relay_and_conversation(store: Store) -> None:
    await admin.create_user(store, "alice", "pw")
    await admin.create_user(store, "bob", "pw")
    relay = await admin.add_relay(store, "lab", "alice")
    assert set(relay) == {"relay_id", "name", "co_located", "token"}
    conv = await admin.create_conversation(store, "Team", ["alice:owner", "bob:read"])
    assert set(conv) == {"conversation_id"}
    await admin.share_relay(store, "lab", conv["conversation_id"])
    [listed] = await admin.list_conversations(store)
    assert listed["members"] == [
        {"username": "alice", "role": "owner"},
        {"username": "bob", "role": "read"},
    ]
    assert listed["relays"] == ["lab"]
    assert [r["name"] for r in await admin.list_relays(store)] == ["lab"]
    assert [u["username"] for u in await admin.list_users(store)] == ["alice", "bob"]
    with pytest.raises(admin.AdminError, match="role"):
        await admin.create_conversation(store, "x", ["bob:admin"])
    with pytest.raises(admin.AdminError, match="USER:ROLE"):
        await admin.create_conversation(store, "x", ["bob"])
    with pytest.raises(admin.AdminError, match="no relay"):
        await admin.share_relay(store, "missing", conv["conversation_id"])
    with pytest.raises(admin.AdminError, match="already exists"):
        await admin.add_relay(store, "lab", "bob")


async def test_admin_revocation_commands(store: Store) -> None:
    await admin.create_user(store, "alice", "pw")
    token = (await admin.create_token(store, "alice"))["token"]
    [listed] = await admin.list_tokens(store, "alice")
    assert token not in str(listed)
    assert (await admin.revoke_token(store, listed["token_id"]))["was_live"]
    assert (await admin.list_tokens(store))[0]["revoked"]
    with pytest.raises(admin.AdminError, match="no API token"):
        await admin.revoke_token(store, "nope")
    assert (await admin.disable_user(store, "alice"))["changed"]
    assert (await admin.list_users(store))[0]["disabled"]
    assert (await admin.enable_user(store, "alice"))["changed"]
    relay = await admin.add_relay(store, "lab", "alice", co_located=True)
    assert relay["co_located"]
    assert not (await admin.set_relay(store, "lab", co_located=False))["co_located"]
    rotated = await admin.rotate_relay_token(store, "lab")
    assert await store.authenticate_relay(relay["token"]) is None
    assert (await admin.revoke_relay(store, "lab"))["revoked"]
    assert await store.authenticate_relay(rotated["token"]) is None
    conv = await admin.create_conversation(store, "Team", ["alice:owner"])
    await admin.share_relay(store, "lab", conv["conversation_id"])
    assert (await admin.unshare_relay(store, "lab", conv["conversation_id"]))["was_shared"]
    with pytest.raises(admin.AdminError, match="no conversation"):
        await admin.unshare_relay(store, "lab", "nope")
    assert await admin.purge_sessions(store) == {"purged": 0}


async def test_admin_list_audit(store: Store) -> None:
    await admin.create_user(store, "alice", "pw")
    relay = await admin.add_relay(store, "lab", "alice")
    await store.write_audit(AuditRow(op="desktop_start", actor="alice", outcome="ok"))
    await store.write_audit(
        AuditRow(op="desktop_stop", actor="alice", outcome="ok", relay_id=relay["relay_id"])
    )
    rows = await admin.list_audit(store, relay="lab")
    assert [r["op"] for r in rows] == ["desktop_stop"]
    assert rows[0]["at"].endswith("+00:00")


async def test_bootstrap_all_in_one_is_idempotent(store: Store) -> None:
    first = await admin.bootstrap_all_in_one(store)
    second = await admin.bootstrap_all_in_one(store)
    for key in ("user_id", "conversation_id", "relay_id"):
        assert first[key] == second[key]
    assert first["relay_token"] != second["relay_token"]
    assert await store.authenticate_relay(first["relay_token"]) is None
    assert await store.authenticate_relay(second["relay_token"]) is not None
    assert await store.consume_login_link(first["login_token"]) is not None
    assert await store.consume_login_link(second["login_token"]) is not None
    admin_user = await store.get_user_by_name("admin")
    assert admin_user is not None
    assert admin_user.is_admin
    assert await store.get_role(first["conversation_id"], admin_user.user_id) == "owner"
    assert await store.is_relay_visible(first["relay_id"], first["conversation_id"])
    assert len(await store.list_conversations()) == 1
