"""People stay in charge: what the takeover lock and the agent grants cost, one run.

A real relay and desktop, the server in this process on uvloop (as uvicorn runs it):

1. **person key → refusal.** A viewer (``benchmarks/rfb.py`` on the server's viewer
   WebSocket) sends one KeyEvent; at once an agent sends ``screen move`` actions back to back
   on one kept-alive connection until one is refused with ``takeover_active``. Measured: from
   writing the key to reading that refusal, p50 and p99 (target p99 <= 50 ms). Between trials
   the lock is handed back.
2. **viewer throughput, input parsing on vs off.** Back-to-back full-screen Raw updates
   through the server's viewer WebSocket, each request preceded by a pointer motion, so the
   parser has input to read. Each round runs two viewers at the same time, one whose stream
   is parsed and one whose is not (``ViewerService.watch_input`` when each opens), so the
   machine's load swings hit both alike; the ratio is the median of the per-round ratios
   (target >= 0.97). The parser's own cost per message is printed too.
3. **grant overhead.** ``screen move`` round trips with the control gate (a live grant:
   resolve the desktop, admit, track in flight, mark the action) and without it (the gate
   replaced by a pass-through), interleaved in rounds. Target: p50 with the gate <= p50
   without + 0.5 ms. The gate's own cost in process (no HTTP, no relay), and the admission
   alone (``ControlService.admit``), are printed too: on a shared machine the round trips'
   difference is mostly the machine's noise.

Run: ``python -m benchmarks.bench_takeover [--quick]``. Needs Xvfb, x11vnc and websockify.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest.mock import patch

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import HttpClient, parser, percentile
from benchmarks.rfb import RFBClient, RFBError
from relaydesk.allocator import tune_allocator
from server.actions.context import ActionContext
from server.auth.capability import grant_for, mint
from server.auth.principal import Principal
from server.control.model import AgentRequest, DesktopKey
from server.control.screen import screen_input
from tests.support.processes import ProcessTracker
from tests.support.stack import Seed, inprocess_server, seed_database, start_relay, wait_until
from wire.errors import OpError
from wire.ids import RelayId, UserId
from wire.rfb_client import RfbClientStream

SCREEN_PATH = "/api/v1/actions/screen"
MOVE = {"action": "move", "x": 640, "y": 400}


def key_event(keysym: int = 0xFFE1) -> bytes:
    """Shift down and up: a person's key that types nothing."""
    return struct.pack(">BBHI", 4, 1, 0, keysym) + struct.pack(">BBHI", 4, 0, 0, keysym)


def pointer_event(x: int, y: int) -> bytes:
    return struct.pack(">BBHH", 5, 0, x, y)


@dataclass
class Bench:
    app: Any
    url: str
    seed: Seed
    relay_id: RelayId
    http: HttpClient
    session_id: str = ""

    @property
    def key(self) -> DesktopKey:
        return DesktopKey(self.relay_id, self.session_id)

    async def move(self) -> tuple[int, Any]:
        body = {"conversation_id": self.seed.conversation_id, **MOVE}
        return await self.http.post_json(SCREEN_PATH, body)

    async def viewer(self) -> RFBClient:
        settings = self.app.state.parts.settings
        grant = grant_for(
            self.seed.user["user_id"],
            self.seed.conversation_id,
            self.relay_id,
            self.session_id,
            600,
            person=True,
        )
        token = mint(settings.secret_key, grant)
        ws = self.url.replace("http://", "ws://")
        return await RFBClient.open_websocket(f"{ws}/vnc/{self.session_id}/{token}/websockify")


@contextlib.asynccontextmanager
async def running_stack(root: Path) -> AsyncIterator[Bench]:
    seed = await seed_database(root / "data")
    tracker = ProcessTracker(root / "processes")
    async with inprocess_server(seed) as (app, url):
        env = {
            "RELAYDESK_DESKTOP_APPS": ",",
            "RELAYDESK_WINDOW_MANAGER": "true",
            "RELAYDESK_LOG_LEVEL": "warning",
        }
        start_relay(tracker.start, seed, url, env=env, extra_args=("--stop-desktops-on-exit",))
        relay_id = RelayId(seed.relay["relay_id"])
        http = HttpClient(url, {"Authorization": f"Bearer {seed.api_token}"})
        try:
            await wait_until(
                lambda: app.state.parts.relays.is_connected(relay_id), 30, "the relay to connect"
            )
            bench = Bench(app, url, seed, relay_id, http)
            status, started = await http.post_json(
                "/api/v1/actions/desktop_start",
                {"conversation_id": seed.conversation_id, "geometry": "1280x800"},
            )
            assert status == 200, started
            bench.session_id = started["desktop"]["desktop_session_id"]
            yield bench
        finally:
            await http.close()
            # Off the loop: the relay's close handshake needs this process's server.
            await asyncio.to_thread(tracker.cleanup)


