"""The screen tool end to end: HTTP → server → relay → server, on real desktops, one run.

1. screenshot round trip (``POST /api/v1/actions/screen``) at 1280x800 and 1920x1080, p50/p99,
   next to the relay-local capture + PNG encode cost of the same desktop, the two interleaved
   in rounds (targets: round trip <= 1.5x local, <= 40 ms p50 at 1280x800 PNG);
2. guard overhead on the relay: guarded vs unguarded click through ``ScreenService`` (target
   <= 3 ms added at p50), and the same pair end to end;
3. click round trip end to end with a revision (target p50 <= 10 ms);
4. server memory per retained revision (tracemalloc) and the memory bound under many
   screenshots (1,000; ``--quick``: 20);
5. zoom round trips (a 320x200 region at scale 1 and 2, and with a grid) next to the full
   screenshot round trip of the same desktop, interleaved in rounds; and a screenshot with a
   grid next to the plain one.

Round trips are timed with ``benchmarks.common.HttpClient``, a minimal HTTP/1.1 client on one
kept-alive connection that sends the request, reads the whole response and parses its JSON:
what is measured is the server and the relay, not a client library. The screenshot round trip is
also printed through aiohttp's client (one kept-alive connection), which added 0.1-1.0 ms per
request at p50 of its own here (httpx ~1.5 ms).

Run: ``python -m benchmarks.bench_screen [--quick]``. Needs Xvfb, x11vnc and websockify.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_screen_local import _paint_desktop_like
from benchmarks.common import HttpClient, click_call, parser, percentile
from relay.screen.capture import ScreenCapture, encode_screenshot
from relay.screen.service import ScreenService
from relaydesk.allocator import tune_allocator
from server.screen.revisions import Binding, Capture, RevisionStore
from tests.support.processes import ProcessTracker
from tests.support.stack import Seed, inprocess_server, seed_database, start_relay, wait_until
from wire.guard import crop_digest, crop_rect, cut, encode_crop
from wire.ids import RelayId

SIZES = ((1280, 800), (1920, 1080))
CLICK_AT = (640, 400)
ROUNDS = 10


SCREEN_PATH = "/api/v1/actions/screen"


@dataclass
class Bench:
    app: Any
    http: HttpClient
    client: aiohttp.ClientSession
    url: str
    seed: Seed
    relay_id: str

    async def screen(self, **body: Any) -> dict[str, Any]:
        payload = {"conversation_id": self.seed.conversation_id, **body}
        status, result = await self.http.post_json(SCREEN_PATH, payload)
        return _checked(status, result, body)

    async def screen_aiohttp(self, **body: Any) -> dict[str, Any]:
        """:meth:`screen` through aiohttp's client (for comparison)."""
        payload = {"conversation_id": self.seed.conversation_id, **body}
        async with self.client.post(self.url + SCREEN_PATH, json=payload) as response:
            result: dict[str, Any] = await response.json()
        return _checked(response.status, result, body)


def _checked(status: int, result: Any, body: dict[str, Any]) -> dict[str, Any]:
    if status != 200 or not isinstance(result, dict):
        raise RuntimeError(f"screen {body.get('action')} failed ({status}): {result}")
    return result


def _line(name: str, samples: list[float]) -> str:
    p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
    return f"{name:44s} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  (n={len(samples)})"


