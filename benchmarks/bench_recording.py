"""Recording a desktop vs. the same desktop unrecorded, in one run (docs/recording.md).

A real server and relay (separate processes) and one 1280x800 desktop showing a browsing-like
workload: a 1280x800 "page" of text-like bars that scrolls 40 px every 250 ms, with a new page
every 3 s. Phases of ``--seconds`` each (default 60; 5 with ``--quick``):

- (a) the workload, not recorded: the relay's and the server's CPU (the baseline);
- (b) the same workload, recorded: their CPU again, and the stored bytes → MB per hour;
- (c) an idle desktop, recorded: the stored bytes → MB per hour;
- (d) the recording of (b) in headless Chromium's <video>: seek to random moments, time from
  setting ``currentTime`` to the frame shown (``requestVideoFrameCallback``), p50.

Sound (a second desktop of the same relay, with audio; (a) to (c) run on one without, so they
measure the picture alone):

- (e) the workload recorded while a 440 Hz tone plays: CPU and bytes against (b);
- (f) a still screen while the tone plays, unrecorded, then (g) recorded: the CPU the sound
  alone adds, and its MB per hour;
- (h) the same desktop still and silent, recorded: what silence costs.

What sound adds is best read on the still screen, against (c) (the same still screen recorded
without sound): the busy phases' pictures differ with the load (a repaint caught half-drawn
costs more bytes), so their video tracks are printed apart from their audio tracks.

The relay's CPU counts its audio capture (``parec``, a child of the relay) while recording.
Targets: relay CPU added ≤ 10 % of one core; server CPU added ≤ 2 %; ≤ 40 MB/h busy,
≤ 5 MB/h idle; seek → frame p50 ≤ 500 ms. The load average is printed with the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import av
import httpx
import psutil
from Xlib import display as xdisplay

from benchmarks.bench_audio import tone
from benchmarks.common import parser, percentile
from tests.support.processes import ProcessTracker
from tests.support.stack import (
    seed_database,
    start_relay,
    start_server,
    stop_desktops_in,
    wait_until,
)

DESKTOP_ENV = {
    "RELAYDESK_WINDOW_MANAGER": "true",
    "RELAYDESK_DESKTOP_APPS": "true",
    "RELAYDESK_RECORDING_SEGMENT_S": "4",
}
SERVER_ENV = {"RELAYDESK_HEARTBEAT_S": "10", "RELAYDESK_LIVENESS_TIMEOUT_S": "30"}
WIDTH, HEIGHT = 1280, 800
SEEKS = 20


class Browsing:
    """Paints the browsing-like workload on a display from a thread, until stopped."""

    def __init__(self, display: str) -> None:
        self.conn = xdisplay.Display(display)
        screen = self.conn.screen()
        self.window = screen.root.create_window(
            0,
            0,
            WIDTH,
            HEIGHT,
            0,
            screen.root_depth,
            background_pixel=0xFFFFFF,
            override_redirect=True,
        )
        self.window.map()
        self.gcs = [self.window.create_gc(foreground=c) for c in (0x202020, 0x3060C0, 0x808080)]
        self.conn.sync()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Browsing:
        self._thread.start()
        return self

    def _page(self, seed: int, scroll: int) -> None:
        rng = random.Random(seed)
        self.window.clear_area(0, 0, WIDTH, HEIGHT)
        for line in range(120):
            y = 20 + line * 22 - scroll
            if -20 < y < HEIGHT:
                width = rng.randrange(200, 1100)
                self.window.fill_rectangle(self.gcs[line % 3], 60, y, width, 12)
        self.conn.sync()

    def _run(self) -> None:
        page, scroll, began = 0, 0, time.monotonic()
        while not self._stop.wait(0.25):
            if time.monotonic() - began >= 3.0:
                page, scroll, began = page + 1, 0, time.monotonic()
            else:
                scroll += 40
            self._page(page, scroll)

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self.window.destroy()
        self.conn.close()


def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def captures(relay: psutil.Process) -> dict[int, psutil.Process]:
    """The relay's audio captures (``parec``): their CPU is the relay's."""
    found = {}
    for child in relay.children(recursive=True):
        try:
            if child.name() == "parec":
                found[child.pid] = child
        except psutil.Error:
            continue
    return found


async def measure(processes: dict[str, psutil.Process], seconds: float) -> dict[str, float]:
    """Each process's CPU over ``seconds``, as a share of one core (the relay's with its
    audio captures)."""
    before = {name: cpu_s(p) for name, p in processes.items()}
    capture_before = {pid: cpu_s(p) for pid, p in captures(processes["relay"]).items()}
    began = time.monotonic()
    await asyncio.sleep(seconds)
    spent = time.monotonic() - began
    shares = {name: (cpu_s(p) - before[name]) / spent for name, p in processes.items()}
    for pid, capture in captures(processes["relay"]).items():
        with contextlib.suppress(psutil.Error):
            shares["relay"] += (cpu_s(capture) - capture_before.get(pid, 0.0)) / spent
    return shares


class Bench:
    def __init__(self, http: httpx.AsyncClient, cid: str, session: str, state: Path) -> None:
        self.http, self.cid, self.session, self.state = http, cid, session, state

    def on(self, session: str) -> Bench:
        return Bench(self.http, self.cid, session, self.state)

    async def action(self, name: str, **args: Any) -> dict[str, Any]:
        body = {"conversation_id": self.cid, "desktop_session_id": self.session, **args}
        answer = await self.http.post(f"/api/v1/actions/{name}", json=body)
        assert answer.status_code == 200, answer.text
        result: dict[str, Any] = answer.json()
        return result

    async def recorded(self, seconds: float, processes: dict[str, psutil.Process]) -> Any:
        """Record for ``seconds``: (CPU shares, stored bytes, recording id, length in s)."""
        on = await self.action("desktop_record", on=True)
        cpu = await measure(processes, seconds)
        await self.action("desktop_record", on=False)
        spool = self.state / "recordings" / self.session
        await wait_until(lambda: not spool.exists(), 60, "the segments handed over")
        path = f"/api/v1/conversations/{self.cid}/recordings/{on['recording_id']}"
        summary = (await self.http.get(path)).json()["recording"]
        return cpu, summary["bytes"], on["recording_id"], summary["duration_ms"] / 1000

    async def tracks(self, recording_id: str) -> dict[str, float]:
        """The recording's video and audio tracks: bytes per second of the recording."""
        path = f"/api/v1/conversations/{self.cid}/recordings/{recording_id}"
        length_s = (await self.http.get(path)).json()["recording"]["duration_ms"] / 1000
        data = (await self.http.get(f"{path}/video")).content
        sizes: dict[str, float] = {"video": 0.0, "audio": 0.0}
        with av.open(io.BytesIO(data), "r") as container:
            for packet in container.demux():
                if packet.size and packet.stream.type in sizes:
                    sizes[packet.stream.type] += packet.size / length_s
        return sizes


