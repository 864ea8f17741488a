"""x11vnc latency flags: relaydesk's choice against the common baseline, same run, same display.

Each candidate gets its own x11vnc and websockify on one shared Xvfb; an RFB client per
candidate connects through websockify (the path viewers use). Measured per candidate:

* 1x1 round trip: draw one pixel with a unique colour (python-xlib), time until a Raw update
  carrying that colour arrives (p50/p99); samples interleave the candidates (60 each; --quick: 5);
* full-screen Raw throughput: non-incremental 1280x800 updates, frames/s and MB/s;
* idle CPU of the x11vnc process with a connected, idle viewer.

Run: ``.venv/bin/python -m benchmarks.bench_x11vnc_flags [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import struct
import sys
import time
from dataclasses import dataclass, field

import psutil
from Xlib.display import Display

from benchmarks.rfb import RFBClient
from relay.desktops.config import BASELINE_X11VNC_FLAGS, LOW_LATENCY_X11VNC_FLAGS
from relay.desktops.displays import free_ports
from relay.desktops.launch import desktop_env, read_line
from relay.desktops.probe import poll_until_ready, rfb_banner_tcp
from relay.desktops.process import ChildProcess, DesktopProcesses

GEOMETRY = (1280, 800)
PIXEL = (37, 41)
CANDIDATES: dict[str, tuple[str, ...]] = {
    "baseline -wait 50": BASELINE_X11VNC_FLAGS,
    "x11vnc defaults": (),
    "chosen " + " ".join(LOW_LATENCY_X11VNC_FLAGS): LOW_LATENCY_X11VNC_FLAGS,
    "-wait 5 -defer 5 -nonap": ("-wait", "5", "-defer", "5", "-nonap"),
    "-wait 5 -defer 5 -nonap -noxdamage": ("-wait", "5", "-defer", "5", "-nonap", "-noxdamage"),
    "-wait 1 -defer 1 -nonap": ("-wait", "1", "-defer", "1", "-nonap"),
}
QUICK = ("baseline -wait 50", "chosen " + " ".join(LOW_LATENCY_X11VNC_FLAGS))


@dataclass
class Candidate:
    name: str
    flags: tuple[str, ...]
    vnc_port: int = 0
    ws_port: int = 0
    x11vnc: ChildProcess | None = None
    client: RFBClient | None = None
    latencies_ms: list[float] = field(default_factory=list)
    fps: float = 0.0
    mbps: float = 0.0
    idle_cpu_pct: float = 0.0


async def start_xvfb(procs: DesktopProcesses) -> int:
    read_fd, write_fd = os.pipe()
    w, h = GEOMETRY
    argv = ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", f"{w}x{h}x24", "-nolisten", "tcp"]
    procs.add(
        ChildProcess.spawn(
            "Xvfb", argv, env=desktop_env(0, None), essential=True, pass_fds=(write_fd,)
        )
    )
    os.close(write_fd)
    try:
        return int(await read_line(read_fd, time.monotonic() + 10, "Xvfb"))
    finally:
        os.close(read_fd)


async def start_candidate(c: Candidate, display: int, procs: DesktopProcesses) -> None:
    c.vnc_port, c.ws_port = free_ports(2)
    env = desktop_env(display, None)
    argv = [
        "x11vnc",
        "-display",
        f":{display}",
        "-localhost",
        "-shared",
        "-forever",
        "-nopw",
        "-quiet",
        "-rfbport",
        str(c.vnc_port),
        *c.flags,
    ]
    c.x11vnc = procs.add(ChildProcess.spawn("x11vnc", argv, env=env, essential=True))
    ws = [sys.executable, "-m", "websockify", f"127.0.0.1:{c.ws_port}", f"127.0.0.1:{c.vnc_port}"]
    procs.add(ChildProcess.spawn("websockify", ws, env=env, essential=True))
    deadline = time.monotonic() + 15
    await poll_until_ready(lambda: rfb_banner_tcp(c.vnc_port, 3), deadline, c.name)
    url = f"http://127.0.0.1:{c.ws_port}/websockify"
    c.client = await poll_until_ready(lambda: RFBClient.open_websocket(url), deadline, c.name)
    await c.client.request_update(incremental=False)
    await c.client.read_update()
    await c.client.request_update(incremental=True)


def draw(xdisplay: Display, colour: int) -> None:
    root = xdisplay.screen().root
    gc = root.create_gc(foreground=colour)
    root.fill_rectangle(gc, PIXEL[0], PIXEL[1], 1, 1)
    gc.free()
    xdisplay.sync()


async def wait_for_colour(client: RFBClient, colour: int) -> None:
    want = struct.pack("<I", colour)[:3]
    while True:
        rects = await client.read_update()
        await client.request_update(incremental=True)
        if any(r.contains(*PIXEL) and r.pixel(*PIXEL)[:3] == want for r in rects):
            return


async def measure_latency(cands: list[Candidate], xdisplay: Display, samples: int) -> None:
    colour = 0x102030
    for _ in range(samples):
        for c in cands:
            assert c.client is not None
            colour = (colour * 1103515245 + 12345) & 0xFFFFFF or 1
            started = time.perf_counter()
            draw(xdisplay, colour)
            await asyncio.wait_for(wait_for_colour(c.client, colour), 10)
            c.latencies_ms.append((time.perf_counter() - started) * 1000)


async def measure_throughput(c: Candidate, frames: int) -> None:
    assert c.client is not None
    started = time.perf_counter()
    total = 0
    for _ in range(frames):
        await c.client.request_update(incremental=False)
        rects = await c.client.read_update()
        total += sum(len(r.pixels) for r in rects)
    elapsed = time.perf_counter() - started
    c.fps, c.mbps = frames / elapsed, total / elapsed / 1e6


async def measure_idle_cpu(cands: list[Candidate], seconds: float) -> None:
    procs = {c.name: psutil.Process(c.x11vnc.pid) for c in cands if c.x11vnc}
    before = {n: sum(p.cpu_times()[:2]) for n, p in procs.items()}
    await asyncio.sleep(seconds)
    for c in cands:
        c.idle_cpu_pct = (sum(procs[c.name].cpu_times()[:2]) - before[c.name]) / seconds * 100


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(cands: list[Candidate]) -> None:
    base = cands[0]
    print(
        f"{'flags':40} {'p50 ms':>7} {'p99 ms':>7} {'fps':>6} {'MB/s':>7} {'idle %':>6}"
        f" {'p50 vs base':>11} {'MB/s vs base':>12}"
    )
    for c in cands:
        p50 = statistics.median(c.latencies_ms)
        ratio = p50 / statistics.median(base.latencies_ms)
        p99 = pct(c.latencies_ms, 0.99)
        print(
            f"{c.name:40} {p50:7.2f} {p99:7.2f} {c.fps:6.1f} {c.mbps:7.1f}"
            f" {c.idle_cpu_pct:6.2f} {ratio:10.2f}x {c.mbps / base.mbps:11.2f}x"
        )


async def run(quick: bool) -> list[Candidate]:
    names = QUICK if quick else tuple(CANDIDATES)
    cands = [Candidate(n, CANDIDATES[n]) for n in names]
    procs = DesktopProcesses()
    clients: list[RFBClient] = []
    try:
        display = await start_xvfb(procs)
        for c in cands:
            await start_candidate(c, display, procs)
            assert c.client is not None
            clients.append(c.client)
        xdisplay = Display(f":{display}")
        await measure_latency(cands, xdisplay, 5 if quick else 60)
        await measure_idle_cpu(cands, 1.0 if quick else 10.0)
        for c in cands:
            await measure_throughput(c, 3 if quick else 40)
        xdisplay.close()
    finally:
        for client in clients:
            await client.close()
        await procs.stop(grace_s=3)
    return cands


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: few samples")
    args = parser.parse_args(argv)
    cands = asyncio.run(run(args.quick))
    print(f"x11vnc flags, {GEOMETRY[0]}x{GEOMETRY[1]}x24, through websockify, same display")
    report(cands)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