async def _timed(fn: Any, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        times.append((time.perf_counter() - start) * 1000)
    return times


def _local_cost(display: str, size: tuple[int, int], repeat: int) -> list[float]:
    """What the relay spends on a screenshot itself: mss capture + PNG encode (its own code)."""
    capture = ScreenCapture(display)
    times = []
    try:
        for _ in range(repeat):
            start = time.perf_counter()
            encode_screenshot(capture.grab_bgra(None, size))
            times.append((time.perf_counter() - start) * 1000)
    finally:
        capture.close()
    return times


@contextlib.asynccontextmanager
async def running_stack(root: Path) -> AsyncIterator[Bench]:
    seed = await seed_database(root / "data")
    tracker = ProcessTracker(root / "processes")
    async with inprocess_server(seed) as (app, url):
        env = {"RELAYDESK_DESKTOP_APPS": ",", "RELAYDESK_LOG_LEVEL": "warning"}
        start_relay(tracker.start, seed, url, env=env, extra_args=("--stop-desktops-on-exit",))
        relay_id = seed.relay["relay_id"]
        headers = {"Authorization": f"Bearer {seed.api_token}"}
        try:
            await wait_until(
                lambda: app.state.parts.relays.is_connected(RelayId(relay_id)),
                30,
                "the relay to connect",
            )
            timeout = aiohttp.ClientTimeout(total=60)
            http = HttpClient(url, headers)
            try:
                async with aiohttp.ClientSession(headers=headers, timeout=timeout) as client:
                    yield Bench(app, http, client, url, seed, relay_id)
            finally:
                await http.close()
        finally:
            # Off the loop: the relay's close handshake needs this process's server.
            await asyncio.to_thread(tracker.cleanup)


async def _desktop(bench: Bench, slot: str, size: tuple[int, int]) -> dict[str, Any]:
    args = {"kind": "virtual", "slot": slot, "geometry": f"{size[0]}x{size[1]}"}
    row: dict[str, Any] = await bench.app.state.parts.relays.request(
        RelayId(bench.relay_id), "desktop.start", args, 60
    )
    return row


async def bench_screenshots(bench: Bench, rows: dict[tuple[int, int], Any], repeat: int) -> None:
    print("\n1. screenshot round trip (HTTP -> server -> relay -> server) vs relay-local cost")
    for size, row in rows.items():
        body = {"action": "screenshot", "desktop_session_id": row["desktop_session_id"]}
        await bench.screen(**body)  # warm up
        await bench.screen_aiohttp(**body)
        trip: list[float] = []
        via_aiohttp: list[float] = []
        local: list[float] = []
        batch = repeat // ROUNDS
        for _ in range(ROUNDS):  # interleaved, so load on the machine hits all alike
            trip += await _timed(lambda body=body: bench.screen(**body), batch)
            via_aiohttp += await _timed(lambda body=body: bench.screen_aiohttp(**body), batch)
            local += await asyncio.to_thread(_local_cost, row["display"], size, batch)
        ratio = percentile(trip, 0.5) / percentile(local, 0.5)
        ratio_aiohttp = percentile(via_aiohttp, 0.5) / percentile(local, 0.5)
        label = f"{size[0]}x{size[1]}"
        print(_line(f"  {label} round trip (PNG)", trip))
        print(_line(f"  {label} same, aiohttp's client", via_aiohttp))
        print(_line(f"  {label} local capture + PNG encode", local))
        target = " and <= 40 ms p50" if size == (1280, 800) else ""
        print(
            f"  {label} ratio round trip / local p50: x{ratio:.2f} (target <= 1.5{target}); "
            f"through aiohttp's client x{ratio_aiohttp:.2f}"
        )


async def _relay_clicks(
    display: str, guarded: bool, repeat: int, digest: bool = False
) -> list[float]:
    """Clicks through the relay's screen service: unguarded, or guarded by the crop itself or
    (``digest``) by its digest, as a server sends it when it expects the region unchanged."""
    svc = ScreenService()
    try:
        args: dict[str, Any] = {"x": CLICK_AT[0], "y": CLICK_AT[1]}
        if guarded:
            shot = await svc.screenshot(display, {})
            rect = crop_rect(CLICK_AT, (shot.width, shot.height))
            crop = cut(shot.pixels, rect)
            reference = {"digest": crop_digest(crop)} if digest else {"crop": encode_crop(crop)}
            args["guard"] = {**reference, "rect": rect.to_dict()}
        click = click_call(svc, display, args, guarded)
        await click()  # opens the display's connections
        return await _timed(click, repeat)
    finally:
        await svc.aclose()


async def bench_clicks(bench: Bench, row: dict[str, Any], repeat: int) -> None:
    print("\n2. guard overhead (1280x800, default 128x96 crop)")
    plain = await _relay_clicks(row["display"], False, repeat)
    guarded = await _relay_clicks(row["display"], True, repeat)
    by_digest = await _relay_clicks(row["display"], True, repeat, digest=True)
    added = percentile(guarded, 0.5) - percentile(plain, 0.5)
    print(_line("  relay: unguarded click", plain))
    print(_line("  relay: guarded click (crop)", guarded))
    print(_line("  relay: guarded click (digest, unchanged region)", by_digest))
    by_digest_added = percentile(by_digest, 0.5) - percentile(plain, 0.5)
    print(
        f"  relay: guard adds p50 {added:.2f} ms with the crop (target <= 3 ms), "
        f"{by_digest_added:.2f} ms with the digest"
    )

    session = row["desktop_session_id"]
    shot = await bench.screen(action="screenshot", desktop_session_id=session)
    move = {"action": "move", "x": CLICK_AT[0], "y": CLICK_AT[1], "desktop_session_id": session}
    click = {**move, "action": "click", "expected_screen_revision": shot["screen_revision"]}
    await bench.screen(**click)
    moves: list[float] = []
    clicks: list[float] = []
    for _ in range(repeat):  # interleaved, so load on the machine hits both alike
        moves += await _timed(lambda: bench.screen(**move), 1)
        clicks += await _timed(lambda: bench.screen(**click), 1)
    print("\n3. click round trip end to end (HTTP -> server guard -> relay compare -> XTEST)")
    print(_line("  unguarded pointer action (move)", moves))
    print(_line("  guarded click with revision", clicks))
    end_added = percentile(clicks, 0.5) - percentile(moves, 0.5)
    print(
        f"  click p50 {percentile(clicks, 0.5):.2f} ms (target <= 10 ms); "
        f"guard + crop cut add p50 {end_added:.2f} ms end to end"
    )


async def bench_memory(bench: Bench, row: dict[str, Any], count: int) -> None:
    print(f"\n4. revision memory (1280x800, {count} screenshots)")
    tool = bench.app.state.parts.screen
    session = row["desktop_session_id"]
    body = {"action": "screenshot", "desktop_session_id": session}
    # Retained memory of the store itself, for the relay's real screenshot answers.
    answers = [
        await bench.app.state.parts.relays.request(
            RelayId(bench.relay_id), "screen.screenshot", {"desktop_session_id": session}, 60
        )
        for _ in range(10)
    ]
    store = RevisionStore("bench-key", memory_bytes=1 << 40)
    binding = Binding(bench.relay_id, session, str(row["display"]))
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for answer in answers:
        # As the server gets it: parsed from the relay's message (the text is kept, not copied).
        wire = json.loads(json.dumps(answer))
        store.keep(binding, Capture.from_wire(wire["capture"], wire["image"]))
        del wire
    per_revision = (tracemalloc.get_traced_memory()[0] - before) / len(answers)
    tracemalloc.stop()
    stats = store.stats()
    raw = 1280 * 800 * 3
    print(
        f"  retained per revision (tracemalloc): {per_revision / 1024:.1f} KiB; accounted "
        f"{stats.memory_bytes / stats.entries / 1024:.1f} KiB; raw RGB would be "
        f"{raw / 1024:.0f} KiB (ratio x{per_revision / raw:.3f})"
    )

    bound = int(per_revision * count / 10)  # room for ~1/10 of the screenshots
    tool.revisions = RevisionStore("bench-key", memory_bytes=bound)
    peak = 0
    for _ in range(count):
        await bench.screen(**body)
        peak = max(peak, tool.revisions.stats().memory_bytes)
    stats = tool.revisions.stats()
    print(
        f"  bound {bound / 1024:.0f} KiB: peak accounted {peak / 1024:.0f} KiB "
        f"(ratio peak/bound x{peak / bound:.2f}), kept {stats.entries}, "
        f"evicted {stats.evicted_for_memory}"
    )
    if peak > bound:
        raise SystemExit("the revision store exceeded its memory bound")


ZOOM_REGION = {"x": 480, "y": 300, "width": 320, "height": 200}


async def bench_zoom(bench: Bench, row: dict[str, Any], repeat: int) -> None:
    print("\n5. zoom round trip vs full screenshot round trip (1280x800 desktop, PNG)")
    session = {"desktop_session_id": row["desktop_session_id"]}
    bodies: dict[str, dict[str, Any]] = {
        "full screenshot": {"action": "screenshot"},
        "screenshot, grid": {"action": "screenshot", "grid": True},
        "zoom 320x200, scale 1": {"action": "zoom", "region": ZOOM_REGION},
        "zoom 320x200, scale 2": {"action": "zoom", "region": ZOOM_REGION, "scale": 2},
        "zoom 320x200, scale 2, grid": {
            "action": "zoom",
            "region": ZOOM_REGION,
            "scale": 2,
            "grid": True,
        },
    }
    samples: dict[str, list[float]] = {name: [] for name in bodies}
    for body in bodies.values():
        await bench.screen(**body, **session)  # warm up
    batch = max(1, repeat // ROUNDS)
    for _ in range(ROUNDS):  # interleaved, so load on the machine hits all alike
        for name, body in bodies.items():
            samples[name] += await _timed(lambda body=body: bench.screen(**body, **session), batch)
    full = percentile(samples["full screenshot"], 0.5)
    for name, times in samples.items():
        print(_line(f"  {name}", times) + f"  ratio to full x{percentile(times, 0.5) / full:.2f}")


async def run(quick: bool) -> None:
    repeat = 10 if quick else 100
    with tempfile.TemporaryDirectory(prefix="bench-screen-") as tmp:
        async with running_stack(Path(tmp)) as bench:
            rows = {size: await _desktop(bench, f"s{size[0]}", size) for size in SIZES}
            # Painting blocks for a while: off the loop that serves the relay's heartbeats.
            painters = [
                await asyncio.to_thread(_paint_desktop_like, r["display"], *size)
                for size, r in rows.items()
            ]
            try:
                await bench_screenshots(bench, rows, repeat)
                await bench_clicks(bench, rows[SIZES[0]], 8 if quick else 200)
                await bench_memory(bench, rows[SIZES[0]], 20 if quick else 1000)
                await bench_zoom(bench, rows[SIZES[0]], repeat)
            finally:
                for painter in painters:
                    painter.close()


def main(argv: list[str] | None = None) -> None:
    options = parser(__doc__ or "").parse_args(argv)
    # The server runs in this process: set it up as `relaydesk server` sets itself up
    # (glibc thresholds, and uvloop, which uvicorn picks when it is installed).
    tune_allocator()
    uvloop.run(run(options.quick))


if __name__ == "__main__":
    main()
