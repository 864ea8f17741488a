"""Instant desktops: resume and the warm pool against a cold start, and what they cost.

* baseline, measured in the same run: a cold start → first frame (the RFB handshake through
  websockify with the desktop's VNC secret, then a whole FramebufferUpdate), minimal profile;
* ``resume`` → first frame: a desktop paused (its cgroup frozen) is resumed and a viewer
  connects to it as the viewer page does after a resume, p50 over the rounds (target
  <= 100 ms), and its ratio to the cold start; the ``pause`` op alone (it connects the
  relay's held viewer first: relay/desktops/wake.py);
* a paused desktop's CPU over the window (target 0 ticks), while a program in it loops: the
  cgroup's ``cpu.stat`` ``usage_usec`` and the sum of utime + stime of its processes from
  ``/proc``; the same window running, for comparison;
* the warm pool (relay/desktops/pool.py), minimal profile with its terminal, against cold
  starts of the same desktop in the same run: pooled ``desktop_start`` → ``running`` p50
  (targets <= 80 ms and <= 0.1x the cold start's), pooled start → first framebuffer update in
  a viewer (target <= 250 ms), the PSS of one pooled idle desktop, and the CPU the pool adds
  to an idle relay per pooled desktop (its desktops' cgroups and the relay process, against
  the same window without a pool; target <= 2 % of a core);
* ``desktop_reset`` to a fresh start → running (the op's answer) and → first frame, with the
  pool (targets <= 300 ms p50 to running, and every reset taken from the pool) against the
  same resets without a pool in the same run (target <= 1 s).

Snapshots, forks and reset (standard profile, ``snapshot_*`` below):

* baseline, measured in the same run: one cold standard start → its browser window mapped;
* a snapshot of a standard desktop, then 8 forks of it started at once → all 8 with their
  browser window mapped (target <= 3x the cold start; ``--quick``: 2 forks);
* ``desktop_reset`` to a snapshot → running (the op's answer), p50 (target <= 1 s), and a reset
  to a fresh start of the profile.

Needs a root relay on a host with a writable cgroup2 hierarchy (desktops get a cgroup only
then). Run: ``.venv/bin/python -m benchmarks.bench_instant [--quick]
[--snapshots-only | --pool-only | --pause-only]``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import parser
from benchmarks.rfb import RFBClient
from relay.desktops import DesktopSettings, ProcessDesktops, process_desktops
from relay.desktops import cgroups as desktop_cgroups
from relay.desktops.pool import WarmPool
from wire.errors import OpError
from wire.ops import RelayRow

TARGET_RESUME_MS = 100.0
TARGET_POOLED_RUNNING_MS = 80.0
TARGET_POOLED_RATIO = 0.1
TARGET_POOLED_FRAME_MS = 250.0
TARGET_POOL_CPU_SHARE = 0.02  # of one core, per pooled idle desktop
TARGET_POOLED_RESET_MS = 300.0
POOL_PROFILE = "minimal"
# A program that uses all the CPU it is given (niced: the benchmark shares the machine).
LOOP = 'nice -n 19 sh -c "while :; do :; done"'


async def viewer(mgr: ProcessDesktops, row: RelayRow) -> RFBClient:
    """A viewer as the relay's channel opens it: straight to x11vnc on loopback, with the
    desktop's VNC secret, its version sent before x11vnc's banner."""
    secret = mgr.launcher.vnc_secret(row["desktop_session_id"])
    return await RFBClient.open_tcp(row["vnc_port"], secret=secret, version_first=True)


async def whole_frame(client: RFBClient) -> None:
    await client.request_update(incremental=False)
    async with asyncio.timeout(10):
        await client.read_update()


async def first_frame(mgr: ProcessDesktops, row: RelayRow) -> None:
    """What a new viewer waits for: the RFB handshake, then a whole frame."""
    client = await viewer(mgr, row)
    try:
        await whole_frame(client)
    finally:
        await client.close()


async def cold_starts(mgr: ProcessDesktops, count: int) -> list[float]:
    """Start → first frame, ``count`` times (each desktop stopped after)."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        row = await mgr.start(slot="cold")
        await first_frame(mgr, row)
        times.append(time.perf_counter() - started)
        await mgr.stop(slot="cold", desktop_session_id=row["desktop_session_id"])
    return times