async def seek_p50(url: str, token: str, path: str, length_s: float, seeks: int) -> float:
    from playwright.async_api import async_playwright

    from tests.support.browser import CHROMIUM, CHROMIUM_ARGS

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=list(CHROMIUM_ARGS)
        )
        try:
            context = await browser.new_context(
                extra_http_headers={"Authorization": f"Bearer {token}"}
            )
            page = await context.new_page()
            await page.goto(f"{url}/healthz")
            await page.evaluate(
                "(src) => new Promise((ok, fail) => { const v = document.createElement('video');"
                " v.id = 'v'; v.muted = true; v.preload = 'auto'; v.src = src;"
                " v.onloadeddata = ok; v.onerror = () => fail(String(v.error && v.error.code));"
                " document.body.append(v); })",
                path,
            )
            rng = random.Random(7)
            times = []
            for _ in range(seeks):
                to = rng.uniform(0, max(0.1, length_s - 0.2))
                shown_ms = await page.evaluate(
                    "(to) => new Promise((ok) => { const v = document.getElementById('v');"
                    " const t0 = performance.now();"
                    " v.requestVideoFrameCallback(() => ok(performance.now() - t0));"
                    " v.currentTime = to; })",
                    to,
                )
                times.append(float(shown_ms))
            return percentile(times, 0.5)
        finally:
            await browser.close()


