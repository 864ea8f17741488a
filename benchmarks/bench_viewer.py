"""Viewing through the server vs. straight to the relay's websockify, interleaved A/B.

Same RFB client (``benchmarks/rfb.py``), same 1280x800 desktop, one run:

- (a) the relay's websockify directly (what a viewer beside the relay would get), the baseline;
- (b) the server's viewer WebSocket: server → relay channel (DATA frames with credit) → x11vnc;
- (c) reference: raw TCP to x11vnc, no WebSocket at all (what websockify's layer costs);
- (d) reference: the direct path (a relay beside the server, registered as co-located, as
  under ``relaydesk up``): a second relay and desktop, the server's viewer WebSocket connecting
  to x11vnc on loopback itself, interleaved with that desktop's websockify.

Measures full-screen Raw update throughput (MB/s), 1x1 update round trip (p50, p99), CPU
seconds per GB carried by the server and the relay processes (and by every process on each
path, the client and x11vnc included, to show what each path costs the machine), and both
processes' RSS with 10 viewers. Targets: throughput (b) >= 0.8 x (a); round-trip p50 (b) <=
(a) + 1.5 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import psutil

from benchmarks.common import parser, percentile
from benchmarks.rfb import RFBClient
from relay.config import DIRECT_HOST_ENV
from server.auth.capability import grant_for, mint
from server.config import load_or_create_secret
from tests.support.processes import ProcessTracker
from tests.support.stack import (
    Seed,
    seed_database,
    start_relay,
    start_server,
    stop_desktops_in,
    wait_until,
)

Opener = Callable[[], Awaitable[RFBClient]]
DESKTOP_ENV = {"RELAYDESK_WINDOW_MANAGER": "true", "RELAYDESK_DESKTOP_APPS": "xterm"}
# Idle benchmark clients answer no pings while another one is measured: production liveness.
SERVER_ENV = {"RELAYDESK_HEARTBEAT_S": "10", "RELAYDESK_LIVENESS_TIMEOUT_S": "30"}


async def throughput(client: RFBClient, seconds: float) -> tuple[float, int]:
    """(MB/s, bytes) of back-to-back full-screen Raw updates."""
    received = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        await client.request_update(incremental=False)
        for rect in await client.read_update():
            received += len(rect.pixels) + 12
    return received / (time.perf_counter() - start) / 1e6, received


async def round_trips(client: RFBClient, count: int) -> list[float]:
    samples = []
    for n in range(count):
        start = time.perf_counter()
        await client.request_update(False, n % 64, 0, 1, 1)
        await client.read_update()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def tree_cpu_seconds(process: psutil.Process) -> float:
    """CPU of a process and its live children (websockify serves each client in a child of
    its own, which lives as long as the client's connection)."""
    total = cpu_seconds(process)
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += cpu_seconds(child)
    return total


class PathCpu:
    """CPU seconds of every process on the data path, per path measured (client included)."""

    def __init__(self, processes: dict[str, psutil.Process]) -> None:
        self.processes = {"client": psutil.Process(), **processes}
        self.seconds: dict[str, dict[str, float]] = {}
        self.carried: dict[str, int] = {}

    def sample(self) -> dict[str, float]:
        return {
            name: tree_cpu_seconds(proc) if name == "websockify" else cpu_seconds(proc)
            for name, proc in self.processes.items()
        }

    def add(self, path: str, before: dict[str, float], carried: int) -> None:
        after = self.sample()
        spent = self.seconds.setdefault(path, dict.fromkeys(after, 0.0))
        for name, value in after.items():
            spent[name] += value - before[name]
        self.carried[path] = self.carried.get(path, 0) + carried

    def per_gigabyte(self, path: str) -> dict[str, float]:
        gigabytes = self.carried[path] / 1e9
        return {name: value / gigabytes for name, value in self.seconds[path].items()}


async def start_stack(
    workdir: Path, tracker: ProcessTracker, relay_env: dict[str, str] | None = None
) -> tuple[dict[str, str], dict[str, int], int, bytes]:
    # A relay run with the direct path is registered as co-located, as `relaydesk up` does.
    co_located = bool((relay_env or {}).get(DIRECT_HOST_ENV))
    seed = await seed_database(workdir / "data", co_located=co_located)
    server = await start_server(tracker.start, seed, env=SERVER_ENV)
    relay = start_relay(tracker.start, seed, server.url, env={**DESKTOP_ENV, **(relay_env or {})})
    await wait_until(lambda: server.relays_connected() == 1, 30, "the relay")
    headers = {"Authorization": f"Bearer {seed.api_token}"}
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
        answer = (
            await http.post(
                "/api/v1/actions/desktop_start",
                json={"conversation_id": seed.conversation_id, "geometry": "1280x800"},
                headers=headers,
            )
        ).json()
    result = answer.get("result", answer)
    session_id = result["desktop"]["desktop_session_id"]
    path = person_viewer_path(seed, session_id)
    record = desktop_record(seed, session_id)
    urls = {
        "direct": f"ws://127.0.0.1:{record['websockify_port']}/websockify",
        "server": f"ws://127.0.0.1:{server.port}{path}websockify",
    }
    pids = {p["name"]: int(p["pid"]) for p in record["processes"]}
    processes = {
        "server": server.process.pid,
        "relay": relay.pid,
        "x11vnc": pids["x11vnc"],
        "websockify": pids["websockify"],
    }
    # x11vnc and websockify demand the desktop's VNC secret; the server's path does not.
    return urls, processes, int(record["vnc_port"]), bytes.fromhex(record["vnc_secret"])


def person_viewer_path(seed: Seed, session_id: str) -> str:
    """A person's viewer of the desktop (what ``desktop_attach`` gives her web session: input
    is read on its way, as in use), minted with the server's own key; ``desktop_start`` with the
    API token answers an agent's view-only one."""
    where = (seed.user["user_id"], seed.conversation_id, seed.relay["relay_id"], session_id)
    grant = grant_for(*where, 3600, person=True)
    return f"/vnc/{session_id}/{mint(load_or_create_secret(seed.data_dir), grant)}/"


def desktop_record(seed: Seed, session_id: str) -> dict[str, Any]:
    """The desktop's record in the relay's state file (ports, processes)."""
    state = seed.data_dir / "relay-state" / "desktops.json"
    for record in json.loads(state.read_text())["desktops"]:
        if record["desktop_session_id"] == session_id:
            return dict(record)
    raise RuntimeError("desktop not in the relay's state file")


async def run(quick: bool) -> int:
    rounds, seconds, rtts = (1, 0.5, 50) if quick else (5, 3.0, 500)
    with tempfile.TemporaryDirectory(prefix="bench-viewer-") as tmp:
        tracker = ProcessTracker(Path(tmp) / "processes")
        try:
            urls, pids, vnc_port, secret = await start_stack(Path(tmp), tracker)
            server, relay = psutil.Process(pids["server"]), psutil.Process(pids["relay"])
            path_cpu = PathCpu({name: psutil.Process(pid) for name, pid in pids.items()})
            openers: dict[str, Opener] = {
                "direct": lambda: RFBClient.open_websocket(urls["direct"], secret),
                "server": lambda: RFBClient.open_websocket(urls["server"]),
                "tcp": lambda: RFBClient.open_tcp(vnc_port, secret=secret),
            }
            opens = {
                name: await open_times(openers[name], 3 if quick else 20)
                for name in ("direct", "server")
            }
            clients = {name: await opener() for name, opener in openers.items()}
            rates: dict[str, list[float]] = {name: [] for name in clients}
            latency: dict[str, list[float]] = {name: [] for name in clients}
            for client in clients.values():  # warm-up
                await throughput(client, 0.3)
            for _ in range(rounds):
                for name, client in clients.items():
                    before = path_cpu.sample()
                    rate, size = await throughput(client, seconds)
                    path_cpu.add(name, before, size)
                    rates[name].append(rate)
                    latency[name].extend(await round_trips(client, rtts // rounds))
            for client in clients.values():
                await client.close()
            rss = await rss_with_viewers(openers["server"], server, relay, 10)
        finally:
            tracker.cleanup()
            await stop_desktops_in(Path(tmp) / "data" / "relay-state")
    report(rates, latency, path_cpu, rss)
    report_open_times(opens)
    report_path_cpu(path_cpu)
    report_direct_path(await direct_path_rates(rounds, seconds))
    return 0


async def open_times(opener: Opener, count: int) -> list[float]:
    """Seconds from connecting to ServerInit (both security handshakes included), ``count``
    viewers one after the other."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        client = await opener()
        times.append(time.perf_counter() - started)
        await client.close()
    return times


def report_open_times(opens: dict[str, list[float]]) -> None:
    a, b = (percentile(opens[name], 0.5) * 1000 for name in ("direct", "server"))
    print(f"viewer open to ServerInit p50: (a) {a:.1f} ms, (b) {b:.1f} ms")


async def direct_path_rates(rounds: int, seconds: float) -> dict[str, list[float]]:
    """(d): websockify vs the server's direct path, on a stack whose relay registers it."""
    with tempfile.TemporaryDirectory(prefix="bench-viewer-direct-") as tmp:
        tracker = ProcessTracker(Path(tmp) / "processes")
        try:
            env = {DIRECT_HOST_ENV: "127.0.0.1"}
            urls, _, _, secret = await start_stack(Path(tmp), tracker, env)
            secrets = {"direct": secret, "server": None}
            clients = {
                name: await RFBClient.open_websocket(urls[name], secrets[name]) for name in urls
            }
            rates: dict[str, list[float]] = {name: [] for name in clients}
            for client in clients.values():  # warm-up
                await throughput(client, 0.3)
            for _ in range(rounds):
                for name, client in clients.items():
                    rates[name].append((await throughput(client, seconds))[0])
            for client in clients.values():
                await client.close()
        finally:
            tracker.cleanup()
            await stop_desktops_in(Path(tmp) / "data" / "relay-state")
    return rates


def report_path_cpu(path_cpu: PathCpu) -> None:
    """Every process's CPU per GB on (a) and (b): what each path costs the machine."""
    totals = {}
    for path, label in (("direct", "(a)"), ("server", "(b)")):
        spent = {k: v for k, v in path_cpu.per_gigabyte(path).items() if v >= 0.005}
        totals[path] = sum(spent.values())
        shares = ", ".join(f"{name} {value:.2f}" for name, value in spent.items())
        print(f"CPU per GB on {label}, every process: {shares}; total {totals[path]:.2f} s/GB")
    ratio = totals["direct"] / totals["server"]
    print(f"CPU per GB (a)/(b): {ratio:.2f} (while the CPUs are full, throughput follows it)")


def report_direct_path(rates: dict[str, list[float]]) -> None:
    ratios = sorted(s / d for s, d in zip(rates["server"], rates["direct"], strict=True))
    print(
        f"(d) direct path (relay beside the server): {percentile(rates['server'], 0.5):.1f} MB/s, "
        f"ratio to its websockify {percentile(ratios, 0.5):.2f} per-round median "
        f"({ratios[0]:.2f}-{ratios[-1]:.2f})"
    )


async def rss_with_viewers(
    opener: Opener, server: psutil.Process, relay: psutil.Process, count: int
) -> dict[str, float]:
    idle = {"server": server.memory_info().rss / 1e6, "relay": relay.memory_info().rss / 1e6}
    viewers = [await opener() for _ in range(count)]
    await asyncio.gather(*(throughput(v, 1.0) for v in viewers))
    loaded = {"server": server.memory_info().rss / 1e6, "relay": relay.memory_info().rss / 1e6}
    for viewer in viewers:
        await viewer.close()
    return {f"{k}_idle": v for k, v in idle.items()} | {f"{k}_10": v for k, v in loaded.items()}


def report(
    rates: dict[str, list[float]],
    latency: dict[str, list[float]],
    path_cpu: PathCpu,
    rss: dict[str, float],
) -> None:
    median = {name: percentile(values, 0.5) for name, values in rates.items()}
    p50 = {name: percentile(values, 0.5) for name, values in latency.items()}
    p99 = {name: percentile(values, 0.99) for name, values in latency.items()}
    labels = {
        "direct": "(a) websockify direct",
        "server": "(b) through the server",
        "tcp": "(c) raw TCP to x11vnc",
    }
    for name, label in labels.items():
        spread = f"({min(rates[name]):.0f}-{max(rates[name]):.0f})"
        print(
            f"{label:26s} throughput {median[name]:7.1f} MB/s {spread:11s} "
            f"1x1 round trip p50 {p50[name]:6.3f} ms  p99 {p99[name]:6.3f} ms"
        )
    # Rounds are interleaved, so each round's ratio compares the paths in one machine state.
    ratios = sorted(s / d for s, d in zip(rates["server"], rates["direct"], strict=True))
    ratio = percentile(ratios, 0.5)
    added = p50["server"] - p50["direct"]
    print(
        f"throughput ratio server/direct: {ratio:.2f} per-round median "
        f"({ratios[0]:.2f}-{ratios[-1]:.2f}) (target >= 0.80)"
    )
    print(f"round-trip p50 added by the server: {added:+.3f} ms (target <= +1.5 ms)")
    print(f"websockify layer vs raw TCP: throughput ratio {median['direct'] / median['tcp']:.2f}")
    gigabytes = path_cpu.carried["server"] / 1e9
    cpu = path_cpu.per_gigabyte("server")
    print(
        f"CPU per GB carried: server {cpu['server']:.2f} s/GB, "
        f"relay {cpu['relay']:.2f} s/GB ({gigabytes:.2f} GB)"
    )
    print(
        f"RSS idle → 10 viewers: server {rss['server_idle']:.0f} → {rss['server_10']:.0f} MB, "
        f"relay {rss['relay_idle']:.0f} → {rss['relay_10']:.0f} MB"
    )


def main() -> int:
    args = parser(__doc__ or "").parse_args()
    os.environ.setdefault("RELAYDESK_LOG_LEVEL", "warning")
    return asyncio.run(run(args.quick))


if __name__ == "__main__":
    sys.exit(main())
