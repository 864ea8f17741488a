"""Nobody can hold the server's file descriptors: a real server process with small caps.

A user may hold at most ``RELAYDESK_MAX_STREAMS_PER_PRINCIPAL`` streams and sockets, an
address ``RELAYDESK_MAX_STREAMS_PER_ADDRESS``; one more is 429 naming the cap, and other
users are still served. A client that never finishes its request head is cut off after
``RELAYDESK_HEADER_TIMEOUT_S`` while others are served.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import websockets

from server import admin
from server.auth.capability import grant_for, mint
from server.config import load_or_create_secret
from server.db.store import Store
from tests.support.processes import ProcessFactory, scaled
from tests.support.sse import SseStream, open_sse
from tests.support.stack import Seed, ServerProcess, start_server, wait_until

pytestmark = pytest.mark.integration

PER_USER = 4
PER_ADDRESS = 6
HEADER_TIMEOUT_S = 1.0
CAPS = {
    "RELAYDESK_MAX_STREAMS_PER_PRINCIPAL": str(PER_USER),
    "RELAYDESK_MAX_STREAMS_PER_ADDRESS": str(PER_ADDRESS),
    "RELAYDESK_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
    "RELAYDESK_MAX_PENDING_REQUESTS_PER_ADDRESS": "3",
}


async def _reader(seed: Seed, name: str) -> str:
    """Another member of the seed's conversation (``read``); its API token."""
    store = await Store.open(seed.database_url)
    try:
        user = await admin.create_user(store, name)
        await store.add_member(seed.conversation_id, user["user_id"], "read")
        token, _ = await store.create_api_token(user["user_id"], "caps")
        return token
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def _server(process_factory: ProcessFactory, seed: Seed) -> AsyncIterator[ServerProcess]:
    yield await start_server(process_factory, seed, env=CAPS)


def _events(seed: Seed) -> str:
    return f"/api/v1/events?conversation_id={seed.conversation_id}"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _open(
    stack: contextlib.AsyncExitStack, client: httpx.AsyncClient, url: str, token: str
) -> SseStream:
    stream = await stack.enter_async_context(open_sse(client, url, _bearer(token)))
    if stream.response.status_code == 200:
        await stream.next()
    return stream


