"""Relay-local screen-tool costs on a private Xvfb.

1. capture + encode at 1280x800 and 1920x1080: the chosen PNG settings vs Pillow defaults
   (compress_level 6), plus optimize=True, JPEG and WebP, with sizes;
2. guarded click vs unguarded click through ``ScreenService`` (target: <= 3 ms added at p50).

Ratios are against baselines measured in the same run. ``--quick`` is a smoke run.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import click_call
from relay.screen.capture import ScreenCapture, encode
from relay.screen.service import ScreenService
from tests.support.xvfb import private_xvfb
from wire.guard import crop_rect, cut, encode_crop

SIZES = ((1280, 800), (1920, 1080))


def _timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median wall time in ms and the last result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), result


def _pillow_png(rgb: np.ndarray, **options: Any) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buffer, "PNG", **options)
    return buffer.getvalue()


def _paint_desktop_like(display: str, width: int, height: int) -> Any:
    """Draw flat panels, text-like bars and a photo-like patch; returns the open connection."""
    from Xlib import X
    from Xlib import display as xdisplay

    conn = xdisplay.Display(display)
    root = conn.screen().root
    depth = conn.screen().root_depth
    win = root.create_window(
        0,
        0,
        width,
        height,
        0,
        depth,
        X.InputOutput,
        X.CopyFromParent,
        background_pixel=0xF0F0F0,
        override_redirect=True,
    )
    win.map()
    conn.sync()
    rng = np.random.default_rng(1)
    gc = win.create_gc(foreground=0x2B579A)
    win.fill_rectangle(gc, 0, 0, width, 32)
    for row in range(60, height - 40, 18):
        for _ in range(6):
            x, w = int(rng.integers(20, width - 200)), int(rng.integers(20, 180))
            gc.change(foreground=int(rng.integers(0, 0x606060)))
            win.fill_rectangle(gc, x, row, w, 10)
    photo = rng.integers(0, 256, (120, 160), dtype=np.uint32) * 0x010101
    for y in range(120):
        for x in range(0, 160, 4):
            gc.change(foreground=int(photo[y, x]))
            win.fill_rectangle(gc, width - 200 + x, 80 + y, 4, 1)
    conn.sync()
    return conn  # the window lives as long as this connection: close it after capturing


def bench_encode(display: str, width: int, height: int, repeat: int) -> None:
    capture = ScreenCapture(display)
    try:
        grab_ms, rgb = _timed(lambda: capture.grab(None, (width, height)), repeat)
        rows = {
            "png default (level 6)": lambda: _pillow_png(rgb),
            "png level 1 (Pillow)": lambda: _pillow_png(rgb, compress_level=1),
            "png banded (chosen)": lambda: encode(rgb, "png").data,
            "png level 1 + optimize": lambda: _pillow_png(rgb, compress_level=1, optimize=True),
            "png level 3": lambda: _pillow_png(rgb, compress_level=3),
            "png Z_RLE (type 3)": lambda: _pillow_png(rgb, compress_level=6, compress_type=3),
            "jpeg q80": lambda: encode(rgb, "jpeg").data,
            "webp q80 m2": lambda: encode(rgb, "webp").data,
        }
        print(f"\n{width}x{height}: capture (mss) median {grab_ms:.2f} ms")
        measured = {name: _timed(fn, repeat) for name, fn in rows.items()}
        base_ms, base = measured["png default (level 6)"]
        for name, (ms, data) in measured.items():
            print(
                f"  {name:26s} {ms:8.2f} ms  {len(data) / 1024:8.1f} KiB  "
                f"time x{ms / base_ms:5.2f}  size x{len(data) / len(base):5.2f}"
            )
    finally:
        capture.close()


async def _click_times(svc: ScreenService, display: str, guarded: bool, repeat: int) -> list[float]:
    times = []
    point = (640, 400)
    guard = None
    if guarded:
        shot = await svc.screenshot(display, {})
        rect = crop_rect(point, (shot.width, shot.height))
        guard = {"crop": encode_crop(cut(shot.pixels, rect)), "rect": rect.to_dict()}
    for _ in range(repeat):
        args: dict[str, Any] = {"x": point[0], "y": point[1]}
        if guard is not None:
            args["guard"] = guard
        click = click_call(svc, display, args, guarded)
        start = time.perf_counter()
        await click()
        times.append((time.perf_counter() - start) * 1000)
    return times


async def bench_guard(display: str, repeat: int) -> None:
    svc = ScreenService()
    try:
        await _click_times(svc, display, False, 3)  # warm up connections
        plain = await _click_times(svc, display, False, repeat)
        guarded = await _click_times(svc, display, True, repeat)
    finally:
        await svc.aclose()
    p50_plain, p50_guarded = statistics.median(plain), statistics.median(guarded)
    p90 = statistics.quantiles(guarded, n=10)[-1] - statistics.quantiles(plain, n=10)[-1]
    added = p50_guarded - p50_plain
    print(
        f"\nclick p50 unguarded {p50_plain:.3f} ms, guarded {p50_guarded:.3f} ms, "
        f"added p50 {added:.3f} ms (target <= 3 ms), added p90 {p90:.3f} ms"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few repetitions (smoke run)")
    options = parser.parse_args(argv)
    repeat = 3 if options.quick else 15
    for width, height in SIZES:
        with private_xvfb(width, height) as server:
            painter = _paint_desktop_like(server.display, width, height)
            bench_encode(server.display, width, height, repeat)
            painter.close()
    with private_xvfb(1280, 800) as server:
        asyncio.run(bench_guard(server.display, 20 if options.quick else 200))


if __name__ == "__main__":
    main()
