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
    python benchmarks/bench_soak.py --quick --keep --log-level info  # recovery timeline

With ``--log-level info`` the relay logs its start-up (``since_exec_s``, ``adopt_s``,
``dial_s``) and the run prints when each kill and each recovery step happened (UTC, as the logs
stamp it); ``--keep`` keeps ``relay.log`` and ``server.log`` to line them up.

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
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from benchmarks.common import parser
from benchmarks.rfb import RFBClient
from benchmarks.soak_leftovers import leftovers, track, tracker
from benchmarks.soak_report import Report, sampler
from benchmarks.soak_run import Soak
from tests.support.processes import ManagedProcess, free_port
from tests.support.stack import (
    relaydesk_argv,
    seed_database,
    stop_desktops_in,
)

CHURN_SLOTS = ("churn-a", "churn-b")
# The server keeps screenshots for SCREEN_REVISION_TTL_S (300 s): after that its revision store
# holds a steady population. A minute more lets the allocator's pools settle. The server's
# warm-up also lasts until its event history (HISTORY_LENGTH events per topic, ~5 KB each with
# their rows and cached encodings) is full: at this workload's ~0.55 events/s on the
# conversation's topic, ~30 minutes.
WARMUP_S = 360.0
QUICK_WARMUP_S = 30.0
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
    status, body = await call(
        client,
        soak,
        "desktop_stop_confirm",
        relay="relay-1",
        kind="virtual",
        slot=slot,
        desktop_session_id=session,
    )
    if status != 200:
        raise RuntimeError(f"stop {slot}: {status} {body.get('error')}")


async def running(client: httpx.AsyncClient, soak: Soak) -> dict[str, str]:
    """``slot → session`` of running desktops, probed at the relay."""
    status, body = await call(client, soak, "desktop_list_active", probe=True)
    rows = body.get("desktops", []) if status == 200 else []
    return {r["slot"]: r["desktop_session_id"] for r in rows if r["state"] == "running"}


def ws_url(soak: Soak, viewer_url: str) -> str:
    """The viewer's WebSocket (the server answers a path when it has no public URL)."""
    path = urlsplit(viewer_url).path  # an agent's URL ends in ?view_only=1
    return f"ws://127.0.0.1:{soak.port}{path}websockify"


async def pull_frames(client: httpx.AsyncClient, soak: Soak, frames: int, wait_s: float) -> None:
    """Attach to ``main`` through the server and read ``frames`` full frames."""
    status, body = await call(
        client, soak, "desktop_attach", relay="relay-1", kind="virtual", slot="main"
    )
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
        await call(
            client,
            soak,
            "screen",
            relay="relay-1",
            action="click",
            x=640,
            y=400,
            expected_screen_revision=revision,
        )
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

    for what, back in (("relay connected", connected), ("api", api_up), ("viewer", viewer_up)):
        try:
            await until(back, 120)
        except TimeoutError:
            print(f"recovery {kind} {what}: not back after 120 s", file=sys.stderr)
            print_log_tails(soak)
            raise
        took = time.monotonic() - began
        soak.recovery.setdefault(f"{kind} {what}", []).append(took)
        print(f"recovery {kind} {what}: {took:.2f} s (at {wall_clock()})", file=sys.stderr)
    soak.windows[-1] = (soak.windows[-1][0], soak.now())


def print_log_tails(soak: Soak, lines: int = 150) -> None:
    """The last lines of the server's and the relay's logs, to tell why a recovery failed."""
    for name in ("relay.log", "server.log"):
        with contextlib.suppress(OSError):
            tail = (soak.root / name).read_text(errors="replace").splitlines()[-lines:]
            print(f"--- last {len(tail)} lines of {name}", file=sys.stderr)
            print("\n".join(tail), file=sys.stderr)


def wall_clock() -> str:
    """Now, as the processes' log lines stamp it (UTC, milliseconds), to line them up."""
    now = time.time()
    return time.strftime("%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}"


async def kill_relay_mid_start(soak: Soak, client: httpx.AsyncClient) -> None:
    """SIGKILL the relay while a start is recorded as in progress, then start a new one."""
    with contextlib.suppress(TimeoutError):
        await until(lambda: _has_starting(soak.state_dir), 30)
    track(soak)
    soak.windows.append((soak.now(), float("inf")))
    assert soak.relay is not None
    soak.relay.kill()
    began = time.monotonic()
    print(f"relay killed at {wall_clock()}", file=sys.stderr)
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
    print(f"server stopped at {wall_clock()}", file=sys.stderr)
    start_server(soak)
    await recover(soak, client, "server restart", began)


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
        soak = Soak(await seed_database(root / "data"), root, free_port(), log_level=args.log_level)
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


def main() -> int:
    p = parser("soak: churn, viewers, an agent, SSE, a relay kill and a server restart")
    p.add_argument("--minutes", type=float, default=60.0, help="length of the run")
    p.add_argument("--sample-s", type=float, default=30.0, help="sampling interval")
    p.add_argument("--warmup-s", type=float, default=WARMUP_S, help="per incarnation")
    p.add_argument("--trace-server", type=Path, help="dump tracemalloc snapshots here")
    p.add_argument("--trace-every-s", type=float, default=120.0, help="snapshot interval")
    p.add_argument("--keep", action="store_true", help="keep the run directory (logs, state)")
    p.add_argument("--log-level", default="warning", help="of server and relay (info: timeline)")
    args = p.parse_args()
    if args.quick:
        args.minutes, args.sample_s, args.warmup_s = 3.0, 10.0, QUICK_WARMUP_S
    return asyncio.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())
