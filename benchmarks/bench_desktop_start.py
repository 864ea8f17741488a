"""Virtual desktop start time, memory and idle CPU.

* start → first RFB banner through websockify (what a viewer needs), p50 over 10 starts
  (target <= 1.5 s), full desktop: Xvfb, D-Bus, openbox, x11vnc, websockify, autocutsel, xterm;
* relay-side RSS (this process plays the relay) and desktop-side PSS with 4 desktops;
* idle CPU of every desktop process group over 30 s with the watchdog running (2 s interval),
  plus the relay's own CPU for the watchdog;
* the same start for the ``minimal`` and ``standard`` profiles, interleaved in one run: start →
  first frame (RFB handshake through websockify with the desktop's VNC secret, then the first
  FramebufferUpdate; target: standard <= 1.5x minimal, its apps start in the background) and,
  for ``standard``, start → browser window mapped (target <= 3 s); idle CPU and memory per
  standard desktop.

Run: ``.venv/bin/python -m benchmarks.bench_desktop_start [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import aiohttp
import psutil

from benchmarks.rfb import RFBClient
from relay.desktops import DesktopSettings, ProcessDesktops, process_desktops
from relay.desktops.probe import rfb_banner_ws
from wire.ops import RelayRow

TARGET_START_S = 1.5
TARGET_PROFILE_RATIO = 1.5
TARGET_BROWSER_S = 3.0


def browser_mapped(config: DesktopSettings, display: str) -> bool:
    env = {"PATH": os.environ["PATH"], "DISPLAY": display, "XAUTHORITY": str(config.authority_file)}
    done = subprocess.run(["wmctrl", "-l"], env=env, capture_output=True, text=True, check=False)
    return "Chromium" in done.stdout


async def first_frame(mgr: ProcessDesktops, row: RelayRow) -> None:
    """What a viewer waits for: the RFB handshake through websockify, then a whole frame."""
    secret = mgr.launcher.vnc_secret(row["desktop_session_id"])
    url = f"ws://127.0.0.1:{row['websockify_port']}/websockify"
    client = await RFBClient.open_websocket(url, secret)
    try:
        await client.request_update(incremental=False)
        async with asyncio.timeout(10):
            await client.read_update()
    finally:
        await client.close()


async def time_profile_start(
    mgr: ProcessDesktops, profile: str, wait_browser: bool
) -> tuple[float, float | None]:
    """(start → first frame, start → browser window mapped, or None when not waited for or
    not seen within 20 s) of one start."""
    started = time.perf_counter()
    row = await mgr.start(profile=profile)
    try:
        await first_frame(mgr, row)
        frame = time.perf_counter() - started
        browser = None
        while wait_browser and time.perf_counter() - started < 20:
            if await asyncio.to_thread(browser_mapped, mgr.config, row["display"] or ""):
                browser = time.perf_counter() - started
                break
            await asyncio.sleep(0.05)
    finally:
        await mgr.stop(kind="virtual", slot="main", desktop_session_id=row["desktop_session_id"])
    return frame, browser


async def time_profiles(config: DesktopSettings, count: int) -> dict[str, list[float]]:
    """``count`` starts of each profile, interleaved (minimal, standard, minimal, …) so that
    the load of the machine weighs on both alike."""
    mgr = process_desktops(config)
    times: dict[str, list[float]] = {"minimal": [], "standard": [], "browser": []}
    try:
        for _ in range(count):
            for profile in ("minimal", "standard"):
                frame, browser = await time_profile_start(mgr, profile, profile == "standard")
                times[profile].append(frame)
                if browser is not None:
                    times["browser"].append(browser)
    finally:
        await mgr.close(stop_desktops=True)
    return times


def group_members(config: DesktopSettings) -> list[psutil.Process]:
    data = json.loads(config.state_file.read_text())
    pgids = {p["pgid"] for d in data["desktops"] for p in d["processes"]}
    members = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != 0 and os.getpgid(proc.pid) in pgids:
                members.append(proc)
        except (OSError, psutil.Error):
            continue
    return members


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return total


def pss_mb(procs: list[psutil.Process]) -> float:
    """Proportional set size: shared pages (libraries, forked websockify) counted once."""
    total = 0
    for proc in procs:
        try:
            total += proc.memory_full_info().pss
        except (psutil.Error, AttributeError):
            continue
    return total / 1e6


async def time_starts(config: DesktopSettings, count: int) -> list[float]:
    mgr = process_desktops(config)
    times = []
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(count):
                started = time.perf_counter()
                row = await mgr.start()
                await rfb_banner_ws(http, row["websockify_port"], 5)
                times.append(time.perf_counter() - started)
                await mgr.stop(
                    kind="virtual", slot="main", desktop_session_id=row["desktop_session_id"]
                )
    finally:
        await mgr.close(stop_desktops=True)
    return times


async def idle_profile(
    config: DesktopSettings, idle_s: float, profile: str = "minimal", desktops: int = 4
) -> dict[str, float]:
    relay = psutil.Process()
    mgr = process_desktops(config)
    try:
        for i in range(desktops):
            await mgr.start(slot=f"bench{i}", profile=profile)
        mgr.start_watchdog()
        members = group_members(config)
        relay_before, groups_before = cpu_seconds([relay]), cpu_seconds(members)
        await asyncio.sleep(idle_s)
        relay_cpu = (cpu_seconds([relay]) - relay_before) / idle_s * 100
        groups_cpu = (cpu_seconds(members) - groups_before) / idle_s * 100
        return {
            "relay_rss_mb": relay.memory_info().rss / 1e6,
            "relay_pss_mb": pss_mb([relay]),
            "desktops_pss_mb": pss_mb(group_members(config)),
            "groups_cpu_pct": groups_cpu,
            "relay_cpu_pct": relay_cpu,
            "processes": float(len(members)),
        }
    finally:
        await mgr.close(stop_desktops=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 2 starts, 1 per profile, 1 s idle"
    )
    args = parser.parse_args(argv)
    starts, idle_s, idle_desktops = (2, 1.0, 2) if args.quick else (10, 30.0, 4)
    profile_starts = 1 if args.quick else starts
    with tempfile.TemporaryDirectory() as tmp:
        config = DesktopSettings(state_dir=Path(tmp), default_profile="minimal")
        times = asyncio.run(time_starts(config, starts))
        profile = asyncio.run(idle_profile(config, idle_s, desktops=idle_desktops))
        standard = _standard_available(config)
        if standard:
            profile_t = asyncio.run(time_profiles(config, profile_starts))
            minimal_t, standard_t, browser_t = (
                profile_t["minimal"],
                profile_t["standard"],
                profile_t["browser"],
            )
            per = 1 if args.quick else 2
            std_idle = asyncio.run(idle_profile(config, idle_s, "standard", per))
    p50 = statistics.median(times)
    print(f"desktop start → RFB banner via websockify over {starts} starts:")
    print(
        f"  p50 {p50:.3f} s  min {min(times):.3f} s  max {max(times):.3f} s"
        f"  p50/target {p50 / TARGET_START_S:.2f} (target {TARGET_START_S} s)"
    )
    print(
        f"{idle_desktops} desktops ({profile['processes']:.0f} processes), watchdog on,"
        f" idle {idle_s:.0f} s:"
    )
    desktops_mb = profile["desktops_pss_mb"]
    print(
        f"  relay RSS {profile['relay_rss_mb']:.1f} MB (PSS {profile['relay_pss_mb']:.1f} MB),"
        f" desktop processes PSS"
        f" {desktops_mb:.1f} MB ({desktops_mb / idle_desktops:.1f} MB each)"
    )
    print(
        f"  idle CPU: desktop groups {profile['groups_cpu_pct']:.2f} % of one core"
        f" ({profile['groups_cpu_pct'] / idle_desktops:.2f} % each), relay watchdog"
        f" {profile['relay_cpu_pct']:.2f} %"
    )
    if not standard:
        print("standard profile unavailable on this host: profile comparison skipped")
        return 0
    m50, s50 = statistics.median(minimal_t), statistics.median(standard_t)
    print(
        f"profiles, {profile_starts} starts each, interleaved: start → first frame (RFB handshake +"
        f" FramebufferUpdate) p50 minimal {m50:.3f} s (max {max(minimal_t):.3f}), standard"
        f" {s50:.3f} s (max {max(standard_t):.3f}); ratio {s50 / m50:.2f}"
        f" (target <= {TARGET_PROFILE_RATIO})"
    )
    if browser_t:
        b50 = statistics.median(browser_t)
        print(
            f"  standard start → browser window p50 {b50:.3f} s (max {max(browser_t):.3f} s,"
            f" {len(browser_t)}/{profile_starts} seen); p50/target {b50 / TARGET_BROWSER_S:.2f}"
            f" (target {TARGET_BROWSER_S} s)"
        )
    else:
        print("  standard start → browser window: never seen")
    n = std_idle["processes"] and (1 if args.quick else 2)
    print(
        f"  {n} standard desktop(s) idle {idle_s:.0f} s: desktop processes PSS"
        f" {std_idle['desktops_pss_mb'] / n:.1f} MB each, idle CPU"
        f" {std_idle['groups_cpu_pct'] / n:.2f} % of one core each, relay RSS"
        f" {std_idle['relay_rss_mb']:.1f} MB, relay CPU {std_idle['relay_cpu_pct']:.2f} %"
    )
    return 0


def _standard_available(config: DesktopSettings) -> bool:
    from relay.desktops.profiles import load_profiles

    profile = load_profiles(config.profiles_dir).get("standard")
    return profile is not None and not profile.missing() and shutil.which("wmctrl") is not None


if __name__ == "__main__":
    raise SystemExit(main())
