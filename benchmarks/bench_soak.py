"""Soak: one server, one relay, churn and faults for ``--minutes``; leaks, leftovers, recovery.

Workload: desktops started and stopped in two slots every few seconds (``churn-a``,
``churn-b``), one long-lived desktop (``main``) that must survive every kill with its session
id, three viewers reconnecting through the server and pulling full frames, an agent loop
(screenshot → guarded click → type), five SSE subscribers. The relay is SIGKILLed at a third
of the run (the kill lands in the middle of a churn start) and the server restarted at two
thirds. RSS, fds, threads and child processes of server and relay are sampled every
``--sample-s``.

Slopes are fitted per process incarnation (a kill or restart begins a new segment), after a
warm-up counted from each incarnation's start: the screenshot TTL (300 s, after which the
server's revision store holds its steady population) plus a minute. The combined figure is
the pooled within-segment slope (one slope, an intercept per segment).

Leftovers are this run's only: processes naming the run's directory (command line or
environment) or recorded by its relay, X sockets and locks of the displays its desktops used,
shared memory created by its processes, runtime directories under its state directory or for
its displays. Errors count as inside a kill window when the failing step overlapped one.

    python benchmarks/bench_soak.py --minutes 60
    python benchmarks/bench_soak.py --quick        # 3 minutes, part of scripts/test
    python benchmarks/bench_soak.py --minutes 45 --trace-server /tmp/snaps   # tracemalloc

``--trace-server`` runs the server under tracemalloc and dumps a snapshot every
``--trace-every-s``, to compare top allocations between two points of an incarnation; the traced
server is several times slower (relays miss its 3 s liveness window), so such a run attributes
memory and says nothing about errors or recovery.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from benchmarks.common import parser
from benchmarks.rfb import RFBClient
from relay.desktops.displays import X_TMP
from server.events.bus import HISTORY_LENGTH
from tests.support.processes import ManagedProcess, free_port
from tests.support.stack import (
    FAST_ENV,
    Seed,
    relaydesk_argv,
    seed_database,
    stop_desktops_in,
)

TARGET_RSS_SLOPE_MB = 0.05
TARGET_API_S = 3.0
TARGET_VIEWER_S = 5.0
CHURN_SLOTS = ("churn-a", "churn-b")
# The server keeps screenshots for SCREEN_REVISION_TTL_S (300 s): after that its revision store
# holds a steady population. A minute more lets the allocator's pools settle. The server's
# warm-up also lasts until its event history (HISTORY_LENGTH events per topic, ~5 KB each with
# their rows and cached encodings) is full: at this workload's ~1 event/s, ~17 minutes.
WARMUP_S = 360.0
QUICK_WARMUP_S = 30.0
# A slope is judged against its target only over this much post-warm-up time.
MIN_JUDGED_S = 300.0
METRICS = ("rss_mb", "fds", "threads", "children")
COUNT_GAIN = 2  # a count that rose this much over a segment, by trend and by floor, leaks
# Runs the server with tracemalloc, dumping a snapshot every ``every`` seconds into ``out``.
_TRACE_BOOT = """
import os, runpy, sys, threading, time, tracemalloc
out, every = sys.argv[1], float(sys.argv[2])
del sys.argv[1:3]
tracemalloc.start(8)
def dump():
    n = 0
    while True:
        time.sleep(every)
        tracemalloc.take_snapshot().dump(f"{out}/server-{os.getpid()}-{n:03d}.snap")
        n += 1
