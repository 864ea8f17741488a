"""Inventory at scale: N simulated relays x 1 desktop on one ``relaydesk server`` process.

Measures ``desktop_list_active`` latency (p50/p99, the conversation sees all N desktops), the
p99 delivery delay of one inventory change to 1,000 SSE subscribers (another conversation that
sees the changed relay), and the server's RSS — on the in-process bus and on Redis Streams, in
the same run. Prints the ratio Redis/in-process.
Targets: list p50 <= 20 ms; fan-out p99 <= 250 ms.
Simulated relays use the real ``wire.Connection``; the desktop rows they report are synthetic.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from benchmarks.common import parser, percentile
from server import admin
from server.db.store import Store
from tests.support.processes import ManagedProcess, free_port
from tests.support.redis import start_redis
from tests.support.stack import Seed, get_json, relaydesk_argv, seed_database
from wire.connection import Connection, Role, WelcomeReceived
from wire.messages import PROTOCOL_VERSION, SUBPROTOCOL, Hello

CONCURRENCY = 200
LIST_CALLS = 200


@dataclass
class Fleet:
    tokens: list[str]
    fanout_conversation: str


async def register(seed: Seed, count: int) -> Fleet:
    store = await Store.open(seed.database_url)
    try:
        conv = await admin.create_conversation(store, "Fanout", ["alice:read"])
        tokens = []
        for n in range(count):
            relay, token = await store.add_relay(f"sim-{n}", seed.user["user_id"])
            await store.share_relay(relay.relay_id, seed.conversation_id)
            tokens.append(token)
            if n == 0:
                await store.share_relay(relay.relay_id, conv["conversation_id"])
        return Fleet(tokens, conv["conversation_id"])
    finally:
        await store.close()


def desktop_row() -> dict[str, Any]:
    return {
        "desktop_session_id": secrets.token_hex(16),
        "kind": "virtual",
        "slot": "main",
        "state": "running",
        "geometry": "1280x800",
        "display": ":1",
        "started_at": "2026-01-01T00:00:00Z",
        "started_by": "bench",
    }


@dataclass
class SimRelay:
    ws: aiohttp.ClientWebSocketResponse
    connection: Connection
    row: dict[str, Any]
    reader: asyncio.Task[None] | None = None

    async def drain(self) -> None:
        """Keep reading, so aiohttp answers the server's liveness pings."""
        async for _message in self.ws:
            pass

    async def send_failed(self) -> None:
        self.connection.send_event(
            "desktop.changed", {**self.row, "state": "failed", "reason": "bench"}
        )
        for frame in self.connection.data_to_send():
            await self.ws.send_str(str(frame))


async def connect(
    session: aiohttp.ClientSession, url: str, token: str, gate: asyncio.Semaphore
) -> SimRelay:
    async with gate:
        ws = await session.ws_connect(
            url, headers={"Authorization": f"Bearer {token}"}, protocols=(SUBPROTOCOL,)
        )
        connection = Connection(Role.RELAY)
        row = desktop_row()
        connection.send_hello(Hello(PROTOCOL_VERSION, "sim", ("session_identity",), (row,)))
        for frame in connection.data_to_send():
            await ws.send_str(str(frame))
        message = await ws.receive()
        assert isinstance(connection.receive_text(message.data)[0], WelcomeReceived)
        relay = SimRelay(ws, connection, row)
        relay.reader = asyncio.create_task(relay.drain())
        return relay


async def list_latency(
    session: aiohttp.ClientSession, base: str, seed: Seed, calls: int
) -> list[float]:
    body = {"conversation_id": seed.conversation_id}
    headers = {"Authorization": f"Bearer {seed.api_token}"}
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        async with session.post(
            f"{base}/api/v1/actions/desktop_list_active", json=body, headers=headers
        ) as response:
            await response.read()
            assert response.status == 200
        samples.append((time.perf_counter() - start) * 1000)
    return samples


async def subscriber(
    session: aiohttp.ClientSession, url: str, token: str, ready: asyncio.Event, arrived: list[float]
) -> None:
    async with session.get(url, headers={"Authorization": f"Bearer {token}"}) as response:
        if response.status != 200:
            raise RuntimeError(f"event stream refused: {response.status} {await response.text()}")
        events = 0
        async for raw in response.content:
            if raw.startswith(b"data:"):
                events += 1
                if events == 1:
                    ready.set()
                else:
                    arrived.append(time.perf_counter())
                    return
    raise RuntimeError("event stream ended early")


async def fanout(
    session: aiohttp.ClientSession, base: str, seed: Seed, fleet: Fleet, relay: SimRelay, n: int
) -> tuple[float, list[float]]:
    url = f"{base}/api/v1/events?conversation_id={fleet.fanout_conversation}"
    arrived: list[float] = []
    readies = [asyncio.Event() for _ in range(n)]
    began = time.perf_counter()
    tasks = [
        asyncio.create_task(subscriber(session, url, seed.api_token, r, arrived)) for r in readies
    ]
    await _all_ready(readies, tasks, 120)
    opened = time.perf_counter() - began
    sent = time.perf_counter()
    await relay.send_failed()
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    return opened, [(t - sent) * 1000 for t in arrived]


