"""Faults between relay and server (a fault-injecting TCP proxy of the tests' own): latency,
bandwidth limits, connection resets, half-open connections, slow reads.

Under each fault: no request hangs past its timeout, no desktop is stopped that nobody asked to
stop, memory stays bounded, and once the fault ends the relay reconnects, the same session is
running, and compare-and-stop is exact (a stale id conflicts, the right one stops).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.support.faultproxy import Fault, FaultProxy
from tests.support.processes import ProcessFactory, scaled
from tests.support.stack import Seed, inprocess_server, seed_database, start_relay, wait_until
from wire.ids import RelayId

pytestmark = pytest.mark.integration

REQUEST_TIMEOUT_S = 4.0
# What a fault may add to the in-process server's memory (bounded queues and windows).
MEMORY_BOUND_MB = 64
FAULT_S = 6.0
STALE_SESSION = "0" * 32


@dataclass
class Stack:
    app: Any
    seed: Seed
    proxy: FaultProxy
    client: httpx.AsyncClient

    @property
    def relay_id(self) -> RelayId:
        return RelayId(self.seed.relay["relay_id"])

    async def call(self, name: str, **args: Any) -> tuple[int, Any]:
        args.setdefault("conversation_id", self.seed.conversation_id)
        headers = {"Authorization": f"Bearer {self.seed.api_token}"}
        response = await self.client.post(f"/api/v1/actions/{name}", json=args, headers=headers)
        return response.status_code, response.json()

    def connected(self) -> bool:
        return bool(self.app.state.parts.relays.is_connected(self.relay_id))


@pytest.fixture
async def stack(tmp_path: Path, process_factory: ProcessFactory) -> AsyncIterator[Stack]:
    seed = await seed_database(tmp_path / "data")
    # Clients wait at most a little longer than the server's own timeout of a relay request.
    limit = httpx.Timeout(scaled(REQUEST_TIMEOUT_S) + scaled(5))
    async with (
        inprocess_server(seed, request_timeout_s=scaled(REQUEST_TIMEOUT_S)) as (app, url),
        FaultProxy(int(url.rsplit(":", 1)[1])) as proxy,
        httpx.AsyncClient(base_url=url, timeout=limit) as client,
    ):
        start_relay(process_factory, seed, proxy.url)
        stack = Stack(app, seed, proxy, client)
        await wait_until(stack.connected, 20, "the relay to connect through the proxy")
        yield stack
        stack.proxy.fault = Fault()
        for row in await app.state.parts.inventory.live_rows(stack.relay_id):
            await stack.call(
                "desktop_stop_confirm",
                relay="relay-1",
                kind=row.kind,
                slot=row.slot,
                desktop_session_id=row.desktop_session_id,
            )


async def _start(stack: Stack) -> str:
    status, body = await stack.call("desktop_start", relay="relay-1", slot="main")
    assert status == 200, body
    return str(body["desktop"]["desktop_session_id"])


async def _bounded_request(stack: Stack) -> int:
    """A status probe never outlives the server's request timeout by more than a margin."""
    began = time.monotonic()
    status, _ = await stack.call("desktop_status", relay="relay-1")
    assert time.monotonic() - began < scaled(REQUEST_TIMEOUT_S) + scaled(3)
    assert status in (200, 502, 504), status
    return status


async def _running_session(stack: Stack) -> str | None:
    status, body = await stack.call("desktop_list_active", probe=True)
    rows = [r for r in body.get("desktops", []) if r["state"] == "running"] if status == 200 else []
    return str(rows[0]["desktop_session_id"]) if rows else None


def _rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


async def _under_fault(stack: Stack, apply: Callable[[FaultProxy], None]) -> None:
    """Apply the fault for ``FAULT_S`` while requests run, then clear it."""
    apply(stack.proxy)
    deadline = time.monotonic() + scaled(FAULT_S)
    while time.monotonic() < deadline:
        await _bounded_request(stack)
    stack.proxy.fault = Fault()


def _latency(proxy: FaultProxy) -> None:
    proxy.fault.latency_s = 0.2


def _bandwidth(proxy: FaultProxy) -> None:
    proxy.fault.bandwidth_bps = 32 * 1024


def _blackhole(proxy: FaultProxy) -> None:
    proxy.fault.blackhole = True


def _slow_reads(proxy: FaultProxy) -> None:
    proxy.fault.slow_read_bytes = 512


def _resets(proxy: FaultProxy) -> None:
    proxy.reset()


FAULTS: dict[str, Callable[[FaultProxy], None]] = {
    "latency": _latency,
    "bandwidth": _bandwidth,
    "half_open": _blackhole,
    "slow_reads": _slow_reads,
    "reset": _resets,
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_fault_between_relay_and_server_stops_nothing_and_heals(
    stack: Stack, fault: str
) -> None:
    session = await _start(stack)
    rss_before = _rss_mb()
    await _under_fault(stack, FAULTS[fault])
    assert _rss_mb() - rss_before < MEMORY_BOUND_MB

    await wait_until(stack.connected, 30, "the relay to reconnect after the fault")
    await _eventually(lambda: _running_session(stack), session, "the same session running")
    status, body = await stack.call(
        "desktop_stop_confirm",
        relay="relay-1",
        kind="virtual",
        slot="main",
        desktop_session_id=STALE_SESSION,
    )
    assert status == 409 and body["error"]["code"] == "session_conflict", body
    assert await _running_session(stack) == session
    status, body = await stack.call(
        "desktop_stop_confirm",
        relay="relay-1",
        kind="virtual",
        slot="main",
        desktop_session_id=session,
    )
    assert status == 200, body
    assert await _running_session(stack) is None


async def _eventually(probe: Callable[[], Awaitable[str | None]], expected: str, what: str) -> None:
    deadline = time.monotonic() + scaled(20)
    seen: str | None = None
    while time.monotonic() < deadline:
        seen = await probe()
        if seen == expected:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what}: expected {expected}, last saw {seen}")