threading.Thread(target=dump, name="tracemalloc-dump", daemon=True).start()
runpy.run_module("relaydesk", run_name="__main__", alter_sys=True)
"""


@dataclass
class Footprint:
    """What belongs to this run: pids (with their start times) and the X displays it used."""

    pids: dict[int, float] = field(default_factory=dict)
    x_sockets: set[tuple[int, int, int]] = field(default_factory=set)  # display, inode, mtime

    @property
    def displays(self) -> list[int]:
        return sorted({display for display, _, _ in self.x_sockets})

    def add_live(self, pid: int) -> None:
        if pid not in self.pids:
            with contextlib.suppress(psutil.Error):
                self.pids[pid] = psutil.Process(pid).create_time()


@dataclass
class Failure:
    began: float
    ended: float
    what: str


@dataclass
class Soak:
    seed: Seed
    root: Path
    port: int
    trace: tuple[Path, float] | None = None
    server: ManagedProcess | None = None
    relay: ManagedProcess | None = None
    born: dict[int, float] = field(default_factory=dict)  # pid → monotonic start
    history_full: dict[int, float] = field(default_factory=dict)  # server pid → monotonic
    samples: list[dict[str, float]] = field(default_factory=list)
    errors: list[Failure] = field(default_factory=list)
    windows: list[tuple[float, float]] = field(default_factory=list)  # kill windows
    recovery: dict[str, list[float]] = field(default_factory=dict)
    footprint: Footprint = field(default_factory=Footprint)
    main_session: str = ""
    started: float = field(default_factory=time.monotonic)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def state_dir(self) -> Path:
        return self.seed.data_dir / "relay-state"

    @property
    def tmp_dir(self) -> Path:
        """The processes' TMPDIR: what they make there (sound runtime dirs) is this run's."""
        return self.root / "tmp"

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.seed.env(), **FAST_ENV, "RELAYDESK_LOG_LEVEL": "warning",
                "TMPDIR": str(self.tmp_dir)}  # fmt: skip

    def now(self) -> float:
        return time.monotonic() - self.started

    def error(self, began: float, what: str) -> None:
        self.errors.append(Failure(began, self.now(), what))

    def saw_event(self, event_id: str) -> None:
        """Note when the server's event history is full (ids are ``<epoch>-<sequence>``)."""
        _, _, seq = event_id.partition("-")
        if seq.isdigit() and int(seq) >= HISTORY_LENGTH and self.server is not None:
            self.history_full.setdefault(self.server.pid, time.monotonic())


# -- processes ----------------------------------------------------------------------------------


def start_server(soak: Soak) -> None:
    argv = relaydesk_argv("server", "--port", str(soak.port))
    if soak.trace is not None:
        out, every = soak.trace
        argv = [sys.executable, "-c", _TRACE_BOOT, str(out), str(every), *argv[3:]]
    soak.server = _start(soak, argv, "server.log")


def start_relay(soak: Soak) -> None:
    token = soak.root / "relay.token"
    token.write_text(soak.seed.relay_token)
    token.chmod(0o600)
    argv = relaydesk_argv("relay", "--server", soak.url, "--token-file", str(token))
    soak.relay = _start(soak, argv, "relay.log")


def _start(soak: Soak, argv: list[str], log: str) -> ManagedProcess:
    process = ManagedProcess(argv, soak.root / log, env=soak.env()).start()
    soak.born[process.pid] = time.monotonic()
    soak.footprint.add_live(process.pid)
    return process


async def until(predicate: Callable[[], Awaitable[bool]], timeout: float) -> float:
    """Seconds until ``predicate`` holds (probed every 50 ms); raises TimeoutError."""
    began = time.monotonic()
    async with asyncio.timeout(timeout):
        while not await predicate():
            await asyncio.sleep(0.05)
    return time.monotonic() - began


# -- the API ------------------------------------------------------------------------------------


async def call(client: httpx.AsyncClient, soak: Soak, name: str, **args: Any) -> tuple[int, Any]:
    args.setdefault("conversation_id", soak.seed.conversation_id)
    headers = {"Authorization": f"Bearer {soak.seed.api_token}"}
    response = await client.post(f"/api/v1/actions/{name}", json=args, headers=headers)
    return response.status_code, response.json()


async def start_desktop(client: httpx.AsyncClient, soak: Soak, slot: str) -> dict[str, Any]:
    status, body = await call(client, soak, "desktop_start", relay="relay-1", slot=slot)
    if status != 200:
        raise RuntimeError(f"start {slot}: {status} {body.get('error')}")
    return dict(body)


async def stop_desktop(client: httpx.AsyncClient, soak: Soak, slot: str, session: str) -> None:
    status, body = await call(client, soak, "desktop_stop_confirm", relay="relay-1",
                              kind="virtual", slot=slot, desktop_session_id=session)  # fmt: skip
    if status != 200:
        raise RuntimeError(f"stop {slot}: {status} {body.get('error')}")


