"""A 64 MiB login body against a real server process: 413, and the server stays small."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import psutil
import pytest

from tests.support.processes import ProcessFactory, scaled
from tests.support.stack import seed_database, start_server

pytestmark = pytest.mark.integration


LOGIN_FLOOD = 64 * 1024 * 1024


def _flood_login(port: int, chunked: bool) -> bytes:
    """Send a 64 MiB login body (declared, or chunked with no length); return the answer."""
    framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % LOGIN_FLOOD
    head = (
        b"POST /api/v1/login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\n" + framing + b"\r\n\r\n"
    )
    chunk = b" " * (1024 * 1024)
    piece = b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(10)) as sock:
        sock.sendall(head)
        with contextlib.suppress(OSError):  # the server may answer and close mid-body
            for _ in range(LOGIN_FLOOD // len(chunk)):
                sock.sendall(piece)
        return sock.recv(65536)


async def test_a_64_mib_login_body_is_413_and_the_server_stays_small(
    process_factory: ProcessFactory, tmp_path: Path
) -> None:
    seed = await seed_database(tmp_path / "data")
    server = await start_server(process_factory, seed)
    process = psutil.Process(server.process.pid)
    before = process.memory_info().rss
    for chunked in (False, True):
        answer = await asyncio.to_thread(_flood_login, server.port, chunked)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert b'"limit_reached"' in answer
    grown = process.memory_info().rss - before
    assert grown < 32 * 1024 * 1024, f"RSS grew by {grown / 2**20:.0f} MiB"
    assert server.relays_connected() == 0  # still answers