async def resumes(mgr: ProcessDesktops, row: RelayRow, count: int) -> dict[str, list[float]]:
    """``count`` rounds of: pause, resume → first frame of a new viewer; pause with a viewer
    connected, resume → a whole frame on that viewer; and the resume op alone."""
    session = row["desktop_session_id"]
    times: dict[str, list[float]] = {"new": [], "kept": [], "op": [], "pause": []}
    for _ in range(count):
        started = time.perf_counter()
        await mgr.pause(slot="main", desktop_session_id=session)
        times["pause"].append(time.perf_counter() - started)
        await asyncio.sleep(0.2)
        started = time.perf_counter()
        resumed = await mgr.resume(slot="main", desktop_session_id=session)
        times["op"].append(time.perf_counter() - started)
        await first_frame(mgr, resumed)
        times["new"].append(time.perf_counter() - started)
        kept = await viewer(mgr, row)
        try:
            await whole_frame(kept)
            await mgr.pause(slot="main", desktop_session_id=session)
            await asyncio.sleep(0.2)
            started = time.perf_counter()
            await mgr.resume(slot="main", desktop_session_id=session)
            await whole_frame(kept)
            times["kept"].append(time.perf_counter() - started)
        finally:
            await kept.close()
    return times


def cpu(cgroup: Path) -> tuple[int, int]:
    """(``usage_usec`` of the cgroup, utime + stime ticks of its processes from /proc)."""
    ticks = 0
    for pid in desktop_cgroups.pids(cgroup):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return desktop_cgroups.cpu_usec(cgroup) or 0, ticks


async def cpu_over(cgroup: Path, window_s: float) -> tuple[int, int]:
    """CPU used by the cgroup over ``window_s``: (µs, ticks)."""
    usec, ticks = cpu(cgroup)
    await asyncio.sleep(window_s)
    usec_after, ticks_after = cpu(cgroup)
    return usec_after - usec, ticks_after - ticks


@dataclasses.dataclass
class PoolMeasured:
    cold: list[tuple[float, float]]  # s, cold start → running, → first frame
    pooled: list[tuple[float, float]]  # s, pooled start → running, → first frame
    pss_kib: list[int]  # PSS of each pooled idle desktop
    idle_cpu_s: tuple[float, float]  # CPU over the window: without a pool, with ``size``
    size: int
    window_s: float
    cold_resets: list[tuple[float, float, float]]  # s, reset → running, → frame, → old ended
    pooled_resets: list[tuple[float, float, float]]  # the same with the pool
    resets_from_pool: int  # how many of ``pooled_resets`` took a pooled desktop


async def timed_start(mgr: ProcessDesktops, slot: str) -> tuple[RelayRow, float, float]:
    """``desktop_start`` → ``running``, then → the first whole frame in a new viewer."""
    started = time.perf_counter()
    row = await mgr.start(slot=slot)
    running = time.perf_counter() - started
    await first_frame(mgr, row)
    return row, running, time.perf_counter() - started


async def timed_resets(
    mgr: ProcessDesktops, rounds: int, pool: WarmPool | None = None
) -> tuple[list[tuple[float, float, float]], int]:
    """``desktop_reset`` to a fresh start of one desktop, ``rounds`` times: → running (the
    answer), → first frame in a new viewer, → the old desktop ended (the lifecycle lock free
    again); and how many took a pooled desktop. Each reset comes once the last one's old
    desktop has ended (a reset waits for that: it holds the lock)."""
    from relay.desktops.snapshots import Snapshots

    snapshots = Snapshots(mgr)
    current = (await mgr.start(slot="reset"))["desktop_session_id"]
    times, from_pool = [], 0
    try:
        for _ in range(rounds):
            if pool is not None:
                await pool_filled(pool, sum(pool.sizes.values()))
            await asyncio.sleep(0.5)  # the last reset's old desktop has ended
            started = time.perf_counter()
            reset = await snapshots.reset({"desktop_session_id": current})
            running = time.perf_counter() - started
            await first_frame(mgr, reset)
            frame = time.perf_counter() - started
            async with mgr.slots.lock:  # the old desktop has ended
                ended = time.perf_counter() - started
            times.append((running, frame, ended))
            from_pool += reset["from_pool"]
            current = reset["desktop_session_id"]
    finally:
        await mgr.stop(slot="reset", desktop_session_id=current)
    return times, from_pool


async def pool_filled(pool: WarmPool, size: int) -> None:
    async with asyncio.timeout(60):
        while sum(p["ready"] for p in pool.report()["profiles"]) < size:
            await asyncio.sleep(0.05)