async def running(client: httpx.AsyncClient, soak: Soak) -> dict[str, str]:
    """``slot → session`` of running desktops, probed at the relay."""
    status, body = await call(client, soak, "desktop_list_active", probe=True)
    rows = body.get("desktops", []) if status == 200 else []
    return {r["slot"]: r["desktop_session_id"] for r in rows if r["state"] == "running"}


def ws_url(soak: Soak, viewer_url: str) -> str:
    """The viewer's WebSocket (the server answers a path when it has no public URL)."""
    path = viewer_url.split("://", 1)[-1].split("/", 1)[-1]
    return f"ws://127.0.0.1:{soak.port}/{path}websockify"


async def pull_frames(client: httpx.AsyncClient, soak: Soak, frames: int, wait_s: float) -> None:
    """Attach to ``main`` through the server and read ``frames`` full frames."""
    status, body = await call(client, soak, "desktop_attach", relay="relay-1",
                              kind="virtual", slot="main")  # fmt: skip
    if status != 200:
        raise RuntimeError(f"attach: {status}")
    rfb = await RFBClient.open_websocket(ws_url(soak, body["viewer_url"]))
    try:
        for _ in range(frames):
            await rfb.request_update(incremental=False)
            await asyncio.wait_for(rfb.read_update(), wait_s)
    finally:
        await rfb.close()


# -- workload loops -----------------------------------------------------------------------------


async def repeat(soak: Soak, what: str, step: Callable[[], Awaitable[None]]) -> None:
    """Run ``step`` until the run stops; a failure is recorded with when its step began."""
    while not soak.stop.is_set():
        began = soak.now()
        try:
            await step()
        except Exception as err:
            soak.error(began, f"{what}: {type(err).__name__}: {str(err)[:80]}")
            await asyncio.sleep(0.5)
        await asyncio.sleep(1)


async def churn(soak: Soak, client: httpx.AsyncClient, slot: str) -> None:
    async def cycle() -> None:
        row = (await start_desktop(client, soak, slot))["desktop"]
        await asyncio.sleep(2)
        await stop_desktop(client, soak, slot, row["desktop_session_id"])

    await repeat(soak, f"churn {slot}", cycle)


async def viewer(soak: Soak, client: httpx.AsyncClient) -> None:
    await repeat(soak, "viewer", lambda: pull_frames(client, soak, 3, 10))


async def agent(soak: Soak, client: httpx.AsyncClient) -> None:
    async def turn() -> None:
        status, shot = await call(client, soak, "screen", relay="relay-1", action="screenshot")
        if status != 200:
            raise RuntimeError(f"screenshot: {status}")
        revision = shot.get("screen_revision") or shot.get("result", {}).get("screen_revision")
        await call(client, soak, "screen", relay="relay-1", action="click", x=640, y=400,
                   expected_screen_revision=revision)  # fmt: skip
        await call(client, soak, "screen", relay="relay-1", action="type", text="soak ")

    await repeat(soak, "agent", turn)


async def subscriber(soak: Soak, client: httpx.AsyncClient) -> None:
    url = f"/api/v1/events?conversation_id={soak.seed.conversation_id}"
    headers = {"Authorization": f"Bearer {soak.seed.api_token}"}

    async def listen() -> None:
        async with client.stream("GET", url, headers=headers, timeout=None) as response:
            async for line in response.aiter_lines():
                if line.startswith("id:"):
                    soak.saw_event(line[3:].strip())
                if soak.stop.is_set():
                    return

    await repeat(soak, "sse", listen)


# -- what belongs to the run --------------------------------------------------------------------


def track(soak: Soak) -> None:
    """Add the relay's descendants, the processes its state file records, and their displays."""
    footprint = soak.footprint
    for process in (soak.server, soak.relay):
        if process is not None and process.is_alive():
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(process.pid).children(recursive=True):
                    footprint.add_live(child.pid)
    for record in _state_records(soak.state_dir):
        for child in record.get("processes", []):
            footprint.pids.setdefault(int(child["pid"]), float(child["create_time"]))
            if child["name"] == "Xvfb" and (display := _x_display_of(int(child["pid"]))):
                with contextlib.suppress(OSError):
                    made = (X_TMP / ".X11-unix" / f"X{display}").stat()
                    footprint.x_sockets.add((display, made.st_ino, made.st_mtime_ns))


