"""Failed logins are limited per client address, against a real server on loopback sockets:
wrong passwords never lock the right one out from another address (or below the limit), and
``X-Forwarded-For`` names the client only when the connection comes from a configured proxy.

Clients connect from distinct loopback addresses (127.0.0.2, 127.0.0.3, …) to the server on
127.0.0.1, so each is another client address to the server; no traffic leaves the host.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from server import admin
from server.app import check_settings
from server.config import ConfigError, Settings
from server.db.store import Store
from tests.support.processes import scaled
from tests.support.stack import Seed, inprocess_server, seed_database

pytestmark = pytest.mark.integration

PASSWORD = "correct horse battery staple"
LIMIT = 6


@pytest_asyncio.fixture
async def seed(tmp_path: Path) -> Seed:
    seed = await seed_database(tmp_path / "data")
    store = await Store.open(seed.database_url)
    try:
        await admin.set_password(store, "alice", PASSWORD)
    finally:
        await store.close()
    return seed


@contextlib.asynccontextmanager
async def _client(base: str, source: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client whose connections come from loopback address ``source``."""
    transport = httpx.AsyncHTTPTransport(local_address=source)
    async with httpx.AsyncClient(transport=transport, base_url=base, timeout=scaled(20)) as client:
        yield client


async def _login(
    client: httpx.AsyncClient, password: str, *, username: str = "alice", **headers: str
) -> httpx.Response:
    body = {"username": username, "password": password}
    return await client.post("/api/v1/login", json=body, headers=headers)


async def _wrong(client: httpx.AsyncClient, times: int, **headers: str) -> list[int]:
    return [(await _login(client, "guess", **headers)).status_code for _ in range(times)]


async def test_five_wrong_passwords_then_the_right_one_signs_in(seed: Seed) -> None:
    """With the default settings: a person who mistypes five times still gets in."""
    async with inprocess_server(seed) as (_app, base), _client(base, "127.0.0.2") as client:
        assert await _wrong(client, 5) == [401] * 5
        signed_in = await _login(client, PASSWORD)
        assert signed_in.status_code == 200, signed_in.text
        assert signed_in.json()["user"]["username"] == "alice"


async def test_an_address_over_its_limit_is_refused_and_another_is_not(seed: Seed) -> None:
    overrides: dict[str, Any] = {"login_max_failures": LIMIT}
    async with inprocess_server(seed, **overrides) as (_app, base):
        async with _client(base, "127.0.0.2") as attacker:
            assert await _wrong(attacker, LIMIT) == [401] * LIMIT
            refused = await _login(attacker, PASSWORD)
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == "limit_reached"
            assert 1 <= int(refused.headers["retry-after"]) <= 300
        async with _client(base, "127.0.0.3") as owner:
            assert await _wrong(owner, 1) == [401]
            signed_in = await _login(owner, PASSWORD)
            assert signed_in.status_code == 200, "the account is not locked for its owner"


async def test_x_forwarded_for_is_ignored_from_a_peer_that_is_not_a_configured_proxy(
    seed: Seed,
) -> None:
    """No proxies configured (the default): a loopback client that names a new address in
    every request is still counted as itself."""
    overrides: dict[str, Any] = {"login_max_failures": LIMIT}
    async with inprocess_server(seed, **overrides) as (_app, base):
        async with _client(base, "127.0.0.1") as local:
            statuses = []
            for i in range(LIMIT + 1):
                claim = {"X-Forwarded-For": f"198.51.100.{i}"}
                response = await _login(local, "guess", username=f"user-{i}", **claim)
                statuses.append(response.status_code)
        assert statuses == [401] * LIMIT + [429]


async def test_x_forwarded_for_names_the_client_behind_a_configured_proxy(seed: Seed) -> None:
    """127.0.0.1 is the proxy: its rightmost untrusted X-Forwarded-For entry is the client
    (what a client wrote to the left of it is not); 127.0.0.2 is no proxy: its header is
    ignored."""
    overrides: dict[str, Any] = {"login_max_failures": LIMIT, "trusted_proxies": ("127.0.0.1",)}
    async with inprocess_server(seed, **overrides) as (_app, base):
        async with _client(base, "127.0.0.1") as proxy:
            guesser = {"X-Forwarded-For": "203.0.113.7"}
            assert await _wrong(proxy, LIMIT, **guesser) == [401] * LIMIT
            assert (await _login(proxy, PASSWORD, **guesser)).status_code == 429
            spoofed = {"X-Forwarded-For": "10.9.9.9, 203.0.113.7"}
            assert (await _login(proxy, PASSWORD, **spoofed)).status_code == 429
            owner = {"X-Forwarded-For": "203.0.113.8"}
            assert (await _login(proxy, PASSWORD, **owner)).status_code == 200
        async with _client(base, "127.0.0.2") as direct:
            claims = {"X-Forwarded-For": "203.0.113.7"}
            assert (await _login(direct, PASSWORD, **claims)).status_code == 200


def test_a_trusted_proxy_that_is_no_address_refuses_to_start() -> None:
    with pytest.raises(ConfigError, match="RELAYDESK_TRUSTED_PROXIES: not an IP address"):
        check_settings(Settings(trusted_proxies=("10.0.0.0/8", "proxy.example")))
    check_settings(Settings(trusted_proxies=("10.0.0.0/8", "::1", "192.168.1.7")))