def pss_kib(cgroup: Path) -> int:
    """Proportional set size of the processes in ``cgroup`` (``smaps_rollup``)."""
    total = 0
    for pid in desktop_cgroups.pids(cgroup):
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text(encoding="ascii")
        except OSError:
            continue
        total += sum(int(line.split()[1]) for line in text.splitlines() if line.startswith("Pss:"))
    return total


def pooled_cgroups(mgr: ProcessDesktops) -> list[Path]:
    """The cgroups of the pool's ready desktops (recorded as starts until taken)."""
    found = (mgr.launcher.cgroup(sid) for sid in mgr.slots.starting)
    return [c for c in found if c is not None]


async def idle_cpu(mgr: ProcessDesktops, window_s: float) -> float:
    """CPU seconds over ``window_s`` of this relay process and of its pooled desktops."""
    cgroups = pooled_cgroups(mgr)
    before = os.times(), [desktop_cgroups.cpu_usec(c) or 0 for c in cgroups]
    await asyncio.sleep(window_s)
    after = os.times(), [desktop_cgroups.cpu_usec(c) or 0 for c in cgroups]
    own = (after[0].user + after[0].system) - (before[0].user + before[0].system)
    return own + (sum(after[1]) - sum(before[1])) / 1e6


async def run_pool(config: DesktopSettings, rounds: int, window_s: float) -> PoolMeasured:
    """Cold starts, then the same starts taken from a pool of one, in one relay."""
    mgr = process_desktops(config)
    try:
        cold = []
        for _ in range(rounds):
            row, running, frame = await timed_start(mgr, "cold")
            cold.append((running, frame))
            await mgr.stop(slot="cold", desktop_session_id=row["desktop_session_id"])
        without = await idle_cpu(mgr, window_s)
        cold_resets, _ = await timed_resets(mgr, rounds)
        size = 2
        pool = WarmPool(mgr, {POOL_PROFILE: size})
        mgr.pool = pool
        mgr.start_pool()
        await pool_filled(pool, size)
        await asyncio.sleep(min(window_s, 2.0))  # their start-up work done: idle now
        with_pool = await idle_cpu(mgr, window_s)
        pss = [pss_kib(c) for c in pooled_cgroups(mgr)]
        pooled = []
        for _ in range(rounds):
            await pool_filled(pool, size)
            row, running, frame = await timed_start(mgr, "pooled")
            pooled.append((running, frame))
            await mgr.stop(slot="pooled", desktop_session_id=row["desktop_session_id"])
        pooled_resets, from_pool = await timed_resets(mgr, rounds, pool)
        return PoolMeasured(
            cold,
            pooled,
            pss,
            (without, with_pool),
            size,
            window_s,
            cold_resets,
            pooled_resets,
            from_pool,
        )
    finally:
        await mgr.close(stop_desktops=True)


