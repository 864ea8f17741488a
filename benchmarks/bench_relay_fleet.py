"""1,000 simulated relays (one process, real ``wire`` code) connecting to one server process.

Measures the time until every relay is welcomed and the server's RSS. Baseline, same run: the
same number of concurrent plain HTTP requests (``/healthz``) to the same server, so the ratio
shows the cost of authenticating, handshaking and registering a relay.
Targets: ≤ 10 s to welcome all 1,000 and ≤ 300 MB server RSS.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import psutil

from benchmarks.common import parser
from server.db.store import Store
from tests.support.processes import ManagedProcess, free_port
from tests.support.stack import get_json, relaydesk_argv, seed_database
from wire.connection import Connection, Role, WelcomeReceived
from wire.messages import PROTOCOL_VERSION, SUBPROTOCOL, Hello

CONCURRENCY = 200


async def make_tokens(database_url: str, count: int, owner_id: str) -> list[str]:
    store = await Store.open(database_url)
    try:
        tokens = []
        for n in range(count):
            _, token = await store.add_relay(f"sim-{n}", owner_id)
            tokens.append(token)
        return tokens
    finally:
        await store.close()


async def simulated_relay(
    session: aiohttp.ClientSession, url: str, token: str, gate: asyncio.Semaphore
) -> aiohttp.ClientWebSocketResponse:
    async with gate:
        ws = await session.ws_connect(
            url, headers={"Authorization": f"Bearer {token}"}, protocols=(SUBPROTOCOL,)
        )
        connection = Connection(Role.RELAY)
        connection.send_hello(Hello(PROTOCOL_VERSION, "sim", ("session_identity",), ()))
        for frame in connection.data_to_send():
            await ws.send_str(str(frame))
        message = await ws.receive()
        events = connection.receive_text(message.data)
        assert isinstance(events[0], WelcomeReceived), events
        return ws


async def fleet(url: str, tokens: list[str]) -> float:
    gate = asyncio.Semaphore(CONCURRENCY)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        sockets = await asyncio.gather(*(simulated_relay(session, url, t, gate) for t in tokens))
        elapsed = time.perf_counter() - start
        await asyncio.sleep(0.5)
        await asyncio.gather(*(ws.close() for ws in sockets))
    return elapsed


async def http_baseline(base: str, count: int) -> float:
    gate = asyncio.Semaphore(CONCURRENCY)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one() -> None:
            async with gate, session.get(f"{base}/healthz") as response:
                await response.read()

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(count)))
        return time.perf_counter() - start


async def main_async(count: int) -> int:
    with tempfile.TemporaryDirectory(prefix="relaydesk-bench-") as tmp:
        seed = await seed_database(Path(tmp) / "data")
        print(f"==> registering {count} relays", flush=True)
        tokens = await make_tokens(seed.database_url, count, seed.user["user_id"])
        port = free_port()
        server = ManagedProcess(
            relaydesk_argv("server", "--port", str(port)),
            Path(tmp) / "server.log",
            env={**os.environ, **seed.env(), "RELAYDESK_LOG_LEVEL": "warning"},
        ).start()
        try:
            server.wait_for_port(port, 30)
            base = f"http://127.0.0.1:{port}"
            while get_json(f"{base}/readyz")[0] != 200:
                await asyncio.sleep(0.05)
            proc = psutil.Process(server.pid)
            rss_idle = proc.memory_info().rss / 2**20
            baseline = await http_baseline(base, count)
            cpu_before = sum(proc.cpu_times()[:2])
            elapsed = await fleet(f"ws://127.0.0.1:{port}/relay/v1/connect", tokens)
            server_cpu = sum(proc.cpu_times()[:2]) - cpu_before
            rss = proc.memory_info().rss / 2**20
        finally:
            server.terminate(10)
    print(f"baseline {count} concurrent GET /healthz: {baseline:.2f} s")
    print(f"{count} relays welcomed in {elapsed:.2f} s (target <= 10 s)")
    print(f"ratio relays/baseline time: {elapsed / baseline:.2f}x")
    print(f"server CPU while relays connected: {server_cpu:.2f} s")
    print(
        f"server RSS idle {rss_idle:.0f} MB, after {count} relays {rss:.0f} MB (target <= 300 MB)"
    )
    return 0


def main() -> int:
    args = parser(__doc__ or "").parse_args()
    return asyncio.run(main_async(50 if args.quick else 1000))


if __name__ == "__main__":
    sys.exit(main())