def _state_records(state_dir: Path) -> list[dict[str, Any]]:
    try:
        state = json.loads((state_dir / "desktops.json").read_text())
    except (OSError, ValueError):
        return []
    return [*state.get("desktops", []), *state.get("starting", [])]


def _x_display_of(pid: int) -> int | None:
    """The display an X server listens on (its socket under /tmp/.X11-unix), if it runs."""
    with contextlib.suppress(psutil.Error):
        for conn in psutil.Process(pid).net_connections(kind="unix"):
            name = str(conn.laddr).rsplit("/X", 1)[-1]
            if ".X11-unix/X" in str(conn.laddr) and name.isdigit():
                return int(name)
    return None


async def tracker(soak: Soak) -> None:
    while not soak.stop.is_set():
        track(soak)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(soak.stop.wait(), 0.5)


# -- sampling -----------------------------------------------------------------------------------


def measure(process: ManagedProcess | None, prefix: str) -> dict[str, float]:
    if process is None or not process.is_alive():
        return {}
    try:
        proc = psutil.Process(process.pid)
        with proc.oneshot():
            return {
                f"{prefix}_pid": float(process.pid),
                f"{prefix}_rss_mb": proc.memory_info().rss / 2**20,
                f"{prefix}_fds": float(proc.num_fds()),
                f"{prefix}_threads": float(proc.num_threads()),
                f"{prefix}_children": float(len(proc.children(recursive=True))),
            }
    except psutil.Error:
        return {}