# -- 1. person key → refusal -------------------------------------------------------------------


async def refusal_latencies(bench: Bench, trials: int) -> tuple[list[float], list[int]]:
    """Milliseconds from a viewer's key to the agent's first refused input; and how many of the
    agent's inputs were accepted in between (the key was still on its way)."""
    control = bench.app.state.parts.control
    viewer = await bench.viewer()
    # Read what the desktop sends, so the socket answers the server's pings meanwhile.
    reader = asyncio.create_task(drain(viewer))
    samples, accepted = [], []
    try:
        for _ in range(trials):
            await control.hand_back(bench.key)
            status, body = await bench.move()
            assert status == 200, body  # the agent holds a live grant: nobody else is in control
            start = time.perf_counter()
            await viewer.t.write(key_event())
            passed = 0
            while (answer := await bench.move())[0] == 200:
                passed += 1
            assert answer[1]["error"]["code"] == "takeover_active", answer
            samples.append((time.perf_counter() - start) * 1000)
            accepted.append(passed)
    finally:
        reader.cancel()
        await viewer.t.close()
        await control.hand_back(bench.key)
    return samples, accepted


async def drain(client: RFBClient) -> None:
    with contextlib.suppress(RFBError):
        while True:
            await client.t.read_exactly(1)


# -- 2. viewer throughput, parsing on vs off -----------------------------------------------------


async def moving_throughput(client: RFBClient, seconds: float) -> float:
    """MB/s of back-to-back full-screen Raw updates, a pointer motion written before each
    request."""
    received, x = 0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        x = (x + 7) % 1280
        await client.t.write(pointer_event(x, 300))
        await client.request_update(incremental=False)
        for rect in await client.read_update():
            received += len(rect.pixels) + 12
    return received / (time.perf_counter() - start) / 1e6


async def parsing_rates(bench: Bench, rounds: int, seconds: float) -> dict[str, list[float]]:
    """Per round, two viewers pull updates at the same time, one read by the parser and one
    not: whatever load the machine is under falls on both alike. Which one opens first
    alternates between rounds."""
    viewer_service = bench.app.state.parts.viewer
    rates: dict[str, list[float]] = {"on": [], "off": []}
    try:
        for round_ in range(rounds):
            clients: dict[str, RFBClient] = {}
            for arm in ("on", "off") if round_ % 2 == 0 else ("off", "on"):
                viewer_service.watch_input = arm == "on"  # read when a viewer opens
                clients[arm] = await bench.viewer()
            try:
                await asyncio.gather(*(moving_throughput(c, 0.3) for c in clients.values()))
                measured = await asyncio.gather(
                    *(moving_throughput(clients[arm], seconds) for arm in ("on", "off"))
                )
                rates["on"].append(measured[0])
                rates["off"].append(measured[1])
            finally:
                for client in clients.values():
                    await client.t.close()
    finally:
        viewer_service.watch_input = True
        await bench.app.state.parts.control.hand_back(bench.key)
    return rates


# -- 3. grant overhead ----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def ungated(ctx: Any, args: Any, refused: Any) -> AsyncIterator[None]:
    """The screen action as it was before the control gate: no gate at all."""
    yield


async def move_round_trips(
    bench: Bench, rounds: int, per_round: int
) -> list[dict[str, list[float]]]:
    """Per round, ``per_round`` round trips with the gate and as many without (the order
    alternates): the two halves of a round see about the same load."""
    rounds_: list[dict[str, list[float]]] = []
    for round_ in range(rounds):
        samples: dict[str, list[float]] = {}
        for arm in ("gate", "none") if round_ % 2 == 0 else ("none", "gate"):
            with contextlib.ExitStack() as stack:
                if arm == "none":
                    stack.enter_context(patch("server.screen.action.screen_input", ungated))
                await bench.move()  # warm
                samples[arm] = await timed(bench.move, per_round)
        rounds_.append(samples)
    return rounds_