async def run(quick: bool, seconds: float | None) -> int:
    seconds = seconds or (5.0 if quick else 60.0)
    with tempfile.TemporaryDirectory(prefix="bench-recording-") as tmp:
        tracker = ProcessTracker(Path(tmp) / "processes")
        try:
            seed = await seed_database(Path(tmp) / "data")
            server = await start_server(tracker.start, seed, env=SERVER_ENV)
            relay = start_relay(tracker.start, seed, server.url, env=DESKTOP_ENV)
            await wait_until(lambda: server.relays_connected() == 1, 30, "the relay")
            headers = {"Authorization": f"Bearer {seed.api_token}"}
            cid = seed.conversation_id
            async with httpx.AsyncClient(base_url=server.url, timeout=120, headers=headers) as http:

                async def start(slot: str, audio: bool) -> tuple[str, str]:
                    body: dict[str, Any] = {"conversation_id": cid, "slot": slot}
                    body |= {"geometry": f"{WIDTH}x{HEIGHT}", "audio": audio}
                    answer = await http.post("/api/v1/actions/desktop_start", json=body)
                    assert answer.status_code == 200, answer.text
                    started = answer.json()["desktop"]
                    return started["desktop_session_id"], started["display"]

                session, display = await start("main", False)
                sound_session, sound_display = await start("sound", True)
                bench = Bench(http, cid, session, Path(seed.env()["RELAYDESK_STATE_DIR"]))
                sound = bench.on(sound_session)
                processes = {
                    "server": psutil.Process(server.process.pid),
                    "relay": psutil.Process(relay.pid),
                }
                load_before = os.getloadavg()
                workload = Browsing(display).start()
                try:
                    await asyncio.sleep(1.0)
                    plain = await measure(processes, seconds)
                    busy_cpu, busy_bytes, busy_id, busy_s = await bench.recorded(seconds, processes)
                finally:
                    workload.stop()
                await asyncio.sleep(1.0)
                idle_cpu, idle_bytes, _, idle_s = await bench.recorded(seconds, processes)
                # The desktop with sound: the workload with a tone, then a still screen.
                workload = Browsing(sound_display).start()
                try:
                    with tone(sound_display, 4 * seconds + 30):
                        await asyncio.sleep(1.0)
                        heard_cpu, heard_bytes, heard_id, heard_s = await sound.recorded(
                            seconds, processes
                        )
                        workload.stop()
                        await asyncio.sleep(1.0)
                        still_plain = await measure(processes, seconds)
                        still_cpu, still_bytes, still_id, still_s = await sound.recorded(
                            seconds, processes
                        )
                finally:
                    workload.stop()
                await asyncio.sleep(1.0)
                silent = await sound.recorded(seconds, processes)
                silent_cpu, silent_bytes, silent_id, silent_s = silent
                tracks = {
                    what: await sound.tracks(rid)
                    for what, rid in (
                        ("busy", heard_id),
                        ("still", still_id),
                        ("silent", silent_id),
                    )
                }
                video = f"/api/v1/conversations/{cid}/recordings/{busy_id}/video"
                seek = await seek_p50(
                    server.url, seed.api_token, video, busy_s, 5 if quick else SEEKS
                )
                load_after = os.getloadavg()
        finally:
            tracker.cleanup()
            await stop_desktops_in(Path(tmp) / "data" / "relay-state")
    report(
        seconds,
        plain,
        busy_cpu,
        busy_bytes / busy_s,
        idle_bytes / idle_s,
        seek,
        load_before,
        load_after,
    )
    report_sound(
        idle_cpu,
        silent_cpu,
        busy_cpu,
        busy_bytes / busy_s,
        heard_cpu,
        heard_bytes / heard_s,
        still_plain,
        still_cpu,
        still_bytes / still_s,
        silent_bytes / silent_s,
        tracks,
    )
    return 0