async def sampler(soak: Soak, every_s: float) -> None:
    while not soak.stop.is_set():
        sample = {"t": soak.now(), **measure(soak.server, "server"), **measure(soak.relay, "relay")}
        soak.samples.append(sample)
        progress = "  ".join(f"{k}={v:.1f}" for k, v in sample.items() if not k.endswith("pid"))
        print(f"sample {progress} errors={len(soak.errors)}", file=sys.stderr, flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(soak.stop.wait(), every_s)


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of ``(minute, value)`` points, per minute."""
    return pooled_slope([points])


def pooled_slope(segments: list[list[tuple[float, float]]]) -> float | None:
    """One slope over several segments, each with its own intercept (deviations from its mean)."""
    sxx = sxy = 0.0
    for points in segments:
        if len(points) < 3:
            continue
        mx = sum(x for x, _ in points) / len(points)
        my = sum(y for _, y in points) / len(points)
        sxx += sum((x - mx) ** 2 for x, _ in points)
        sxy += sum((x - mx) * (y - my) for x, y in points)
    return sxy / sxx if sxx else None


@dataclass
class Segment:
    """One incarnation of a process: its samples after warm-up, in run minutes. Counts are fitted
    from ``counts_from``; memory from ``rss_from`` (later for the server: its event history)."""

    process: str
    pid: int
    born_s: float
    end_s: float
    samples: list[dict[str, float]]
    counts_from: float
    rss_from: float

    def points(self, metric: str) -> list[tuple[float, float]]:
        key = f"{self.process}_{metric}"
        after = self.rss_from if metric == "rss_mb" else self.counts_from
        return [(s["t"] / 60, s[key]) for s in self.samples if key in s and s["t"] >= after]

    def judged_s(self, metric: str) -> float:
        points = self.points(metric)
        return (points[-1][0] - points[0][0]) * 60 if len(points) > 1 else 0.0

    def span(self, metric: str) -> str:
        points = self.points(metric)
        if not points:
            return "still warming up"
        return f"{points[0][0]:.1f}-{points[-1][0]:.1f} min"


def segments(soak: Soak, process: str, warmup_s: float) -> list[Segment]:
    """The samples of ``process`` cut at each new pid, each with its warm-up times."""
    key, found = f"{process}_pid", []
    for pid in dict.fromkeys(int(s[key]) for s in soak.samples if key in s):
        mine = [s for s in soak.samples if s.get(key) == pid]
        born = soak.born[pid] - soak.started
        rss_from = warmed_up_at(soak, process, pid, warmup_s)
        found.append(Segment(process, pid, born, mine[-1]["t"], mine, born + warmup_s, rss_from))
    return found


def warmed_up_at(soak: Soak, process: str, pid: int, warmup_s: float) -> float:
    """Run time when an incarnation's warm-up ends: ``warmup_s`` after its start and, for the
    server, once its event history is full (never, when it does not fill)."""
    end = soak.born[pid] - soak.started + warmup_s
    if process == "server":
        full = soak.history_full.get(pid)
        end = max(end, full - soak.started if full is not None else math.inf)
    return end


# -- faults -------------------------------------------------------------------------------------


async def recover(soak: Soak, client: httpx.AsyncClient, kind: str, began: float) -> None:
    """Record how long until the relay is connected, ``main`` is listed with its session id and
    a viewer gets a frame of it."""

    async def connected() -> bool:
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
            response = await client.get("/readyz")
            return response.status_code == 200 and response.json()["relays_connected"] > 0
        return False

    async def api_up() -> bool:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            return (await running(client, soak)).get("main") == soak.main_session
        return False

    async def viewer_up() -> bool:
        with contextlib.suppress(Exception):
            await pull_frames(client, soak, 1, 5)
            return True
        return False

    await until(connected, 120)
    soak.recovery.setdefault(f"{kind} relay connected", []).append(time.monotonic() - began)
    await until(api_up, 120)
    soak.recovery.setdefault(f"{kind} api", []).append(time.monotonic() - began)
    await until(viewer_up, 120)
    soak.recovery.setdefault(f"{kind} viewer", []).append(time.monotonic() - began)
    soak.windows[-1] = (soak.windows[-1][0], soak.now())


async def kill_relay_mid_start(soak: Soak, client: httpx.AsyncClient) -> None:
    """SIGKILL the relay while a start is recorded as in progress, then start a new one."""
    with contextlib.suppress(TimeoutError):
        await until(lambda: _has_starting(soak.state_dir), 30)
    track(soak)
    soak.windows.append((soak.now(), float("inf")))
    assert soak.relay is not None
    soak.relay.kill()
    began = time.monotonic()
    track(soak)
    start_relay(soak)
    await recover(soak, client, "relay kill", began)


async def _has_starting(state_dir: Path) -> bool:
    with contextlib.suppress(OSError, ValueError):
        return bool(json.loads((state_dir / "desktops.json").read_text()).get("starting"))
    return False


async def restart_server(soak: Soak, client: httpx.AsyncClient) -> None:
    soak.windows.append((soak.now(), float("inf")))
    assert soak.server is not None
    stopping = time.monotonic()
    soak.server.terminate(timeout=30)
    soak.recovery.setdefault("server shutdown", []).append(time.monotonic() - stopping)
    began = time.monotonic()
    start_server(soak)
    await recover(soak, client, "server restart", began)


# -- leftovers ----------------------------------------------------------------------------------


def leftovers(soak: Soak) -> dict[str, list[str]]:
    """What the run left behind once every desktop was stopped and server and relay exited."""
    return {
        "processes": _stray_processes(soak),
        "X sockets": _x_leftovers(soak.footprint),
        "shared memory": _shm_leftovers(soak.footprint),
        "runtime dirs": _dir_leftovers(soak),
    }


def _stray_processes(soak: Soak) -> list[str]:
    root, found = str(soak.root), []
    for proc in psutil.process_iter(["name", "status"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        with contextlib.suppress(psutil.Error):
            created = soak.footprint.pids.get(proc.pid)
            ours = created is not None and abs(proc.create_time() - created) < 1.0
            if ours or _names(proc, root):
                found.append(f"{proc.pid} {proc.info['name']}")
    return found


def _names(proc: psutil.Process, root: str) -> bool:
    if any(root in arg for arg in proc.cmdline()):
        return True
    with contextlib.suppress(psutil.AccessDenied):
        return any(root in value for value in proc.environ().values())
    return False


def _x_leftovers(footprint: Footprint) -> list[str]:
    """Socket files this run's X servers made (seen while they listened) that nobody answers
    on any more, and lock files naming its processes. Other runs on the host take the same
    display numbers, so a socket is this run's only when it is the very file it saw (inode and
    time)."""
    found = []
    for display, inode, mtime in sorted(footprint.x_sockets):
        sock = X_TMP / ".X11-unix" / f"X{display}"
        with contextlib.suppress(OSError):
            now = sock.stat()
            if (now.st_ino, now.st_mtime_ns) == (inode, mtime) and not _answers(sock):
                found.append(sock.name)
    for display in footprint.displays:
        lock = X_TMP / f".X{display}-lock"
        with contextlib.suppress(OSError, ValueError):
            if int(lock.read_text().strip()) in footprint.pids:
                found.append(lock.name)
    return found


def _answers(sock: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(1.0)
        try:
            client.connect(str(sock))
        except OSError:
            return False
        return True


def _shm_leftovers(footprint: Footprint) -> list[str]:
    """SysV segments created by this run's processes (x11vnc's, when it is killed)."""
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()
    except OSError:
        return []
    header = rows[0].split() if rows else []
    segs = [dict(zip(header, row.split(), strict=False)) for row in rows[1:]]
    return [
        f"shmid {s['shmid']} (creator {s['cpid']}, {s['nattch']} attached)"
        for s in segs
        if _was_ours(footprint, int(s["cpid"]), float(s["ctime"]))
    ]


def _was_ours(footprint: Footprint, pid: int, at: float) -> bool:
    """True when ``pid`` was this run's process at time ``at`` (a busy host reuses pids)."""
    created = footprint.pids.get(pid)
    if created is None or at < created - 1:
        return False
    with contextlib.suppress(psutil.Error):
        now = psutil.Process(pid).create_time()
        if abs(now - created) > 1 and now <= at + 1:
            return False  # another process, started later under the same pid, made it
    return True


