"""A server stopped with SIGTERM ends every event stream cleanly: a farewell event, a final
chunk, a reconnect delay (docs/operations.md, "Stopping")."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import httpx
import pytest

from tests.support.processes import ProcessFactory, scaled
from tests.support.stack import Seed, seed_database, start_relay, start_server, wait_until

pytestmark = pytest.mark.integration

STREAMS = 3


async def _read_until_end(response: httpx.Response, opened: asyncio.Event) -> list[str]:
    """Every line of the stream; httpx raises if the body ends without its final chunk."""
    lines = []
    async for line in response.aiter_lines():
        lines.append(line)
        if line.startswith("event: desktop_inventory_changed"):
            opened.set()
    return lines


async def _subscribe(client: httpx.AsyncClient, seed: Seed, opened: asyncio.Event) -> list[str]:
    url = f"/api/v1/events?conversation_id={seed.conversation_id}"
    headers = {"Authorization": f"Bearer {seed.api_token}"}
    async with client.stream("GET", url, headers=headers, timeout=None) as response:
        assert response.status_code == 200
        return await _read_until_end(response, opened)


async def test_sigterm_ends_every_event_stream_with_a_farewell_and_its_final_chunk(
    tmp_path: Path, process_factory: ProcessFactory
) -> None:
    seed = await seed_database(tmp_path / "data")
    server = await start_server(process_factory, seed)
    async with httpx.AsyncClient(base_url=server.url) as client:
        opened = [asyncio.Event() for _ in range(STREAMS)]
        readers = [asyncio.create_task(_subscribe(client, seed, ev)) for ev in opened]
        async with asyncio.timeout(scaled(10)):
            await asyncio.gather(*(ev.wait() for ev in opened))
        server.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(scaled(10)):
            streams = await asyncio.gather(*readers)
    # uvicorn re-raises the signal it handled once it has shut down.
    assert server.process.wait(scaled(10)) in (0, -signal.SIGTERM)
    for lines in streams:
        farewell = lines[lines.index("event: server_stopping") :]
        assert "retry: 1000" in farewell
        data = next(line for line in farewell if line.startswith("data: "))
        assert json.loads(data.removeprefix("data: ")) == {
            "reason": "server shutting down",
            "retry_ms": 1000,
        }
    assert "without completing response" not in server.process.log_text()


async def test_sigterm_closes_relay_links_with_going_away_and_the_relay_redials(
    tmp_path: Path, process_factory: ProcessFactory
) -> None:
    seed = await seed_database(tmp_path / "data")
    server = await start_server(process_factory, seed)
    relay = start_relay(process_factory, seed, server.url)
    await wait_until(lambda: server.relays_connected() == 1, 20, "the relay to connect")
    server.process.send_signal(signal.SIGTERM)
    await relay.wait_for_line_async(r"disconnected from the server \(close code 1001\)", scaled(10))
    assert server.process.wait(scaled(10)) in (0, -signal.SIGTERM)
    assert relay.is_alive()