async def _all_ready(
    readies: list[asyncio.Event], tasks: list[asyncio.Task[None]], timeout: float
) -> None:
    """Every subscriber has its snapshot; a refused or ended stream fails at once."""
    ready: asyncio.Future[Any] = asyncio.ensure_future(asyncio.gather(*(r.wait() for r in readies)))
    waiting: set[asyncio.Future[Any]] = {ready, *tasks}
    done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    if ready in done:
        return
    for future in waiting:
        future.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    for future in done:
        future.result()  # the first subscriber's error
    missing = sum(not r.is_set() for r in readies)
    raise TimeoutError(f"{missing} subscribers had no snapshot after {timeout:.0f} s")


async def run_server(
    seed: Seed, fleet: Fleet, count: int, subs: int, redis_url: str, calls: int
) -> dict[str, Any]:
    port = free_port()
    env = {
        **os.environ,
        **seed.env(),
        "RELAYDESK_LOG_LEVEL": "warning",
        "RELAYDESK_REDIS_URL": redis_url,
    }
    # Every subscriber is one user on loopback: lift the caps on streams and pending requests.
    for cap in ("STREAMS_PER_PRINCIPAL", "STREAMS_PER_ADDRESS", "PENDING_REQUESTS_PER_ADDRESS"):
        env[f"RELAYDESK_MAX_{cap}"] = "0"
    if redis_url:  # Redis-backed replicas authenticate each other with the cluster secret
        env["RELAYDESK_CLUSTER_SECRET"] = secrets.token_urlsafe(24)
    log = seed.data_dir / f"server-{'redis' if redis_url else 'memory'}.log"
    server = ManagedProcess(relaydesk_argv("server", "--port", str(port)), log, env=env).start()
    base = f"http://127.0.0.1:{port}"
    try:
        server.wait_for_port(port, 30)
        while get_json(f"{base}/readyz")[0] != 200:
            await asyncio.sleep(0.05)
        gate = asyncio.Semaphore(CONCURRENCY)
        timeout = aiohttp.ClientTimeout(total=None)
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=timeout
        ) as session:
            ws_url = f"ws://127.0.0.1:{port}/relay/v1/connect"
            relays = await asyncio.gather(
                *(connect(session, ws_url, t, gate) for t in fleet.tokens)
            )
            await _until_listed(session, base, seed, count)
            latency = await list_latency(session, base, seed, calls)
            opened, delays = await fanout(session, base, seed, fleet, relays[0], subs)
            rss = psutil.Process(server.pid).memory_info().rss / 2**20
            await asyncio.gather(*(r.ws.close() for r in relays))
            await asyncio.gather(*(r.reader for r in relays if r.reader))
    finally:
        server.terminate(10)
    return {"list": latency, "fanout": delays, "opened": opened, "rss": rss}


async def _until_listed(session: aiohttp.ClientSession, base: str, seed: Seed, count: int) -> None:
    body = {"conversation_id": seed.conversation_id}
    headers = {"Authorization": f"Bearer {seed.api_token}"}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        async with session.post(
            f"{base}/api/v1/actions/desktop_list_active", json=body, headers=headers
        ) as response:
            rows = json.loads(await response.read())["desktops"]
        if sum(r["state"] == "running" for r in rows) >= count:
            return
        await asyncio.sleep(0.1)  # polling interval while the fleet reconciles
    raise TimeoutError("the inventory never listed every simulated desktop")


def report(name: str, result: dict[str, Any]) -> None:
    lst, fan = result["list"], result["fanout"]
    print(
        f"[{name}] desktop_list_active: p50 {percentile(lst, 0.5):.2f} ms  "
        f"p99 {percentile(lst, 0.99):.2f} ms (target p50 <= 20 ms)"
    )
    print(
        f"[{name}] SSE fan-out to {len(fan)} subscribers: p50 {percentile(fan, 0.5):.1f} ms  "
        f"p99 {percentile(fan, 0.99):.1f} ms (target p99 <= 250 ms)"
    )
    print(
        f"[{name}] {len(fan)} event streams opened (snapshot received) in {result['opened']:.2f} s"
    )
    print(f"[{name}] server RSS {result['rss']:.0f} MB")


async def main_async(count: int, subs: int, calls: int = LIST_CALLS) -> int:
    redis = start_redis()
    results: dict[str, dict[str, Any]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="relaydesk-bench-") as tmp:
            # Each bus gets a database of its own: a fleet the other server left behind would
            # keep the second one from listing every desktop as running for half a minute.
            for name, url in (("in-process", ""), ("redis", redis.url)):
                seed = await seed_database(Path(tmp) / name)
                print(f"==> [{name}] registering {count} relays, {subs} subscribers", flush=True)
                fleet = await register(seed, count)
                results[name] = await run_server(seed, fleet, count, subs, url, calls)
    finally:
        redis.stop()
    memory, on_redis = results["in-process"], results["redis"]
    report("in-process", memory)
    report("redis", on_redis)
    for key, label in (("list", "list p50"), ("fanout", "fan-out p99")):
        q = 0.5 if key == "list" else 0.99
        ratio = percentile(on_redis[key], q) / max(percentile(memory[key], q), 1e-9)
        print(f"ratio redis/in-process {label}: {ratio:.2f}x")
    return 0


def main() -> int:
    args = parser(__doc__ or "").parse_args()
    return asyncio.run(main_async(20, 50, 50) if args.quick else main_async(1000, 1000))


if __name__ == "__main__":
    sys.exit(main())