def report_pool(result: PoolMeasured) -> None:
    cold_run = statistics.median(t[0] for t in result.cold) * 1000
    cold_frame = statistics.median(t[1] for t in result.cold) * 1000
    run50 = statistics.median(t[0] for t in result.pooled) * 1000
    frame50 = statistics.median(t[1] for t in result.pooled) * 1000
    rounds = len(result.pooled)
    print(
        f"pool ({POOL_PROFILE}): cold start → running (baseline), {len(result.cold)} starts:"
        f" p50 {cold_run:.1f} ms; → first frame p50 {cold_frame:.1f} ms"
    )
    print(
        f"pooled start → running, {rounds} starts: p50 {run50:.1f} ms"
        f" (max {max(t[0] for t in result.pooled) * 1000:.1f}); ratio to cold start"
        f" {run50 / cold_run:.3f} (target {TARGET_POOLED_RATIO}); p50/target"
        f" {run50 / TARGET_POOLED_RUNNING_MS:.2f} (target {TARGET_POOLED_RUNNING_MS:.0f} ms)"
    )
    print(
        f"pooled start → first frame in a viewer: p50 {frame50:.1f} ms; ratio to cold start"
        f" {frame50 / cold_frame:.3f}; p50/target {frame50 / TARGET_POOLED_FRAME_MS:.2f}"
        f" (target {TARGET_POOLED_FRAME_MS:.0f} ms)"
    )
    pss = ", ".join(f"{kib / 1024:.1f}" for kib in result.pss_kib)
    without, with_pool = result.idle_cpu_s
    share = max(with_pool - without, 0.0) / result.window_s / result.size
    print(
        f"pooled idle desktop PSS: {pss} MiB; idle relay CPU over {result.window_s:.0f} s:"
        f" {without:.3f} s without a pool, {with_pool:.3f} s with {result.size} pooled desktops"
        f" → {share * 100:.2f} % of a core per pooled desktop"
        f" (target {TARGET_POOL_CPU_SHARE * 100:.0f} %)"
    )
    cold_reset = statistics.median(t[0] for t in result.cold_resets) * 1000
    cold_reset_frame = statistics.median(t[1] for t in result.cold_resets) * 1000
    reset50 = statistics.median(t[0] for t in result.pooled_resets) * 1000
    reset_frame = statistics.median(t[1] for t in result.pooled_resets) * 1000
    cold_ended = statistics.median(t[2] for t in result.cold_resets) * 1000
    pooled_ended = statistics.median(t[2] for t in result.pooled_resets) * 1000
    print(
        f"desktop_reset to a fresh start without a pool (baseline), {len(result.cold_resets)}"
        f" resets: → running p50 {cold_reset:.1f} ms (target {TARGET_RESET_MS:.0f} ms);"
        f" → first frame p50 {cold_reset_frame:.1f} ms;"
        f" → old desktop ended p50 {cold_ended:.1f} ms"
    )
    print(
        f"desktop_reset with the pool, {len(result.pooled_resets)} resets"
        f" ({result.resets_from_pool} from the pool): → running p50 {reset50:.1f} ms"
        f" (max {max(t[0] for t in result.pooled_resets) * 1000:.1f}); ratio to the reset"
        f" without a pool {reset50 / cold_reset:.3f}; p50/target"
        f" {reset50 / TARGET_POOLED_RESET_MS:.2f} (target {TARGET_POOLED_RESET_MS:.0f} ms);"
        f" → first frame p50 {reset_frame:.1f} ms;"
        f" → old desktop ended p50 {pooled_ended:.1f} ms"
    )


@dataclasses.dataclass
class Measured:
    cold: list[float]  # s, start → first frame
    resume: dict[str, list[float]]  # s, per kind of round (``resumes``)
    running: tuple[int, int]  # CPU over the window while running: (µs, ticks)
    paused: tuple[int, int]  # the same while paused


async def run(config: DesktopSettings, rounds: int, window_s: float) -> Measured:
    mgr = process_desktops(config)
    try:
        cold = await cold_starts(mgr, rounds)
        row = await mgr.start(slot="main")
        cgroup = mgr.launcher.cgroup(row["desktop_session_id"])
        if cgroup is None:
            raise SystemExit("desktops have no cgroup here (run as root on cgroup2)")
        await first_frame(mgr, row)
        running = await cpu_over(cgroup, window_s)
        resumed = await resumes(mgr, row, rounds)
        await mgr.pause(slot="main", desktop_session_id=row["desktop_session_id"])
        paused = await cpu_over(cgroup, window_s)
        await mgr.resume(slot="main", desktop_session_id=row["desktop_session_id"])
        return Measured(cold, resumed, running, paused)
    finally:
        await mgr.close(stop_desktops=True)


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__.splitlines()[0])
    cli.add_argument("--snapshots-only", action="store_true", help="only snapshots and forks")
    cli.add_argument("--pool-only", action="store_true", help="only the warm pool and resets")
    cli.add_argument("--pause-only", action="store_true", help="only pause and resume")
    args = cli.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root: desktops get a cgroup (and a pause) only on a root relay")
        return 1
    if args.snapshots_only:
        return snapshot_main(args.quick)
    if args.pool_only:
        pool_main(args.quick)
        return 0
    if args.pause_only:
        return 0 if pause_main(args.quick, with_pool=False) else 1
    paused_ok = pause_main(args.quick)
    return 0 if snapshot_main(args.quick) == 0 and paused_ok else 1


