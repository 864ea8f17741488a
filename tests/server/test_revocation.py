"""``CredentialWatch`` against a real database: a revocation written by another process (the
admin CLI's own store) is seen by the very next check, whatever this process's read caches
still say."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from server import admin
from server.auth.revocation import Access, Credential, CredentialWatch
from server.db.store import Store
from server.secrets.tokens import hash_secret
from tests.support.stack import Seed, seed_database

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[Seed, Store, Store]]:
    """The seed, the server's store, and the operator's (another process's caches)."""
    seed = await seed_database(tmp_path / "data")
    server, operator = await Store.open(seed.database_url), await Store.open(seed.database_url)
    try:
        yield seed, server, operator
    finally:
        await server.close()
        await operator.close()


async def test_a_token_revoked_elsewhere_fails_the_next_check_though_still_cached(
    stores: tuple[Seed, Store, Store],
) -> None:
    seed, server, operator = stores
    user_id = seed.user["user_id"]
    token, record = await server.create_api_token(user_id, "agent")
    assert await server.authenticate_api_token(token) is not None  # now in the read cache
    watch = CredentialWatch(server)
    held = watch.add(
        Credential("token", user_id, hash_secret(token)), Access(seed.conversation_id, "read")
    )
    assert await watch.confirm(held)
    await admin.revoke_token(operator, record.token_id)
    assert await server.authenticate_api_token(token) is not None, "the cache still says yes"
    assert not await watch.confirm(held)
    assert held.revoked.is_set() and "revoked" in held.reason


async def test_a_disabled_user_ends_token_session_and_capability_watches(
    stores: tuple[Seed, Store, Store],
) -> None:
    seed, server, operator = stores
    user = await admin.create_user(server, "bob")
    await server.add_member(seed.conversation_id, user["user_id"], "write")
    token, _ = await server.create_api_token(user["user_id"], "agent")
    secret, _csrf = await server.create_web_session(user["user_id"], 3600)
    watch = CredentialWatch(server)
    held = [
        watch.add(Credential("token", user["user_id"], hash_secret(token))),
        watch.add(Credential("session", user["user_id"], hash_secret(secret))),
        watch.add(Credential("user", user["user_id"]), Access(seed.conversation_id, "write")),
    ]
    await watch.check(held)
    assert not any(h.revoked.is_set() for h in held)
    await admin.disable_user(operator, "bob")
    await watch.check(held)
    assert all(h.revoked.is_set() for h in held)
    assert [h.reason for h in held][2] == "user disabled"


async def test_a_lost_role_ends_a_watch_that_needs_it(
    stores: tuple[Seed, Store, Store],
) -> None:
    seed, server, _ = stores
    user = await admin.create_user(server, "carol")
    await server.add_member(seed.conversation_id, user["user_id"], "write")
    watch = CredentialWatch(server)
    viewer = watch.add(Credential("user", user["user_id"]), Access(seed.conversation_id, "write"))
    await watch.check([viewer])
    assert not viewer.revoked.is_set()
    await server.add_member(seed.conversation_id, user["user_id"], "read")
    await watch.check([viewer])
    assert viewer.revoked.is_set() and "role write" in viewer.reason