def _dir_leftovers(soak: Soak) -> list[str]:
    """Desktops' private directories, and sound runtime directories (the relay's TMPDIR is the
    run's own, so every ``relaydesk-pulse-*/display-N`` there is this run's)."""
    run = soak.state_dir / "run"
    found = [f"run/{p.name}" for p in run.iterdir() if p.is_dir()] if run.is_dir() else []
    found += [str(p.relative_to(soak.root)) for p in soak.tmp_dir.glob("relaydesk-pulse-*/*")]
    return found


# -- the run ------------------------------------------------------------------------------------


async def workload(soak: Soak, client: httpx.AsyncClient, sample_s: float) -> list[Any]:
    loops: list[Coroutine[Any, Any, None]] = [sampler(soak, sample_s), tracker(soak)]
    loops += [agent(soak, client)]
    loops += [churn(soak, client, slot) for slot in CHURN_SLOTS]
    loops += [viewer(soak, client) for _ in range(3)]
    loops += [subscriber(soak, client) for _ in range(5)]
    return [asyncio.create_task(loop) for loop in loops]


async def schedule(soak: Soak, client: httpx.AsyncClient, minutes: float) -> None:
    third = minutes * 60 / 3
    await asyncio.sleep(third)
    await kill_relay_mid_start(soak, client)
    await asyncio.sleep(max(0.0, 2 * third - soak.now()))
    await restart_server(soak, client)
    await asyncio.sleep(max(0.0, 3 * third - soak.now()))