def report(
    seconds: float,
    plain: dict[str, float],
    recorded: dict[str, float],
    busy_bytes_s: float,
    idle_bytes_s: float,
    seek_ms: float,
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
) -> None:
    relay_added = (recorded["relay"] - plain["relay"]) * 100
    server_added = (recorded["server"] - plain["server"]) * 100
    busy_mb_h, idle_mb_h = busy_bytes_s * 3600 / 1e6, idle_bytes_s * 3600 / 1e6
    codec = os.environ.get("RELAYDESK_RECORDING_CODEC", "h264")
    print(f"phases of {seconds:.0f} s, 1280x800, browsing-like workload, {codec}")
    cores = os.cpu_count()
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} ({cores} cores)")
    print(
        f"relay CPU: unrecorded {plain['relay'] * 100:.1f} % of a core, recorded "
        f"{recorded['relay'] * 100:.1f} %: added {relay_added:.1f} % (target <= 10)"
    )
    print(
        f"server CPU: unrecorded {plain['server'] * 100:.1f} %, recorded "
        f"{recorded['server'] * 100:.1f} %: added {server_added:.1f} % (target <= 2)"
    )
    print(f"storage: busy {busy_mb_h:.1f} MB/h (target <= 40), idle {idle_mb_h:.2f} MB/h (<= 5)")
    print(f"seek -> frame shown: p50 {seek_ms:.0f} ms (target <= 500)")
    ratio = recorded["relay"] / plain["relay"] if plain["relay"] else float("inf")
    print(f"relay CPU ratio recorded/unrecorded: {ratio:.2f}")


def report_sound(
    idle: dict[str, float],
    silent: dict[str, float],
    busy: dict[str, float],
    busy_bytes_s: float,
    heard: dict[str, float],
    heard_bytes_s: float,
    still_plain: dict[str, float],
    still: dict[str, float],
    still_bytes_s: float,
    silent_bytes_s: float,
    tracks: dict[str, dict[str, float]],
) -> None:
    def mb_h(rate: float) -> float:
        return rate * 3600 / 1e6

    for what, sizes in tracks.items():
        print(
            f"sound, {what} recording's tracks: video {mb_h(sizes['video']):.1f} MB/h, "
            f"audio {mb_h(sizes['audio']):.1f} MB/h"
        )

    print(
        f"sound, workload: relay CPU recorded without sound {busy['relay'] * 100:.1f} %, "
        f"with a tone {heard['relay'] * 100:.1f} %: sound added "
        f"{(heard['relay'] - busy['relay']) * 100:.1f} %; storage {mb_h(busy_bytes_s):.1f} -> "
        f"{mb_h(heard_bytes_s):.1f} MB/h (+{mb_h(heard_bytes_s - busy_bytes_s):.1f})"
    )
    print(
        f"sound, still screen with a tone: relay CPU unrecorded {still_plain['relay'] * 100:.1f} "
        f"%, recorded {still['relay'] * 100:.1f} %: added "
        f"{(still['relay'] - still_plain['relay']) * 100:.1f} %; storage "
        f"{mb_h(still_bytes_s):.1f} MB/h"
    )
    print(
        f"sound, still screen recorded: relay CPU without sound (the desktop of (c)) "
        f"{idle['relay'] * 100:.1f} %, with a tone {still['relay'] * 100:.1f} %: sound added "
        f"{(still['relay'] - idle['relay']) * 100:.1f} %; silent, with sound on "
        f"{silent['relay'] * 100:.1f} %: silence added "
        f"{(silent['relay'] - idle['relay']) * 100:.1f} %"
    )
    print(f"sound, still and silent, recorded: storage {mb_h(silent_bytes_s):.2f} MB/h")


def main() -> int:
    p = parser(__doc__ or "")
    p.add_argument("--seconds", type=float, default=None, help="length of each phase")
    args = p.parse_args()
    return asyncio.run(run(args.quick, args.seconds))


if __name__ == "__main__":
    sys.exit(main())