async def timed(call: Callable[[], Awaitable[tuple[int, Any]]], count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        status, body = await call()
        times.append((time.perf_counter() - start) * 1000)
        assert status == 200, body
    return times


def parse_cost_us(count: int) -> float:
    """Microseconds the parser spends on one viewer message (a pointer motion and an update
    request per WebSocket message, as in the throughput rounds), in this process."""
    stream = RfbClientStream()
    stream.feed(b"RFB 003.008\n\x01\x01")
    messages = [
        pointer_event(i % 1280, 300) + struct.pack(">BBHHHH", 3, 0, 0, 0, 1280, 800)
        for i in range(count)
    ]
    start = time.perf_counter()
    for message in messages:
        stream.feed(message)
    return (time.perf_counter() - start) / count * 1e6


async def gate_times(bench: Bench, count: int) -> dict[str, list[float]]:
    """In process, milliseconds: the admission alone, and the whole gate of a screen input
    (resolve the desktop, track it in flight, admit, mark the action) around no input."""
    parts = bench.app.state.parts
    principal = Principal(UserId("bench-agent"), "bench-agent", False, "token")
    ctx = ActionContext(
        parts.actions.parts, principal, bench.seed.conversation_id, "write", "api", "b"
    )
    await ctx.resolve_relay(None)
    request = AgentRequest("bench-agent", "bench-agent")

    async def gate() -> None:
        async with screen_input(ctx, dict(MOVE), never_refused):
            pass

    async def admission() -> None:
        await parts.control.admit(bench.key, request)

    times: dict[str, list[float]] = {"admit": [], "gate": []}
    for _ in range(count):
        for name, call in (("admit", admission), ("gate", gate)):
            start = time.perf_counter()
            await call()
            times[name].append((time.perf_counter() - start) * 1000)
    return times


async def never_refused(error: OpError) -> None:
    raise AssertionError(f"the benchmark's agent was refused: {error.message}")


# -- report ---------------------------------------------------------------------------------------


def report_refusals(samples: list[float], accepted: list[int]) -> None:
    p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
    verdict = "ok" if p99 <= 50 else "OVER TARGET"
    print(
        f"person key -> agent refusal: p50 {p50:.2f} ms  p99 {p99:.2f} ms  max "
        f"{max(samples):.2f} ms  n={len(samples)}  (target p99 <= 50 ms: {verdict})"
    )
    print(
        f"  agent inputs accepted between the key and the refusal: mean "
        f"{statistics.fmean(accepted):.2f}, max {max(accepted)}"
    )


def report_parsing(rates: dict[str, list[float]], cost_us: float) -> None:
    ratios = [on / off for on, off in zip(rates["on"], rates["off"], strict=True)]
    ratio = statistics.median(ratios)
    verdict = "ok" if ratio >= 0.97 else "UNDER TARGET"
    on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
    print(
        f"viewer throughput, parsing on / off: ratio {ratio:.3f} (per round "
        f"{min(ratios):.3f}-{max(ratios):.3f}; on {on:.0f} MB/s, off {off:.0f} MB/s; "
        f"target >= 0.97: {verdict})"
    )
    print(f"  the parser's own cost: {cost_us:.2f} us per viewer message (in process)")


def report_overhead(rounds: list[dict[str, list[float]]], gates: dict[str, list[float]]) -> None:
    pooled = {arm: [t for r in rounds for t in r[arm]] for arm in ("gate", "none")}
    gate, none = percentile(pooled["gate"], 0.5), percentile(pooled["none"], 0.5)
    paired = statistics.median(
        percentile(r["gate"], 0.5) - percentile(r["none"], 0.5) for r in rounds
    )
    verdict = "ok" if paired <= 0.5 else "OVER TARGET"
    print(
        f"screen move round trip p50: with the gate {gate:.3f} ms, without {none:.3f} ms "
        f"(ratio {gate / none:.3f}); difference, median of the rounds' p50 differences "
        f"{paired:+.3f} ms (target <= +0.5 ms: {verdict})"
    )
    print(
        f"  p99: with {percentile(pooled['gate'], 0.99):.3f} ms, without "
        f"{percentile(pooled['none'], 0.99):.3f} ms"
    )
    print(
        f"  in process, p50: the whole gate {percentile(gates['gate'], 0.5) * 1000:.0f} us, "
        f"the admission alone {percentile(gates['admit'], 0.5) * 1000:.0f} us"
    )


async def run(quick: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-takeover-") as tmp:
        async with running_stack(Path(tmp)) as bench:
            samples, accepted = await refusal_latencies(bench, 20 if quick else 300)
            rates = await parsing_rates(bench, 2 if quick else 20, 0.5 if quick else 1.0)
            trips = await move_round_trips(bench, 2 if quick else 20, 20 if quick else 50)
            gates = await gate_times(bench, 50 if quick else 2000)
    report_refusals(samples, accepted)
    report_parsing(rates, parse_cost_us(20_000 if quick else 200_000))
    report_overhead(trips, gates)


def main(argv: list[str] | None = None) -> None:
    options = parser(__doc__ or "").parse_args(argv)
    tune_allocator()
    uvloop.run(run(options.quick))


if __name__ == "__main__":
    main()