def pause_main(quick: bool, with_pool: bool = True) -> bool:
    """The pause and resume part (then the pool's, ``with_pool``); whether its paused desktop
    used no CPU."""
    rounds, window_s = (2, 1.0) if quick else (10, 30.0)
    with tempfile.TemporaryDirectory() as tmp:
        config = DesktopSettings(state_dir=Path(tmp), default_profile="minimal")
        config = dataclasses.replace(config, apps=(LOOP,), allowed_apps=(LOOP,))
        result = asyncio.run(run(config, rounds, window_s))
    cold = [t * 1000 for t in result.cold]
    rounds_ms = {k: [t * 1000 for t in v] for k, v in result.resume.items()}
    resumed, kept, op = rounds_ms["new"], rounds_ms["kept"], rounds_ms["op"]
    run_usec, run_ticks = result.running
    paused_usec, paused_ticks = result.paused
    c50, r50 = statistics.median(cold), statistics.median(resumed)
    print(f"cold start → first frame (baseline), {rounds} starts: p50 {c50:.1f} ms")
    print(
        f"resume → first frame of a new viewer, {rounds} rounds: p50 {r50:.1f} ms"
        f" (max {max(resumed):.1f}); ratio to cold start {r50 / c50:.3f};"
        f" p50/target {r50 / TARGET_RESUME_MS:.2f} (target {TARGET_RESUME_MS:.0f} ms)"
    )
    k50, o50 = statistics.median(kept), statistics.median(op)
    print(
        f"resume → whole frame on a viewer kept connected: p50 {k50:.1f} ms; ratio to cold"
        f" start {k50 / c50:.3f}; the resume op alone p50 {o50:.1f} ms; the pause op alone"
        f" p50 {statistics.median(rounds_ms['pause']):.1f} ms"
    )
    print(
        f"CPU over {window_s:.0f} s with a looping program: running {run_usec / 1e6:.2f} s"
        f" ({run_ticks} ticks); paused {paused_usec} µs ({paused_ticks} ticks; target 0)"
    )
    if with_pool:
        pool_main(quick)
    return paused_ticks == 0 and paused_usec == 0


def pool_main(quick: bool) -> None:
    """The warm pool part: starts and resets with a pool against the same without one."""
    rounds, window_s = (2, 1.0) if quick else (10, 30.0)
    with tempfile.TemporaryDirectory() as tmp:
        config = DesktopSettings(state_dir=Path(tmp), default_profile="minimal")
        report_pool(asyncio.run(run_pool(config, rounds, window_s)))


# -- snapshots, forks and reset -------------------------------------------------------------

TARGET_FORKS_RATIO = 3.0
TARGET_RESET_MS = 1000.0
BROWSER = "chromium"


async def browser_mapped(row: RelayRow, timeout_s: float = 120.0) -> None:
    """Wait until the desktop's browser has mapped its window (read from X)."""
    from relay.desktop_tools.windows import list_windows
    from relay.policy import DeniedApps

    display = str(row["display"])
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        try:
            windows, _ = await asyncio.to_thread(list_windows, display, DeniedApps())
        except OpError:  # the display may not take connections yet
            windows = []
        if any(w["app"] == BROWSER for w in windows):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no browser window on {display} within {timeout_s:.0f} s")


@dataclasses.dataclass
class SnapshotMeasured:
    cold: float  # s, one cold standard start → browser window mapped
    cold_op: float  # s, the same start → running (the op's answer)
    forks: int
    forks_mapped: float  # s, fork op → every fork's browser window mapped
    forks_op: float  # s, the fork op alone (all running)
    snapshot: float  # s, the snapshot op
    snapshot_kb: int
    reset: list[float]  # s, reset to the snapshot → running
    reset_fresh: list[float]  # s, reset to a fresh start → running
    cold_cpu: float  # s of CPU the cold start's desktop used until its browser was mapped
    forks_cpu: float  # s of CPU the forks' desktops used until all browsers were mapped


def desktop_cpu_s(mgr: ProcessDesktops, rows: Sequence[RelayRow]) -> float:
    """CPU seconds the desktops' cgroups have used since their start."""
    used = 0
    for row in rows:
        cgroup = mgr.launcher.cgroup(row["desktop_session_id"])
        used += (desktop_cgroups.cpu_usec(cgroup) or 0) if cgroup is not None else 0
    return used / 1e6


