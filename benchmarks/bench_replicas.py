"""Replicas: what reaching another replica adds, for a relay request and a guarded click.

Replica A (the real server app, in this process) on PostgreSQL and Redis holds a real relay; a
second ``ClusterRouter`` B, holding no relay, reaches it through A's internal channel.

1. The same request (``ping``, the empty op) is timed through A's hub (owner-local) and through
   B (forwarded: signed HTTP to A, then A's hub), interleaved in one run.
2. A guarded click on a screenshot A took, through A's screen tool and through a screen tool on
   B (the whole call forwarded to A, which keeps the capture, runs the guard and asks the
   relay), interleaved in one run on a 1280x800 virtual desktop.

Target: added p50 (B - A) ≤ 1 ms on loopback, for each.
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

import redis.asyncio as redis

from benchmarks.common import parser, percentile, summary
from server.cluster.ownership import OWNERS, Ownership
from server.cluster.peers import Peers
from server.cluster.router import ClusterRouter
from server.cluster.screen import ScreenForwarding
from server.cluster.signing import ClusterSigner
from server.relays.hub import RelayHub
from server.screen.action import HubRequests
from server.screen.revisions import RevisionStore
from server.screen.tool import Caller, ScreenTool
from tests.cluster.test_replicas import _seed
from tests.support.postgres import PostgresCluster, start_cluster
from tests.support.processes import ProcessTracker
from tests.support.redis import RedisServer, start_redis
from tests.support.stack import inprocess_server, start_relay, wait_until
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
    async def write_audit(self, **row: Any) -> None:
        return None


async def _clicks(
    app: Any, other: ClusterRouter, caller: Caller, relay_id: RelayId, count: int
) -> None:
    """A guarded click on A's screenshot, through A's tool and through a tool on B."""
    services = app.state.services
    revisions = RevisionStore(services.settings.secret_key, issuer=other.replica_id)
    at_b = ScreenTool(HubRequests(other), revisions, _NoAudit(), ScreenForwarding(other))
    args = {"kind": "virtual", "slot": "main", "geometry": "1280x800"}
    row = await services.hub.request(relay_id, "desktop.start", args, 60)
    # A window of our own takes the clicks, so they change nothing on the screen.
    recorder = await asyncio.to_thread(XRecorder, row["display"], 10.0)
    try:
        await _timed_clicks(services.screen_tool, at_b, caller, count)
    finally:
        await asyncio.to_thread(recorder.stop)
    assert other.forwarded["screen"] >= count


async def _timed_clicks(at_a: ScreenTool, at_b: ScreenTool, caller: Caller, count: int) -> None:
    shot = await at_a.run(caller, {"action": "screenshot"})
    click = {"action": "click", "x": 640, "y": 400,
             "expected_screen_revision": shot["screen_revision"]}  # fmt: skip
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
            owner = app.state.services.links
            await wait_until(lambda: owner.is_connected(relay_id), 30, "the relay")
            await wait_until(lambda: client.hget(OWNERS, relay_id), 30, "the relay's owner")
            signer = ClusterSigner(secret)
            other = ClusterRouter(
                RelayHub(cast(Any, None)), Ownership(client, "bench-b", "http://127.0.0.1:9", 5.0),
                Peers(signer), heartbeat_s=1.0, on_orphaned=_ignore, signer=signer,
            )  # fmt: skip
            await other.beat()
            other.start()  # B heartbeats, or A would reap it as dead meanwhile
            try:
                print("1. a relay request (ping)")
                _report("request (ping)", *await _interleaved(
                    count, lambda: owner.request(relay_id, "ping"),
                    lambda: other.request(relay_id, "ping"),
                ))  # fmt: skip
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


async def _ignore(relay_id: RelayId) -> None:
    return None


def main() -> int:
    args = parser(__doc__ or "").parse_args()
    pg, rd = start_cluster(), start_redis()
    try:
        return asyncio.run(run(100 if args.quick else 1000, pg, rd))
    finally:
        rd.stop()
        pg.stop()
        shutil.rmtree(pg.root, ignore_errors=True)
        shutil.rmtree(rd.root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
