"""Replicas: what reaching another replica adds, for a relay request and a guarded click.

Replica A (the real server app, in this process) on PostgreSQL and Redis holds a real relay; a
second ``ClusterRouter`` B, holding no relay, reaches it through A's internal channel.

1. The same request (``ping``, the empty op) is timed through A's hub (owner-local) and through
   B (forwarded: B's link to A, then A's hub), interleaved in one run.
2. A guarded click on a screenshot A took, through A's screen tool and through a screen tool on
   B (the whole call forwarded to A, which keeps the capture, runs the guard and asks the
   relay), interleaved in one run on a 1280x800 virtual desktop.

3. The same two calls through the HTTP API of two replica processes, as callers make them: a
   ``mouse_position`` (a relay request) and a guarded click on a screenshot taken through the
   owner, each sent to the owner and to the other replica, interleaved. Here the two replicas
   run on their own event loops, as deployed; in 1 and 2 one loop runs both, so every hop
   also waits for the other replica's work.

4. A viewer pulling full 1280x800 frames through the owner, then through the other replica
   (spliced to the owner over the replica link), in alternating rounds: the CPU seconds per GB
   carried of the replica the viewer is connected to, and the throughput of each path.

Targets: added p50 (B - A) ≤ 1 ms on loopback, for each call; the forwarding replica's CPU per
GB ≤ 1.1 times the owner's when the viewer is on the owner.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import psutil
import redis.asyncio as redis

from benchmarks.common import HttpClient, parser, percentile, summary
from benchmarks.rfb import RFBClient
from server.cluster.ownership import OWNERS, Ownership
from server.cluster.peers import Peers
from server.cluster.router import ClusterRouter
from server.cluster.screen import ScreenForwarding
from server.cluster.signing import ClusterSigner
from server.db.audit import AuditRow
from server.relays.hub import RelayHub
from server.screen.action import RouterRequests
from server.screen.revisions import RevisionStore
from server.screen.tool import Caller, ScreenTool
from tests.cluster.test_replicas import _seed
from tests.support.postgres import PostgresCluster, start_cluster
from tests.support.processes import ProcessTracker
from tests.support.redis import RedisServer, start_redis
from tests.support.stack import (
    Seed,
    ServerProcess,
    inprocess_server,
    seed_action,
    start_relay,
    start_server,
    wait_until,
)
from tests.support.xrecorder import XRecorder
from wire.ids import RelayId

Call = Callable[[], Awaitable[Any]]


async def _ms(call: Awaitable[Any]) -> float:
    start = time.perf_counter()
    await call
    return (time.perf_counter() - start) * 1000


async def _interleaved(count: int, local: Call, forwarded: Call) -> tuple[list[float], list[float]]:
    """``count`` timings of each, alternating, after a warm-up of both."""
    for _ in range(max(5, count // 20)):
        await local(), await forwarded()
    local_ms, forwarded_ms = [], []
    for _ in range(count):
        local_ms.append(await _ms(local()))
        forwarded_ms.append(await _ms(forwarded()))
    return local_ms, forwarded_ms


def _report(what: str, local_ms: list[float], forwarded_ms: list[float]) -> None:
    print(summary(f"owner-local {what}", local_ms))
    print(summary(f"forwarded {what}", forwarded_ms))
    added = percentile(forwarded_ms, 0.5) - percentile(local_ms, 0.5)
    print(f"added by forwarding, p50: {added:.3f} ms")
    print(f"target added p50 <= 1 ms: {'met' if added <= 1.0 else 'NOT met'}")


class _NoAudit:
    async def write_audit(self, row: AuditRow) -> None:
        return None


async def _clicks(
    app: Any, other: ClusterRouter, caller: Caller, relay_id: RelayId, count: int
) -> None:
    """A guarded click on A's screenshot, through A's tool and through a tool on B."""
    parts = app.state.parts
    revisions = RevisionStore(parts.settings.secret_key, issuer=other.replica_id)
    at_b = ScreenTool(RouterRequests(other), revisions, _NoAudit(), ScreenForwarding(other))
    args = {"kind": "virtual", "slot": "main", "geometry": "1280x800"}
    row = await parts.relays.request(relay_id, "desktop.start", args, 60)
    # A window of our own takes the clicks, so they change nothing on the screen.
    recorder = await asyncio.to_thread(XRecorder, row["display"], 10.0)
    try:
        await _timed_clicks(parts.screen, at_b, caller, count)
    finally:
        await asyncio.to_thread(recorder.stop)
    assert other.forwarded["screen"] >= count


async def _timed_clicks(at_a: ScreenTool, at_b: ScreenTool, caller: Caller, count: int) -> None:
    shot = await at_a.run(caller, {"action": "screenshot"})
    click = {
        "action": "click",
        "x": 640,
        "y": 400,
        "expected_screen_revision": shot["screen_revision"],
    }
    local, forwarded = await _interleaved(
        count, lambda: at_a.run(caller, dict(click)), lambda: at_b.run(caller, dict(click))
    )
    _report("guarded click", local, forwarded)


async def run(count: int, pg: PostgresCluster, rd: RedisServer) -> int:
    root = Path(tempfile.mkdtemp(prefix="relaydesk-bench-replicas-"))
    tracker = ProcessTracker(root / "processes")
    secret = secrets.token_urlsafe(24)
    client = redis.Redis.from_url(rd.url)
    try:
        seed = await _seed(root / "data", pg.create_database("bench_replicas"))
        async with inprocess_server(seed, redis_url=rd.url, cluster_secret=secret) as (app, url):
            env = {"RELAYDESK_DESKTOP_APPS": ",", "RELAYDESK_LOG_LEVEL": "warning"}
            start_relay(tracker.start, seed, url, env=env, extra_args=("--stop-desktops-on-exit",))
            relay_id = RelayId(seed.relay["relay_id"])
            owner = app.state.parts.links
            await wait_until(lambda: owner.is_connected(relay_id), 30, "the relay")
            await wait_until(lambda: client.hget(OWNERS, relay_id), 30, "the relay's owner")
            signer = ClusterSigner(secret)
            other = ClusterRouter(
                RelayHub(cast(Any, None)),
                Ownership(client, "bench-b", "http://127.0.0.1:9", 5.0),
                Peers(signer, "bench-b", max_text=1 << 24, max_frame=1 << 20),
                heartbeat_s=1.0,
                on_orphaned=_ignore,
                signer=signer,
            )
            await other.beat()
            other.start()  # B heartbeats, or A would reap it as dead meanwhile
            try:
                print("1. a relay request (ping)")
                _report(
                    "request (ping)",
                    *await _interleaved(
                        count,
                        lambda: owner.request(relay_id, "ping"),
                        lambda: other.request(relay_id, "ping"),
                    ),
                )
                print("2. a guarded click on the owner's screenshot (1280x800)")
                caller = Caller("alice", seed.conversation_id, relay_id)
                await _clicks(app, other, caller, relay_id, count // 5)
            finally:
                await other.stop()
        return 0
    finally:
        tracker.cleanup()
        await client.aclose()
        shutil.rmtree(root, ignore_errors=True)


async def _through_the_api(count: int, pg: PostgresCluster, rd: RedisServer) -> None:
    root = Path(tempfile.mkdtemp(prefix="relaydesk-bench-replicas-api-"))
    tracker = ProcessTracker(root / "processes")
    client = redis.Redis.from_url(rd.url)
    env = {
        "RELAYDESK_REDIS_URL": rd.url,
        "RELAYDESK_CLUSTER_SECRET": secrets.token_urlsafe(24),
        "RELAYDESK_LOG_LEVEL": "warning",
    }
    try:
        seed = await _seed(root / "data", pg.create_database("bench_replicas_api"))
        a, b = await asyncio.gather(*(start_server(tracker.start, seed, env=env) for _ in range(2)))
        start_relay(
            tracker.start,
            seed,
            a.url,
            extra_args=("--stop-desktops-on-exit",),
            env={"RELAYDESK_DESKTOP_APPS": ",", "RELAYDESK_LOG_LEVEL": "warning"},
        )
        relay_id = RelayId(seed.relay["relay_id"])
        await wait_until(lambda: client.hget(OWNERS, relay_id), 30, "the relay's owner")
        row = await seed_action(b.url, seed, "desktop_start", slot="main", geometry="1280x800")
        recorder = await asyncio.to_thread(XRecorder, row["desktop"]["display"], 10.0)
        try:
            await _api_calls(seed, a.url, b.url, count)
            print("4. a viewer through the owner and through the other replica")
            path = urlsplit(row["viewer_url"]).path + "websockify"
            quick = count < 1000
            await _viewer_rounds(a, b, path, 1 if quick else 6, 1.0 if quick else 3.0)
        finally:
            await asyncio.to_thread(recorder.stop)
            session = row["desktop"]["desktop_session_id"]
            await seed_action(
                a.url,
                seed,
                "desktop_stop_confirm",
                relay="relay-1",
                slot="main",
                desktop_session_id=session,
            )
    finally:
        tracker.cleanup()
        await client.aclose()
        shutil.rmtree(root, ignore_errors=True)


async def _api_calls(seed: Seed, owner_url: str, other_url: str, count: int) -> None:
    headers = {"Authorization": f"Bearer {seed.api_token}"}
    owner, other = HttpClient(owner_url, headers), HttpClient(other_url, headers)

    async def screen(http: HttpClient, **body: Any) -> dict[str, Any]:
        status, result = await http.post_json(
            "/api/v1/actions/screen", {"conversation_id": seed.conversation_id, **body}
        )
        if status != 200:
            raise RuntimeError(f"screen {body['action']} answered {status}: {result}")
        return cast(dict[str, Any], result)

    try:
        _report(
            "API request (mouse_position)",
            *await _interleaved(
                count,
                lambda: screen(owner, action="mouse_position"),
                lambda: screen(other, action="mouse_position"),
            ),
        )
        shot = await screen(owner, action="screenshot")
        click = {
            "action": "click",
            "x": 640,
            "y": 400,
            "expected_screen_revision": shot["screen_revision"],
        }
        _report(
            "API guarded click",
            *await _interleaved(
                count // 5, lambda: screen(owner, **click), lambda: screen(other, **click)
            ),
        )
    finally:
        await owner.close()
        await other.close()


async def _viewer_rounds(
    owner: ServerProcess, other: ServerProcess, path: str, rounds: int, seconds: float
) -> None:
    """Alternating rounds of ``seconds`` of a viewer on ``owner`` and on ``other``: CPU per GB
    and MB/s."""
    processes = {
        "owner": psutil.Process(owner.process.pid),
        "other": psutil.Process(other.process.pid),
    }
    carried: dict[str, list[tuple[float, float, float]]] = {"owner": [], "other": []}
    for _ in range(rounds):
        for name, server in (("owner", owner), ("other", other)):
            client = await RFBClient.open_websocket("ws" + server.url[4:] + path)
            try:
                await _pull(client, 0.5)  # warm-up: the credit windows have grown
                before = _cpu(processes[name])
                gb, took = await _pull(client, seconds)
                carried[name].append((gb, took, _cpu(processes[name]) - before))
            finally:
                await client.close()
    _viewer_report(carried)


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


async def _pull(client: RFBClient, seconds: float) -> tuple[float, float]:
    """GB of full updates received in ``seconds`` (and the seconds it took)."""
    received, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        await client.request_update(incremental=False)
        received += sum(len(rect.pixels) for rect in await client.read_update())
    return received / 1e9, time.perf_counter() - start


def _viewer_report(carried: dict[str, list[tuple[float, float, float]]]) -> None:
    per_gb = {name: [cpu / gb for gb, _, cpu in rounds] for name, rounds in carried.items()}
    speed = {name: [gb * 1000 / s for gb, s, _ in rounds] for name, rounds in carried.items()}
    for name, label in (("owner", "viewer on the owner"), ("other", "viewer on the other")):
        print(
            f"{label}: {percentile(speed[name], 0.5):.0f} MB/s, the replica it is on "
            f"{percentile(per_gb[name], 0.5):.2f} CPU s/GB (rounds: "
            + ", ".join(f"{v:.2f}" for v in per_gb[name])
            + ")"
        )
    cpu = percentile(per_gb["other"], 0.5) / percentile(per_gb["owner"], 0.5)
    rate = percentile(speed["other"], 0.5) / percentile(speed["owner"], 0.5)
    print(f"forwarding replica's CPU per GB / the owner's: {cpu:.2f}; throughput ratio {rate:.2f}")
    print(f"target CPU per GB <= 1.1x: {'met' if cpu <= 1.1 else 'NOT met'}")


async def _ignore(relay_id: RelayId) -> None:
    return None


def main() -> int:
    args = parser(__doc__ or "").parse_args()
    pg, rd = start_cluster(), start_redis()
    try:
        count = 50 if args.quick else 1000
        status = asyncio.run(run(count, pg, rd))
        print("3. through the HTTP API of the owner and of another replica process")
        asyncio.run(_through_the_api(count, pg, rd))
        return status
    finally:
        rd.stop()
        pg.stop()
        shutil.rmtree(pg.root, ignore_errors=True)
        shutil.rmtree(rd.root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