async def snapshot_run(config: DesktopSettings, forks: int, rounds: int) -> SnapshotMeasured:
    from relay.desktops.snapshots import Snapshots

    mgr = process_desktops(config)
    mgr.authority.use_in_process()  # the window list reads X as the relay does
    snapshots = Snapshots(mgr)
    snapshot_id = os.urandom(16).hex()
    try:
        started = time.perf_counter()
        cold_row = await mgr.start(slot="cold", profile="standard")
        cold_op = time.perf_counter() - started
        await browser_mapped(cold_row)
        cold = time.perf_counter() - started
        cold_cpu = desktop_cpu_s(mgr, [cold_row])
        await mgr.stop(slot="cold", desktop_session_id=cold_row["desktop_session_id"])

        source = await mgr.start(slot="source", profile="standard")
        await browser_mapped(source)
        await asyncio.sleep(1.0)  # the browser writes its profile
        started = time.perf_counter()
        saved = await snapshots.snapshot(
            {"desktop_session_id": source["desktop_session_id"], "snapshot_id": snapshot_id}
        )
        snapshot_s = time.perf_counter() - started
        await mgr.stop(slot="source", desktop_session_id=source["desktop_session_id"])

        slots = [f"fork-{i}" for i in range(1, forks + 1)]
        started = time.perf_counter()
        forked = await snapshots.fork({"snapshot_id": snapshot_id, "slots": slots})
        forks_op = time.perf_counter() - started
        if forked["failed"]:
            raise SystemExit(f"forks failed: {forked['failed']}")
        await asyncio.gather(*(browser_mapped(row) for row in forked["desktops"]))
        forks_mapped = time.perf_counter() - started
        forks_cpu = desktop_cpu_s(mgr, forked["desktops"])
        for row in forked["desktops"][1:]:
            await mgr.stop(slot=row["slot"], desktop_session_id=row["desktop_session_id"])

        current = forked["desktops"][0]["desktop_session_id"]
        resets: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(rounds):
            for to_snapshot in (True, False):
                await asyncio.sleep(0.5)
                started = time.perf_counter()
                reset = await snapshots.reset(
                    {"desktop_session_id": current, "snapshot_id": snapshot_id}
                    if to_snapshot
                    else {"desktop_session_id": current}
                )
                resets[to_snapshot].append(time.perf_counter() - started)
                current = reset["desktop_session_id"]
        return SnapshotMeasured(
            cold,
            cold_op,
            forks,
            forks_mapped,
            forks_op,
            snapshot_s,
            saved["size_bytes"] // 1024,
            resets[True],
            resets[False],
            cold_cpu,
            forks_cpu,
        )
    finally:
        await snapshots.aclose()
        await mgr.close(stop_desktops=True)


def snapshot_main(quick: bool) -> int:
    """Snapshots, forks and reset against one cold standard start of the same run."""
    forks, rounds = (2, 2) if quick else (8, 10)
    with tempfile.TemporaryDirectory() as tmp:
        config = DesktopSettings(state_dir=Path(tmp), max_desktops=forks + 2)
        result = asyncio.run(snapshot_run(config, forks, rounds))
    cold = result.cold * 1000
    mapped, ratio = result.forks_mapped * 1000, result.forks_mapped / result.cold
    print(
        f"cold standard start (baseline): → running {result.cold_op * 1000:.0f} ms,"
        f" → browser window mapped {cold:.0f} ms"
    )
    print(
        f"snapshot of a standard desktop: {result.snapshot * 1000:.0f} ms,"
        f" {result.snapshot_kb} KB of home"
    )
    print(
        f"{result.forks} forks at once → all browser windows mapped: {mapped:.0f} ms"
        f" (fork op alone, all running: {result.forks_op * 1000:.0f} ms);"
        f" ratio to the cold start {ratio:.2f} (target <= {TARGET_FORKS_RATIO:.0f})"
    )
    cores = os.cpu_count() or 1
    floor = result.forks_cpu / cores * 1000
    print(
        f"CPU until the browser is mapped: the cold start's desktop {result.cold_cpu * 1000:.0f}"
        f" ms; the {result.forks} forks' desktops {result.forks_cpu * 1000:.0f} ms in all, so at"
        f" least {floor:.0f} ms on {cores} cores = {floor / cold:.2f}x the cold start"
    )
    reset = statistics.median(result.reset) * 1000
    fresh = statistics.median(result.reset_fresh) * 1000
    print(
        f"desktop_reset → running, {len(result.reset)} rounds: to the snapshot p50 {reset:.0f} ms"
        f" (max {max(result.reset) * 1000:.0f}), to a fresh start p50 {fresh:.0f} ms;"
        f" p50/target {reset / TARGET_RESET_MS:.2f} (target {TARGET_RESET_MS:.0f} ms);"
        f" ratio to the cold start → running {reset / (result.cold_op * 1000):.2f}"
    )
    print(f"load: {Path('/proc/loadavg').read_text(encoding='ascii').strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
