"""x11vnc's RFB banner on a new connection to an idle desktop, and what keeping it quick costs.

A pooled or resumed desktop's first frame in a new viewer starts with x11vnc's banner. With no
client connected, x11vnc's main loop sleeps 200 ms between looks at its listening socket
(whatever ``-wait``, ``-defer`` or ``-nap`` say), so a new connection waits 0 to 200 ms for its
banner. Each candidate gets its own x11vnc on one shared Xvfb (1280x800x24), left idle; then:

* banner latency: TCP connect → the 12-byte ``RFB 003.008`` banner, p50/max over interleaved
  samples (20 each; --quick: 3), each at a random moment;
* first frame: TCP connect → handshake → one whole FramebufferUpdate, sampled the same way;
* idle CPU of the x11vnc process over a window (10 s; --quick: 1 s), all candidates at once.

The baseline is relaydesk's flags with nobody connected, measured in the same run.

Run: ``.venv/bin/python -m benchmarks.bench_x11vnc_banner [--quick]``.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from dataclasses import dataclass, field

import psutil

from benchmarks.bench_x11vnc_flags import start_xvfb
from benchmarks.common import parser
from benchmarks.rfb import RFBClient
from relay.desktops.config import LOW_LATENCY_X11VNC_FLAGS
from relay.desktops.displays import free_ports
from relay.desktops.launch import desktop_env
from relay.desktops.probe import poll_until_ready, rfb_banner_tcp
from relay.desktops.process import ChildProcess, DesktopProcesses

CHOSEN = LOW_LATENCY_X11VNC_FLAGS
WAIT_5 = ("-wait", "5", "-defer", "5", "-nonap")


@dataclass
class Candidate:
    name: str
    flags: tuple[str, ...]
    held: bool = False  # one idle viewer kept connected, so x11vnc never waits for a client
    version_first: bool = False  # the client sends its version before the banner (the relay)
    port: int = 0
    x11vnc: ChildProcess | None = None
    client: RFBClient | None = None
    banner_ms: list[float] = field(default_factory=list)
    frame_ms: list[float] = field(default_factory=list)
    idle_cpu_pct: float = 0.0


CANDIDATES = (
    Candidate("baseline: chosen flags, nobody connected", CHOSEN),
    Candidate("chosen flags + -threads", (*CHOSEN, "-threads")),
    Candidate("chosen flags, one idle viewer held", CHOSEN, held=True),
    Candidate("-wait 5 -defer 5 -nonap, one idle viewer held", WAIT_5, held=True),
    Candidate("chosen flags, the client's version sent first", CHOSEN, version_first=True),
)


async def start(c: Candidate, display: int, procs: DesktopProcesses) -> None:
    (c.port,) = free_ports(1)
    argv = ["x11vnc", "-display", f":{display}", "-localhost", "-shared", "-forever"]
    argv += ["-nopw", "-quiet", "-rfbport", str(c.port), *c.flags]
    env = desktop_env(display, None)
    c.x11vnc = procs.add(ChildProcess.spawn("x11vnc", argv, env=env, essential=True))
    await poll_until_ready(lambda: rfb_banner_tcp(c.port, 3), time.monotonic() + 15, c.name)
    if c.held:
        c.client = await RFBClient.open_tcp(c.port)
        await c.client.request_update(incremental=False)
        await c.client.read_update()
        await c.client.request_update(incremental=True)  # as a viewer page keeps one pending


async def banner_ms(port: int, version_first: bool) -> float:
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if version_first:
        writer.write(b"RFB 003.008\n")
    try:
        banner = await asyncio.wait_for(reader.readexactly(12), 5)
    finally:
        writer.close()
    if not banner.startswith(b"RFB "):
        raise RuntimeError(f"bad banner {banner!r}")
    return (time.perf_counter() - started) * 1000


async def frame_ms(port: int, version_first: bool) -> float:
    started = time.perf_counter()
    client = await RFBClient.open_tcp(port, version_first=version_first)
    try:
        await client.request_update(incremental=False)
        await asyncio.wait_for(client.read_update(), 5)
    finally:
        await client.close()
    return (time.perf_counter() - started) * 1000


async def measure(cands: list[Candidate], samples: int, window_s: float) -> None:
    for _ in range(samples):
        for c in random.sample(cands, len(cands)):
            await asyncio.sleep(random.uniform(0.3, 0.7))  # idle again, at a random phase
            c.banner_ms.append(await banner_ms(c.port, c.version_first))
            await asyncio.sleep(random.uniform(0.3, 0.7))
            c.frame_ms.append(await frame_ms(c.port, c.version_first))
    await asyncio.sleep(1.0)
    processes = {c.name: psutil.Process(c.x11vnc.pid) for c in cands if c.x11vnc}
    before = {n: sum(p.cpu_times()[:2]) for n, p in processes.items()}
    await asyncio.sleep(window_s)
    for c in cands:
        used = sum(processes[c.name].cpu_times()[:2]) - before[c.name]
        c.idle_cpu_pct = used / window_s * 100


async def run(quick: bool) -> list[Candidate]:
    cands = [Candidate(c.name, c.flags, c.held, c.version_first) for c in CANDIDATES]
    procs = DesktopProcesses()
    try:
        display = await start_xvfb(procs)
        for c in cands:
            await start(c, display, procs)
        await asyncio.sleep(3.0)  # long enough idle for any nap to begin
        await measure(cands, 3 if quick else 20, 1.0 if quick else 10.0)
    finally:
        for c in cands:
            if c.client is not None:
                await c.client.close()
        await procs.stop(grace_s=3)
    return cands


def report(cands: list[Candidate]) -> None:
    base = statistics.median(cands[0].banner_ms)
    base_frame = statistics.median(cands[0].frame_ms)
    print(
        f"{'candidate':48} {'banner p50':>10} {'max':>7} {'vs base':>8}"
        f" {'frame p50':>9} {'vs base':>8} {'idle CPU':>9}"
    )
    for c in cands:
        p50, frame = statistics.median(c.banner_ms), statistics.median(c.frame_ms)
        print(
            f"{c.name:48} {p50:8.1f}ms {max(c.banner_ms):5.1f}ms {p50 / base:7.3f}x"
            f" {frame:7.1f}ms {frame / base_frame:7.3f}x {c.idle_cpu_pct:7.2f} %"
        )


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    cands = asyncio.run(run(args.quick))
    print("x11vnc banner on a new connection to an idle desktop, 1280x800x24, same display")
    report(cands)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
