"""Request round trip over the relay connection: server → relay → server, the empty op.

Baseline, same run: a bare WebSocket echo round trip on loopback (aiohttp client ↔ uvicorn),
so the ratio shows what relaydesk's protocol adds on top of the transport.
Target: p50 ≤ 1 ms on loopback.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from benchmarks.common import parser, percentile, summary
from tests.support.processes import ManagedProcess, free_port
from tests.support.stack import inprocess_server, relaydesk_argv, seed_database, wait_until
from wire.ids import RelayId


async def _echo(websocket: WebSocket) -> None:
    await websocket.accept()
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        await websocket.send_text(message.get("text") or "")


async def baseline(count: int) -> list[float]:
    port = free_port()
    config = uvicorn.Config(
        Starlette(routes=[WebSocketRoute("/echo", _echo)]),
        host="127.0.0.1",
        port=port,
        ws="websockets-sansio",
        log_config=None,
        access_log=False,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    samples = []
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"ws://127.0.0.1:{port}/echo") as ws,
    ):
        for n in range(count):
            start = time.perf_counter()
            await ws.send_str(f'{{"type":"req","id":"{n}","op":"ping","args":{{}}}}')
            await ws.receive()
            samples.append((time.perf_counter() - start) * 1000)
    server.should_exit = True
    await task
    return samples


async def relay_roundtrip(count: int, workdir: Path) -> list[float]:
    seed = await seed_database(workdir / "data")
    async with inprocess_server(seed) as (app, url):
        token_file = workdir / "relay.token"
        token_file.write_text(seed.relay_token)
        relay = ManagedProcess(
            relaydesk_argv("relay", "--server", url, "--token-file", str(token_file)),
            workdir / "relay.log",
            env={**os.environ, **seed.env()},
        ).start()
        try:
            relay_id = RelayId(seed.relay["relay_id"])
            await wait_until(lambda: app.state.parts.relays.is_connected(relay_id), 30, "relay")
            hub = app.state.parts.relays
            for _ in range(50):  # warm-up
                await hub.request(relay_id, "ping")
            samples = []
            for _ in range(count):
                start = time.perf_counter()
                await hub.request(relay_id, "ping")
                samples.append((time.perf_counter() - start) * 1000)
            return samples
        finally:
            # Off the loop: the relay's close handshake needs this process's server.
            await asyncio.to_thread(relay.terminate, 10)


async def main_async(quick: bool) -> int:
    count = 200 if quick else 5000
    with tempfile.TemporaryDirectory(prefix="relaydesk-bench-") as tmp:
        # interleave to spread machine noise across both figures
        base = await baseline(count)
        relay = await relay_roundtrip(count, Path(tmp))
        base += await baseline(count)
    print(summary("baseline websocket echo", base))
    print(summary("relay request round trip", relay))
    ratio = percentile(relay, 0.5) / percentile(base, 0.5)
    print(f"ratio relay/baseline p50: {ratio:.2f}x")
    target = percentile(relay, 0.5) <= 1.0
    print(f"target p50 <= 1 ms: {'met' if target else 'NOT met'}")
    return 0


def main() -> int:
    args = parser(__doc__ or "").parse_args()
    return asyncio.run(main_async(args.quick))


if __name__ == "__main__":
    sys.exit(main())
