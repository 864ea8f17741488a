"""``server.admin``: what ``relaydesk up`` registers, and account recovery."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from server import admin
from server.db.store import Store
from tests.support import postgres

pytestmark = pytest.mark.unit

database_url = postgres.database_url
postgres_cluster = postgres.postgres_cluster
sqlite_template = postgres.sqlite_template


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(database_url)
    yield opened
    await opened.close()


@pytest.mark.parametrize(
    ("hostname", "name"),
    [
        ("lab-box", "lab-box"),
        ("lab-box.example.org", "lab-box"),
        ("Büro PC", "B-ro-PC"),
        ("local", "this-machine"),
        ("localhost", "this-machine"),
        ("", "this-machine"),
        ("---", "this-machine"),
    ],
)
def test_the_all_in_one_relay_is_named_after_the_host(hostname: str, name: str) -> None:
    assert admin.all_in_one_relay_name(hostname) == name


async def test_bootstrap_names_the_relay_after_the_host_never_local(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "desk-7.lan")
    info = await admin.bootstrap_all_in_one(store)
    assert info["relay_name"] == "desk-7"
    assert await store.get_relay_by_name("local") is None


async def test_bootstrap_renames_a_relay_an_earlier_version_named_local(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "localhost")
    owner = await admin.create_user(store, "admin", is_admin=True)
    old = await admin.add_relay(store, "local", owner["username"], co_located=True)
    conversation = await admin.create_conversation(store, "Desktop", ["admin:owner"])
    await admin.share_relay(store, "local", conversation["conversation_id"])

    info = await admin.bootstrap_all_in_one(store)

    assert (info["relay_id"], info["relay_name"]) == (old["relay_id"], "this-machine")
    assert await store.get_relay_by_name("local") is None
    assert await store.is_relay_visible(old["relay_id"], conversation["conversation_id"])
    assert await store.authenticate_relay(old["token"]) is None
    assert await store.authenticate_relay(info["relay_token"]) is not None
