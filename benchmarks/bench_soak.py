"""Soak: one server, one relay, churn and faults for ``--minutes``; leaks, leftovers, recovery.

Workload: desktops started and stopped in two slots every few seconds (``churn-a``,
``churn-b``), one long-lived desktop (``main``) that must survive every kill with its session
id, three viewers reconnecting through the server and pulling full frames, an agent loop
(screenshot → guarded click → type), five SSE subscribers. The relay is SIGKILLed at a third
of the run (the kill lands in the middle of a churn start) and the server restarted at two
thirds. RSS, fds, threads and child processes of server and relay are sampled every
``--sample-s``; at the end every desktop is stopped and leftovers are looked for (processes
naming the relay's state directory, X sockets, shared memory of dead creators, runtime
directories). Prints slopes per minute after warm-up (a third of the run) and recovery times
against the targets of docs/operations.md.

    python benchmarks/bench_soak.py --minutes 60
    python benchmarks/bench_soak.py --quick        # 3 minutes, part of scripts/test
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from benchmarks.common import parser
from benchmarks.rfb import RFBClient
from relay.desktops.audio import default_runtime_root, stale_runtime_dirs
from relay.desktops.launch import X_TMP, x_display_alive
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


@dataclass
class Soak:
    seed: Seed
    root: Path
    port: int
    server: ManagedProcess | None = None
    relay: ManagedProcess | None = None
    samples: list[dict[str, float]] = field(default_factory=list)
    errors: list[tuple[float, str]] = field(default_factory=list)
    windows: list[tuple[float, float]] = field(default_factory=list)  # kill windows
    recovery: dict[str, list[float]] = field(default_factory=dict)
    main_session: str = ""
    started: float = field(default_factory=time.monotonic)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def state_dir(self) -> Path:
        return self.seed.data_dir / "relay-state"

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.seed.env(), **FAST_ENV, "RELAYDESK_LOG_LEVEL": "warning"}

    def now(self) -> float:
        return time.monotonic() - self.started

    def error(self, what: str) -> None:
        self.errors.append((self.now(), what))


# -- processes ----------------------------------------------------------------------------------


def start_server(soak: Soak) -> None:
    argv = relaydesk_argv("server", "--port", str(soak.port))
    soak.server = ManagedProcess(argv, soak.root / "server.log", env=soak.env()).start()


def start_relay(soak: Soak) -> None:
    token = soak.root / "relay.token"
    token.write_text(soak.seed.relay_token)
    token.chmod(0o600)
    argv = relaydesk_argv("relay", "--server", soak.url, "--token-file", str(token))
    soak.relay = ManagedProcess(argv, soak.root / "relay.log", env=soak.env()).start()


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


# -- workload loops -----------------------------------------------------------------------------


async def guarded(soak: Soak, what: str, step: Callable[[], Awaitable[None]]) -> None:
    """Run one step of a loop; an error is counted (inside a kill window or not)."""
    try:
        await step()
    except Exception as err:
        soak.error(f"{what}: {type(err).__name__}: {str(err)[:80]}")
        await asyncio.sleep(0.5)


async def churn(soak: Soak, client: httpx.AsyncClient, slot: str) -> None:
    while not soak.stop.is_set():

        async def cycle() -> None:
            row = (await start_desktop(client, soak, slot))["desktop"]
            await asyncio.sleep(2)
            await stop_desktop(client, soak, slot, row["desktop_session_id"])

        await guarded(soak, f"churn {slot}", cycle)
        await asyncio.sleep(1)


async def viewer(soak: Soak, client: httpx.AsyncClient) -> None:
    while not soak.stop.is_set():

        async def session() -> None:
            status, body = await call(client, soak, "desktop_attach", relay="relay-1",
                                      kind="virtual", slot="main")  # fmt: skip
            if status != 200:
                raise RuntimeError(f"attach: {status}")
            url = ws_url(soak, body["viewer_url"])
            rfb = await RFBClient.open_websocket(url)
            try:
                for _ in range(3):
                    await rfb.request_update(incremental=False)
                    await asyncio.wait_for(rfb.read_update(), 10)
            finally:
                await rfb.close()

        await guarded(soak, "viewer", session)
        await asyncio.sleep(1)


async def agent(soak: Soak, client: httpx.AsyncClient) -> None:
    while not soak.stop.is_set():

        async def turn() -> None:
            status, shot = await call(client, soak, "screen", relay="relay-1", action="screenshot")
            if status != 200:
                raise RuntimeError(f"screenshot: {status}")
            revision = shot.get("screen_revision") or shot.get("result", {}).get("screen_revision")
            await call(client, soak, "screen", relay="relay-1", action="click", x=640, y=400,
                       expected_screen_revision=revision)  # fmt: skip
            await call(client, soak, "screen", relay="relay-1", action="type", text="soak ")

        await guarded(soak, "agent", turn)
        await asyncio.sleep(1)


async def subscriber(soak: Soak, client: httpx.AsyncClient) -> None:
    url = f"/api/v1/events?conversation_id={soak.seed.conversation_id}"
    headers = {"Authorization": f"Bearer {soak.seed.api_token}"}
    while not soak.stop.is_set():

        async def listen() -> None:
            async with client.stream("GET", url, headers=headers, timeout=None) as response:
                async for _ in response.aiter_lines():
                    if soak.stop.is_set():
                        return

        await guarded(soak, "sse", listen)
        await asyncio.sleep(1)


# -- sampling -----------------------------------------------------------------------------------


def measure(process: ManagedProcess | None, prefix: str) -> dict[str, float]:
    if process is None or not process.is_alive():
        return {}
    try:
        proc = psutil.Process(process.pid)
        with proc.oneshot():
            return {
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
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(soak.stop.wait(), every_s)


def slope_per_min(samples: list[dict[str, float]], key: str, after_s: float) -> float | None:
    """Least-squares slope of ``key`` per minute over samples after ``after_s``."""
    points = [(s["t"] / 60, s[key]) for s in samples if s["t"] >= after_s and key in s]
    if len(points) < 3:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else None


# -- faults -------------------------------------------------------------------------------------


async def recover(soak: Soak, client: httpx.AsyncClient, kind: str) -> None:
    """Record how long until the API answers and a viewer gets a frame of ``main`` again."""
    began = time.monotonic()

    async def api_up() -> bool:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            return (await running(client, soak)).get("main") == soak.main_session
        return False

    async def viewer_up() -> bool:
        with contextlib.suppress(Exception):
            status, body = await call(client, soak, "desktop_attach", relay="relay-1",
                                      kind="virtual", slot="main")  # fmt: skip
            url = ws_url(soak, body["viewer_url"])
            rfb = await RFBClient.open_websocket(url)
            await rfb.request_update(incremental=False)
            await asyncio.wait_for(rfb.read_update(), 5)
            await rfb.close()
            return status == 200
        return False

    api = await until(api_up, 120)
    view = api + await until(viewer_up, 120)
    soak.recovery.setdefault(f"{kind} api", []).append(time.monotonic() - began - (view - api))
    soak.recovery.setdefault(f"{kind} viewer", []).append(time.monotonic() - began)
    soak.windows[-1] = (soak.windows[-1][0], soak.now())


async def kill_relay_mid_start(soak: Soak, client: httpx.AsyncClient) -> None:
    """SIGKILL the relay while a start is recorded as in progress, then start a new one."""
    starting = soak.state_dir / "desktops.json"
    with contextlib.suppress(TimeoutError):
        await until(lambda: _has_starting(starting), 30)
    soak.windows.append((soak.now(), float("inf")))
    assert soak.relay is not None
    soak.relay.kill()
    start_relay(soak)
    await recover(soak, client, "relay kill")


async def _has_starting(path: Path) -> bool:
    with contextlib.suppress(OSError):
        return '"starting": [\n  {' in path.read_text()
    return False


async def restart_server(soak: Soak, client: httpx.AsyncClient) -> None:
    soak.windows.append((soak.now(), float("inf")))
    assert soak.server is not None
    soak.server.terminate(timeout=30)
    start_server(soak)
    await recover(soak, client, "server restart")


# -- leftovers ----------------------------------------------------------------------------------


def leftovers(soak: Soak) -> dict[str, list[str]]:
    """What the run left behind once every desktop was stopped and the relay exited."""
    state = str(soak.state_dir)
    procs = [
        f"{p.pid} {p.info['name']}"
        for p in psutil.process_iter(["name", "cmdline"])
        if any(state in arg for arg in p.info["cmdline"] or [])
    ]
    run = soak.state_dir / "run"
    dirs = [p.name for p in run.iterdir() if p.is_dir()] if run.is_dir() else []
    dirs += [p.name for p in stale_runtime_dirs(default_runtime_root())]
    sockets = [
        p.name for p in X_TMP.joinpath(".X11-unix").glob("X*")
        if p.name[1:].isdigit() and not x_display_alive(int(p.name[1:]))
    ]  # fmt: skip
    return {"processes": procs, "runtime dirs": dirs, "X sockets": sockets,
            "shared memory": _dead_shm()}  # fmt: skip


def _dead_shm() -> list[str]:
    """Segments with no attachment whose creator is gone (what x11vnc leaks when killed)."""
    try:
        rows = [row.split() for row in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]]
    except OSError:
        return []
    return [r[1] for r in rows if r[6] == "0" and not psutil.pid_exists(int(r[4]))]


# -- the run ------------------------------------------------------------------------------------


async def workload(soak: Soak, client: httpx.AsyncClient, sample_s: float) -> list[Any]:
    loops: list[Coroutine[Any, Any, None]] = [sampler(soak, sample_s), agent(soak, client)]
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
    for slot, session in (await running(client, soak)).items():
        await stop_desktop(client, soak, slot, session)
    for process in (soak.relay, soak.server):
        if process is not None:
            process.terminate(timeout=30)
    return leftovers(soak)


async def run(minutes: float, sample_s: float) -> int:
    with tempfile.TemporaryDirectory(prefix="relaydesk-soak-") as tmp:
        root = Path(tmp)
        soak = Soak(await seed_database(root / "data"), root, free_port())
        start_server(soak)
        start_relay(soak)
        try:
            return await _measure(soak, minutes, sample_s)
        finally:
            await _tear_down(soak)


async def _tear_down(soak: Soak) -> None:
    """Whatever happened: no process and no desktop of the run stays behind."""
    for process in (soak.relay, soak.server):
        if process is not None and process.is_alive():
            process.terminate(timeout=30)
    await stop_desktops_in(soak.state_dir)


async def _measure(soak: Soak, minutes: float, sample_s: float) -> int:
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
    return report(soak, minutes, left)


async def _relay_ready(client: httpx.AsyncClient, soak: Soak) -> bool:
    with contextlib.suppress(httpx.HTTPError, ValueError):
        status, _ = await call(client, soak, "desktop_status", relay="relay-1")
        return status == 200
    return False


def outside_windows(soak: Soak) -> list[tuple[float, str]]:
    return [(t, e) for t, e in soak.errors if not any(a <= t <= b for a, b in soak.windows)]


def report(soak: Soak, minutes: float, left: dict[str, list[str]]) -> int:
    warm = minutes * 60 / 3
    print(f"soak: {minutes:g} min, {len(soak.samples)} samples, slopes after {warm:.0f} s")
    for key in ("server_rss_mb", "relay_rss_mb", "server_fds", "relay_fds", "server_threads",
                "relay_threads", "relay_children"):  # fmt: skip
        slope = slope_per_min(soak.samples, key, warm)
        target = f"(target <= {TARGET_RSS_SLOPE_MB})" if key.endswith("rss_mb") else "(target 0)"
        print(f"  slope {key}: {'n/a' if slope is None else f'{slope:+.3f}'} /min {target}")
    for name, times in soak.recovery.items():
        limit = TARGET_VIEWER_S if name.endswith("viewer") else TARGET_API_S
        print(f"  recovery {name}: {', '.join(f'{t:.2f}' for t in times)} s (target <= {limit})")
    stray = outside_windows(soak)
    print(f"  errors: {len(soak.errors)} in kill windows + outside: {len(stray)}")
    for when, what in stray[:10]:
        print(f"    at {when:.0f} s: {what}")
    for name, items in left.items():
        print(f"  leftovers {name}: {len(items)} {items[:5] if items else ''}")
    # Recovery is only recorded once ``main`` answers with its original session id.
    print(f"  main desktop back with its session id after every kill: {len(soak.recovery) == 4}")
    api = max((t for k, v in soak.recovery.items() if k.endswith("api") for t in v), default=0)
    view = max((t for k, v in soak.recovery.items() if k.endswith("viewer") for t in v), default=0)
    print(f"worst recovery / target ratio: api {api / TARGET_API_S:.2f}, "
          f"viewer {view / TARGET_VIEWER_S:.2f}")  # fmt: skip
    return 1 if left["processes"] else 0


def main() -> int:
    p = parser("soak: churn, viewers, an agent, SSE, a relay kill and a server restart")
    p.add_argument("--minutes", type=float, default=60.0, help="length of the run")
    p.add_argument("--sample-s", type=float, default=30.0, help="sampling interval")
    args = p.parse_args()
    minutes, sample_s = (3.0, 10.0) if args.quick else (args.minutes, args.sample_s)
    return asyncio.run(run(minutes, sample_s))


if __name__ == "__main__":
    raise SystemExit(main())