async def test_a_user_at_the_cap_gets_429_naming_it_and_others_are_served(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    other = await _reader(seed, "bob")
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with (
        _server(process_factory, seed) as server,
        httpx.AsyncClient(base_url=server.url, limits=limits, timeout=scaled(10)) as client,
        contextlib.AsyncExitStack() as held,
    ):
        for _ in range(PER_USER):
            stream = await _open(held, client, _events(seed), seed.api_token)
            assert stream.response.status_code == 200
        refused = await _open(held, client, _events(seed), seed.api_token)
        assert refused.response.status_code == 429
        error = refused.response.json()["error"]
        assert error["code"] == "limit_reached"
        assert error["limit"] == PER_USER
        assert "RELAYDESK_MAX_STREAMS_PER_PRINCIPAL" in error["message"]
        # The Cua socket counts too, and is refused with the same answer before the upgrade.
        base = server.url.replace("http", "ws", 1)
        cua = f"{base}/api/v1/conversations/{seed.conversation_id}/cua/relay-1/virtual/main/ws"
        with pytest.raises(websockets.InvalidStatus) as denied:
            async with websockets.connect(cua, additional_headers=_bearer(seed.api_token)):
                pass
        assert denied.value.response.status_code == 429
        assert b"RELAYDESK_MAX_STREAMS_PER_PRINCIPAL" in denied.value.response.body
        # Another user is still served: requests and a stream of their own.
        assert (await client.get("/api/v1/me", headers=_bearer(other))).status_code == 200
        assert (await _open(held, client, _events(seed), other)).response.status_code == 200
        # Closed streams give their slots back.
        await held.aclose()
        await wait_until(lambda: _opens(server, seed.api_token), 10, "a slot given back")


async def test_a_viewers_control_feed_over_the_cap_gets_429(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    """The control feed of a viewer capability counts under its user's cap like every stream."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with (
        _server(process_factory, seed) as server,
        httpx.AsyncClient(base_url=server.url, limits=limits, timeout=scaled(10)) as client,
        contextlib.AsyncExitStack() as held,
    ):
        for _ in range(PER_USER):
            stream = await _open(held, client, _events(seed), seed.api_token)
            assert stream.response.status_code == 200
        session = "s" * 22
        where = (seed.user["user_id"], seed.conversation_id, seed.relay["relay_id"], session)
        grant = grant_for(*where, 600, person=True)
        token = mint(load_or_create_secret(seed.data_dir), grant)
        refused = await client.get(f"/vnc/{session}/{token}/control")
        assert refused.status_code == 429, refused.text
        assert "RELAYDESK_MAX_STREAMS_PER_PRINCIPAL" in refused.json()["error"]["message"]


async def _opens(server: ServerProcess, token: str) -> bool:
    """Whether ``token`` can open one more stream now (closed again at once)."""
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=scaled(10)) as client,
        contextlib.AsyncExitStack() as held,
    ):
        stream = await _open(held, client, "/api/v1/events?conversation_id=x", token)
        return stream.response.status_code != 429


async def test_an_address_at_its_cap_gets_429_naming_it(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    tokens = [await _reader(seed, f"user{n}") for n in range(3)]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with (
        _server(process_factory, seed) as server,
        httpx.AsyncClient(base_url=server.url, limits=limits, timeout=scaled(10)) as client,
        contextlib.AsyncExitStack() as held,
    ):
        for n in range(PER_ADDRESS):
            stream = await _open(held, client, _events(seed), tokens[n % 3])
            assert stream.response.status_code == 200
        refused = await _open(held, client, _events(seed), tokens[0])
        assert refused.response.status_code == 429
        assert "RELAYDESK_MAX_STREAMS_PER_ADDRESS" in refused.response.json()["error"]["message"]
        assert refused.response.json()["error"]["limit"] == PER_ADDRESS


def _half_request(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=scaled(10))
    sock.sendall(b"GET /api/v1/me HTT")
    return sock


async def test_a_half_sent_request_is_cut_off_after_the_header_timeout(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    async with (
        _server(process_factory, seed) as server,
        httpx.AsyncClient(base_url=server.url, timeout=scaled(10)) as client,
    ):
        slow = _half_request(server.port)
        began = time.monotonic()
        # Meanwhile another client is served at once.
        assert (await client.get("/healthz")).status_code == 200
        answer = await asyncio.to_thread(slow.recv, 4096)
        waited = time.monotonic() - began
        slow.close()
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert b"RELAYDESK_HEADER_TIMEOUT_S" in answer
        assert HEADER_TIMEOUT_S * 0.8 <= waited < HEADER_TIMEOUT_S + scaled(2)


async def test_too_many_half_sent_requests_from_one_address_are_refused_at_once(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    async with _server(process_factory, seed) as server:
        slow = [_half_request(server.port) for _ in range(3)]
        await asyncio.sleep(0.2)
        extra = socket.create_connection(("127.0.0.1", server.port), timeout=scaled(10))
        answer = await asyncio.to_thread(extra.recv, 4096)
        assert answer.startswith(b"HTTP/1.1 429 "), answer
        assert b"RELAYDESK_MAX_PENDING_REQUESTS_PER_ADDRESS" in answer
        for sock in [*slow, extra]:
            sock.close()


def _read_response(sock: socket.socket) -> bytes:
    """One whole HTTP response with a Content-Length (it may come in several segments)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(4096)
    return head + b"\r\n\r\n" + body


async def test_a_half_sent_second_request_on_a_kept_alive_connection_is_cut_off_too(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    async with _server(process_factory, seed) as server:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=scaled(10))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = await asyncio.to_thread(_read_response, sock)
        assert first.startswith(b"HTTP/1.1 200 "), first
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        began = time.monotonic()
        answer = await asyncio.to_thread(sock.recv, 4096)
        waited = time.monotonic() - began
        sock.close()
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert HEADER_TIMEOUT_S * 0.8 <= waited < HEADER_TIMEOUT_S + scaled(2)
