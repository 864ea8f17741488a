"""The benchmarks' minimal HTTP client against a real loopback server."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest

from benchmarks.common import HttpClient
from tests.support.stack import wait_until

pytestmark = pytest.mark.unit


class OneAnswerServer:
    """Answers each connection's first request, then closes it (as an idle keep-alive ends)."""

    def __init__(self, with_length: bool = True) -> None:
        self.with_length = with_length
        self.requests: list[tuple[str, dict[str, str], object]] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        request_line, *lines = head.split("\r\n")
        pairs = (line.partition(":") for line in lines if line)
        headers = {name.strip().lower(): value.strip() for name, _, value in pairs}
        size = int(headers.get("content-length", "0"))
        body = json.loads(await reader.readexactly(size)) if size else None
        self.requests.append((request_line, headers, body))
        payload = json.dumps({"echo": body}).encode()
        length = f"Content-Length: {len(payload)}\r\n" if self.with_length else ""
        writer.write(f"HTTP/1.1 201 Created\r\n{length}\r\n".encode() + payload)
        await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def serve(handler: OneAnswerServer) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


@pytest.fixture
async def answering() -> AsyncIterator[tuple[OneAnswerServer, str]]:
    handler = OneAnswerServer()
    async with serve(handler) as url:
        yield handler, url


async def test_posts_json_and_reconnects_after_the_server_closed(
    answering: tuple[OneAnswerServer, str],
) -> None:
    handler, url = answering
    client = HttpClient(url, {"Authorization": "Bearer t"})
    try:
        assert await client.post_json("/a", {"n": 1}) == (201, {"echo": {"n": 1}})
        reader = client._reader
        await wait_until(lambda: reader is not None and reader.at_eof(), 5, "the server's close")
        assert await client.post_json("/b", {"n": "ü"}) == (201, {"echo": {"n": "ü"}})
    finally:
        await client.close()
    assert handler.connections == 2
    (first, headers, _), (second, _, _) = handler.requests
    assert (first, second) == ("POST /a HTTP/1.1", "POST /b HTTP/1.1")
    assert headers["authorization"] == "Bearer t"
    assert headers["content-type"] == "application/json"


async def test_gets_without_a_body(answering: tuple[OneAnswerServer, str]) -> None:
    handler, url = answering
    client = HttpClient(url, {})
    try:
        assert await client.get_json("/healthz") == (201, {"echo": None})
    finally:
        await client.close()
    ((request_line, headers, body),) = handler.requests
    assert (request_line, body) == ("GET /healthz HTTP/1.1", None)
    assert "content-length" not in headers


async def test_a_response_without_content_length_is_an_error() -> None:
    handler = OneAnswerServer(with_length=False)
    async with serve(handler) as url:
        client = HttpClient(url, {})
        try:
            with pytest.raises(RuntimeError, match="Content-Length"):
                await client.post_json("/", {})
        finally:
            await client.close()


def test_only_plain_http_urls_with_a_port() -> None:
    for url in ("https://127.0.0.1:1", "http://127.0.0.1", "127.0.0.1:80"):
        with pytest.raises(ValueError, match="http://host:port"):
            HttpClient(url, {})