async def finish(soak: Soak, client: httpx.AsyncClient) -> dict[str, list[str]]:
    """Stop every desktop (a start the workload left in flight included), then both processes."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        track(soak)
        active = await running(client, soak)
        for slot, session in active.items():
            await stop_desktop(client, soak, slot, session)
        if not active and not await _has_starting(soak.state_dir):
            break
        await asyncio.sleep(0.5)
    track(soak)
    for process in (soak.relay, soak.server):
        if process is not None:
            process.terminate(timeout=30)
    return leftovers(soak)


@contextlib.contextmanager
def run_dir(keep: bool) -> Iterator[Path]:
    """A fresh directory for the run; ``keep`` leaves it (logs, state) for a post-mortem."""
    if keep:
        path = Path(tempfile.mkdtemp(prefix="relaydesk-soak-"))
        print(f"run directory (kept): {path}", file=sys.stderr, flush=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="relaydesk-soak-") as tmp:
        yield Path(tmp)


async def run(args: argparse.Namespace) -> int:
    minutes, sample_s, warmup_s = args.minutes, args.sample_s, args.warmup_s
    with run_dir(args.keep) as root:
        soak = Soak(await seed_database(root / "data"), root, free_port())
        soak.tmp_dir.mkdir()
        if args.trace_server is not None:
            soak.trace = (args.trace_server.resolve(), args.trace_every_s)
        start_server(soak)
        start_relay(soak)
        try:
            return await _measure(soak, minutes, sample_s, warmup_s)
        finally:
            await _tear_down(soak)


async def _tear_down(soak: Soak) -> None:
    """Whatever happened: no process and no desktop of the run stays behind."""
    for process in (soak.relay, soak.server):
        if process is not None and process.is_alive():
            process.terminate(timeout=30)
    await stop_desktops_in(soak.state_dir)


async def _measure(soak: Soak, minutes: float, sample_s: float, warmup_s: float) -> int:
    async with httpx.AsyncClient(base_url=soak.url, timeout=30) as client:
        await until(lambda: _relay_ready(client, soak), 60)
        soak.main_session = (await start_desktop(client, soak, "main"))["desktop"][
            "desktop_session_id"
        ]
        soak.started = time.monotonic()
        tasks = await workload(soak, client, sample_s)
        await schedule(soak, client, minutes)
        soak.stop.set()
        await asyncio.wait(tasks, timeout=30)
        for task in tasks:
            task.cancel()
        left = await finish(soak, client)
    return Report(soak, minutes, warmup_s, left).print()


async def _relay_ready(client: httpx.AsyncClient, soak: Soak) -> bool:
    with contextlib.suppress(httpx.HTTPError, ValueError):
        status, _ = await call(client, soak, "desktop_status", relay="relay-1")
        return status == 200
    return False


# -- the report ---------------------------------------------------------------------------------


@dataclass
class Report:
    soak: Soak
    minutes: float
    warmup_s: float
    left: dict[str, list[str]]
    failed: list[str] = field(default_factory=list)

    def verdict(self, name: str, figure: str, ok: bool | None) -> None:
        """``verdict NAME: FIGURE ok|FAIL|not judged`` (the smoke test reads these lines)."""
        status = "not judged" if ok is None else "ok" if ok else "FAIL"
        if ok is False:
            self.failed.append(name)
        print(f"verdict {name}: {figure} {status}")

    def print(self) -> int:
        soak = self.soak
        print(f"soak: {self.minutes:g} min, {len(soak.samples)} samples; slopes per incarnation "
              f"after its warm-up: {self.warmup_s:.0f} s from its start and, for the server, "
              f"until its event history holds {HISTORY_LENGTH} events")  # fmt: skip
        for process in ("server", "relay"):
            self.slopes(process)
        self.recoveries()
        self.errors()
        self.leftovers()
        return 1 if self.failed else 0

    def slopes(self, process: str) -> None:
        parts = segments(self.soak, process, self.warmup_s)
        for n, seg in enumerate(parts, 1):
            figures = "  ".join(_fmt(m, slope(seg.points(m))) for m in METRICS)
            gains = (f"{m} {floor_gain(seg.points(m)):+g}" for m in METRICS[1:] if seg.points(m))
            print(f"  {process} segment {n} (pid {seg.pid}, {seg.born_s / 60:.1f}-"
                  f"{seg.end_s / 60:.1f} min; RSS fitted {seg.span('rss_mb')}, counts "
                  f"{seg.span('fds')}): {figures}  (floor: {', '.join(gains)})")  # fmt: skip
        for metric in METRICS:
            judged = [seg for seg in parts if seg.judged_s(metric) >= MIN_JUDGED_S]
            combined = pooled_slope([seg.points(metric) for seg in parts])
            self.verdict(f"{process} {metric} slope", f"{_fmt(metric, combined)} combined",
                         _slope_ok(metric, judged) if judged else None)  # fmt: skip

    def recoveries(self) -> None:
        soak = self.soak
        for name, times in soak.recovery.items():
            print(f"  recovery {name}: {', '.join(f'{t:.2f}' for t in times)} s")
        for kind, target in (("api", TARGET_API_S), ("viewer", TARGET_VIEWER_S)):
            worst = max((t for k, v in soak.recovery.items() if k.endswith(kind) for t in v),
                        default=float("inf"))  # fmt: skip
            self.verdict(f"recovery {kind}", f"worst {worst:.2f} s (target <= {target:g})",
                         worst <= target)  # fmt: skip
            print(f"worst {kind} recovery / target ratio: {worst / target:.2f}")
        # A recovery is recorded only once ``main`` answers with its original session id.
        kept = sum(1 for k in soak.recovery if k.endswith(" api"))
        self.verdict("session ids kept", f"{kept} of 2 kills", kept == 2)

    def errors(self) -> None:
        soak = self.soak
        stray = [e for e in soak.errors if not _overlaps(e, soak.windows)]
        print(f"  errors: {len(soak.errors) - len(stray)} in kill windows "
              f"{[(round(a), round(b)) for a, b in soak.windows]}")  # fmt: skip
        for e in stray[:10]:
            print(f"    {e.began:.0f}-{e.ended:.0f} s: {e.what}")
        self.verdict("errors outside kill windows", str(len(stray)), not stray)

    def leftovers(self) -> None:
        for name, items in self.left.items():
            print(f"  leftovers {name}: {len(items)} {items[:5] if items else ''}")
        total = sum(len(items) for items in self.left.values())
        footprint = self.soak.footprint
        print(f"  scope: {len(footprint.pids)} pids, displays {footprint.displays}")
        processes = len(self.left.get("processes", []))
        self.verdict("leftover processes", str(processes), processes == 0)
        self.verdict("leftovers", str(total), total == 0)


def _fmt(metric: str, value: float | None) -> str:
    return f"{metric} {'n/a' if value is None else f'{value:+.3f}/min'}"


def _slope_ok(metric: str, judged: list[Segment]) -> bool:
    """RSS: every judged segment within the target. Counts: no judged segment gained two both
    by its trend and by its floor (connections and churn swing fds by ±3 around a floor that a
    15-minute segment need not touch in each third; a leak gains one per cycle, hundreds)."""
    if metric == "rss_mb":
        return all((slope(seg.points(metric)) or 0.0) <= TARGET_RSS_SLOPE_MB for seg in judged)
    return not any(_gained(seg, metric) for seg in judged)


def _gained(seg: Segment, metric: str) -> bool:
    trend = (slope(seg.points(metric)) or 0.0) * seg.judged_s(metric) / 60
    return trend >= COUNT_GAIN and floor_gain(seg.points(metric)) >= COUNT_GAIN


def floor_gain(points: list[tuple[float, float]]) -> float:
    """How far the lowest value rose from a segment's first third to its last third (counts
    swing with open connections and running desktops; a leak lifts the floor)."""
    third = max(1, len(points) // 3)
    return min(y for _, y in points[-third:]) - min(y for _, y in points[:third])


def _overlaps(error: Failure, windows: list[tuple[float, float]]) -> bool:
    return any(error.began <= b and error.ended >= a for a, b in windows)


def main() -> int:
    p = parser("soak: churn, viewers, an agent, SSE, a relay kill and a server restart")
    p.add_argument("--minutes", type=float, default=60.0, help="length of the run")
    p.add_argument("--sample-s", type=float, default=30.0, help="sampling interval")
    p.add_argument("--warmup-s", type=float, default=WARMUP_S, help="per incarnation")
    p.add_argument("--trace-server", type=Path, help="dump tracemalloc snapshots here")
    p.add_argument("--trace-every-s", type=float, default=120.0, help="snapshot interval")
    p.add_argument("--keep", action="store_true", help="keep the run directory (logs, state)")
    args = p.parse_args()
    if args.quick:
        args.minutes, args.sample_s, args.warmup_s = 3.0, 10.0, QUICK_WARMUP_S
    return asyncio.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())
