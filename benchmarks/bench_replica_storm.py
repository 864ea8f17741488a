"""Three replicas and a fleet of simulated relays: a connect storm after one replica dies.

Real PostgreSQL, real Redis, three real server replicas behind HAProxy (round robin, as in
docs/operations.md), and N simulated relays (``benchmarks/storm_relays.py``: real ``wire``
connections, each with its own relay token and one running desktop, dialling the balancer
and redialling with the relay's own backoff) in a few worker processes. Relays dial the
balancer, as real relays do: they know one server address, and the balancer spreads them over
the replicas and sends the killed replica's relays to the others.

Measured, each against its target:

1. the fleet coming online (200 dials in flight, as in ``bench_relay_fleet``): the time until
   every relay is welcomed, and until Redis holds an owner for every one (target: the
   rate ``bench_relay_fleet`` asks of one server, 1,000 relays per 10 s);
2. RSS of each replica, idle and holding its third of the fleet (target ≤ 300 MB each, the
   per-server target of ``bench_relay_fleet``);
3. ``desktop_list_active`` (the typed action, ``POST /api/v1/actions/desktop_list_active``) in a
   conversation that sees a few of the relays, p50/p95 from each replica (target p50 ≤ 20 ms);
   baseline, same run: the same call on the same replicas before any relay connected (the
   same rows listed), and ``GET /healthz`` next to each;
4. SIGKILL of one replica: the time until every relay it held is owned by a live replica
   again in Redis (target ≤ 30 s), until the relays are all welcomed again, until the dead
   replica's key has expired (seen dead; documented bound 5 s) and until a live replica
   has reaped it; the list during the storm and after it, and the survivors' RSS.

Checks (``check …: a/b``; the run fails unless every one is whole): relays welcomed and owned,
no live replica ever taken for dead before the kill, list calls answered, relays re-owned and
welcomed again, the dead replica reaped, and once the storm is over every relay recorded
connected in the database and every desktop listed running (in a conversation that sees the
whole fleet, made only then: while it exists every inventory change publishes all its rows).
Results and their reading: benchmarks/results/replicas.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis.asyncio as redis
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from benchmarks.common import HttpClient, parser, percentile
from benchmarks.storm_relays import FleetWorkers, RelaySpec, Stats
from server import admin
from server.cluster.ownership import OWNERS, PREFIX, REPLICAS, Ownership, parse_owner
from server.db import models
from server.db.base import utc_now
from server.db.rows import DesktopRow
from server.db.store import Store
from server.secrets import tokens
from tests.cluster.test_replicas import _seed
from tests.support.haproxy import start_haproxy
from tests.support.postgres import PostgresCluster, start_cluster
from tests.support.processes import ManagedProcess, ProcessTracker
from tests.support.redis import RedisServer, start_redis
from tests.support.stack import Seed, ServerProcess, start_server

REPLICAS_COUNT = 3
DEAD_AFTER_S = 5.0  # the defaults (docs/operations.md), set explicitly so the figures say so
CLUSTER_HEARTBEAT_S = 1.0
TARGET_REOWN_S = 30.0
TARGET_LIST_P50_MS = 20.0
TARGET_RSS_MB = 300.0
WELCOME_RATE = 100.0  # relays per second: bench_relay_fleet's 1,000 in 10 s
FIRST_DIAL_CONCURRENCY = 200
POLL_S = 0.1
# A list heals the unknown rows of connected relays first, one relay at a time.
FLEET_LIST_TIMEOUT_S = 60.0
LIST = "/api/v1/actions/desktop_list_active"
# --quick proves that every phase runs and every check is whole (tests/benchmarks/
# test_replica_storm.py); the full run measures. Twice the listing conversation's relays.
QUICK_RELAYS = 60
QUICK_SAMPLES = 10


def _cluster_env(redis_url: str) -> dict[str, str]:
    """Production defaults for liveness and presence (the tests' fast figures would make
    5,000 relays ping every second), the documented cluster defaults, quiet logs."""
    return {
        "RELAYDESK_REDIS_URL": redis_url,
        "RELAYDESK_CLUSTER_SECRET": secrets.token_urlsafe(24),
        "RELAYDESK_CLUSTER_HEARTBEAT_S": str(CLUSTER_HEARTBEAT_S),
        "RELAYDESK_CLUSTER_DEAD_AFTER_S": str(DEAD_AFTER_S),
        "RELAYDESK_HEARTBEAT_S": "10",
        "RELAYDESK_LIVENESS_TIMEOUT_S": "30",
        "RELAYDESK_PRESENCE_INTERVAL_S": "10",
        "RELAYDESK_LOG_LEVEL": "warning",
    }


def raise_fd_limit() -> int:
    """Every relay is a socket in a worker, two in HAProxy and one in a replica."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


# -- the fleet in the database --------------------------------------------------------------


async def register_fleet(seed: Seed, count: int, watched: int) -> tuple[list[RelaySpec], list[str]]:
    """``count`` relays with their tokens in one transaction (``Store.add_relay`` is one
    transaction per relay), the first ``watched`` shared with the seed's conversation, with
    their desktops' rows recorded running (so the baseline lists the same rows)."""
    specs = [
        RelaySpec(
            token=tokens.new_secret(tokens.RELAY_TOKEN_PREFIX),
            desktop_session_id=f"ds_storm_{n:05d}",
        )
        for n in range(count)
    ]
    ids = [tokens.new_id() for _ in specs]
    now = utc_now()
    rows = [
        {
            "id": relay_id,
            "name": f"storm-{n:05d}",
            "owner_id": seed.user["user_id"],
            "token_hash": tokens.hash_secret(spec["token"]),
            "connected": False,
            "capabilities": [],
            "created_at": now,
            "co_located": False,
        }
        for n, (relay_id, spec) in enumerate(zip(ids, specs, strict=True))
    ]
    engine = create_async_engine(seed.database_url)
    try:
        async with engine.begin() as connection:
            await connection.execute(insert(models.Relay), rows)
            await _share(connection, ids[:watched], seed.conversation_id)
    finally:
        await engine.dispose()
    await _record_running(seed, ids[:watched], specs[:watched])
    return specs, ids


async def _share(connection: AsyncConnection, relay_ids: list[str], conversation: str) -> None:
    shares = [{"relay_id": i, "conversation_id": conversation} for i in relay_ids]
    await connection.execute(insert(models.RelayShare), shares)


async def fleet_conversation(seed: Seed, relay_ids: list[str]) -> str:
    """A conversation that sees every relay (made once the storm is over: while it exists,
    every inventory change publishes a snapshot of all its rows)."""
    store = await Store.open(seed.database_url)
    try:
        created = await admin.create_conversation(store, "Fleet", ["alice:owner"])
    finally:
        await store.close()
    engine = create_async_engine(seed.database_url)
    try:
        async with engine.begin() as connection:
            await _share(connection, relay_ids, created["conversation_id"])
    finally:
        await engine.dispose()
    return str(created["conversation_id"])


async def _record_running(seed: Seed, ids: list[str], specs: list[RelaySpec]) -> None:
    now = utc_now().isoformat()
    store = await Store.open(seed.database_url)
    try:
        await store.upsert_desktops(
            DesktopRow(
                relay_id,
                spec["desktop_session_id"],
                "virtual",
                "main",
                "running",
                now,
                "storm",
                now,
                geometry="1280x800",
            )
            for relay_id, spec in zip(ids, specs, strict=True)
        )
    finally:
        await store.close()


async def relays_recorded_connected(url: str) -> int:
    """How many of the fleet the database records connected."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as connection:
            connected = await connection.scalar(
                select(func.count())
                .select_from(models.Relay)
                .where(models.Relay.name.like("storm-%"), models.Relay.connected.is_(True))
            )
    finally:
        await engine.dispose()
    return int(connected or 0)


# -- figures ----------------------------------------------------------------------------------


@dataclass
class Report:
    """What the run prints: figures with targets, and checks that must be whole."""

    lines: list[str] = field(default_factory=list)
    failed_checks: list[str] = field(default_factory=list)

    def info(self, text: str) -> None:
        self.lines.append(text)
        print(text, flush=True)

    def check(self, name: str, got: int, wanted: int) -> None:
        self.info(f"check {name}: {got}/{wanted}")
        if got != wanted:
            self.failed_checks.append(name)

    def verdict(self, name: str, figure: str, target: str, met: bool) -> None:
        self.info(f"verdict {name}: {figure} (target {target}): {'PASS' if met else 'FAIL'}")


@dataclass
class Latency:
    ms: list[float] = field(default_factory=list)
    answered: int = 0  # 200 with the conversation's rows

    @property
    def p50(self) -> float:
        return percentile(self.ms, 0.5) if self.ms else float("nan")

    @property
    def p95(self) -> float:
        return percentile(self.ms, 0.95) if self.ms else float("nan")

    def text(self) -> str:
        return f"p50 {self.p50:.2f} ms p95 {self.p95:.2f} ms (n={len(self.ms)})"


def rss_mb(replica: ServerProcess) -> float:
    return float(psutil.Process(replica.process.pid).memory_info().rss) / 2**20


# -- the stack ----------------------------------------------------------------------------------


@dataclass
class Storm:
    seed: Seed
    replicas: list[ServerProcess]
    redis: redis.Redis
    specs: list[RelaySpec]
    relay_ids: list[str]
    watched: int
    samples: int
    report: Report = field(default_factory=Report)
    list_p50: dict[str, float] = field(default_factory=dict)  # "phase rN" → ms

    @property
    def relays(self) -> int:
        return len(self.specs)

    @property
    def ownership(self) -> Ownership:
        """The cluster's own reader of Redis, as an observer that never heartbeats."""
        return Ownership(self.redis, "bench-observer", "", DEAD_AFTER_S)

    def name(self, replica: ServerProcess) -> str:
        return f"r{self.replicas.index(replica) + 1}"

    async def replica_ids(self) -> dict[int, str]:
        """Live replicas' ids by port."""
        urls = await self.ownership.replica_urls()
        return {int(url.rsplit(":", 1)[1]): replica for replica, url in urls.items()}

    async def held(self) -> dict[str, list[str]]:
        """Relay ids by the replica that owns each, per Redis."""
        held: dict[str, list[str]] = {}
        for relay_id, owner in (await self.ownership.owners()).items():
            held.setdefault(owner.replica, []).append(relay_id)
        return held

    async def list_once(self, client: HttpClient, latency: Latency) -> None:
        start = time.perf_counter()
        status, answer = await client.post_json(
            LIST, {"conversation_id": self.seed.conversation_id}
        )
        latency.ms.append((time.perf_counter() - start) * 1000)
        latency.answered += status == 200 and len(answer["desktops"]) == self.watched

    async def fleet_list(self, replica: ServerProcess, phase: str, fleet: str) -> int:
        """One list in ``fleet``, the conversation that sees every relay: its time, and how
        many desktops it lists running."""
        client = self.user_client(replica)
        start = time.perf_counter()
        try:
            async with asyncio.timeout(FLEET_LIST_TIMEOUT_S):
                status, answer = await client.post_json(LIST, {"conversation_id": fleet})
        except TimeoutError:
            status, answer = 504, {}
        finally:
            await client.close()
        elapsed_ms = (time.perf_counter() - start) * 1000
        rows = answer.get("desktops", []) if status == 200 else []
        running = int(sum(row["state"] == "running" for row in rows))
        listed = f"{len(rows)} rows, {running} running"
        self.report.info(
            f"{phase} {self.name(replica)}: desktop_list_active over the whole "
            f"fleet ({listed}) {elapsed_ms:.0f} ms"
        )
        return running

    def user_client(self, replica: ServerProcess) -> HttpClient:
        return HttpClient(replica.url, {"Authorization": f"Bearer {self.seed.api_token}"})

    async def list_latency(self, replica: ServerProcess) -> Latency:
        client, latency = self.user_client(replica), Latency()
        try:
            for _ in range(self.samples):
                await self.list_once(client, latency)
        finally:
            await client.close()
        return latency

    async def healthz_latency(self, replica: ServerProcess) -> Latency:
        client, latency = HttpClient(replica.url, {}), Latency()
        try:
            for _ in range(self.samples):
                start = time.perf_counter()
                status, _ = await client.get_json("/healthz")
                latency.ms.append((time.perf_counter() - start) * 1000)
                latency.answered += status == 200
        finally:
            await client.close()
        return latency

    async def lists(self, phase: str, replicas: Sequence[ServerProcess]) -> None:
        """``desktop_list_active`` and ``/healthz`` timed on each of ``replicas``."""
        for replica in replicas:
            listing = await self.list_latency(replica)
            health = await self.healthz_latency(replica)
            name = self.name(replica)
            self.report.info(
                f"{phase} {name}: desktop_list_active {listing.text()}; "
                f"GET /healthz p50 {health.p50:.2f} ms"
            )
            self.report.check(f"{phase} {name} list answered", listing.answered, self.samples)
            self.list_p50[f"{phase} {name}"] = listing.p50

    def rss(self, phase: str, replicas: Sequence[ServerProcess]) -> dict[str, float]:
        figures = {self.name(r): rss_mb(r) for r in replicas}
        self.report.info(
            f"RSS {phase}: " + ", ".join(f"{n} {mb:.0f} MB" for n, mb in figures.items())
        )
        return figures


# -- phases -------------------------------------------------------------------------------------


async def _until_all_welcomed(storm: Storm, workers: FleetWorkers, deadline: float) -> list[Stats]:
    while True:
        stats = await workers.stats()
        if sum(s["connected"] for s in stats) == storm.relays or time.monotonic() > deadline:
            return stats
        await asyncio.sleep(POLL_S)


async def _until_all_owned(storm: Storm, deadline: float) -> float | None:
    while time.monotonic() < deadline:
        if await storm.redis.hlen(OWNERS) >= storm.relays:
            return time.monotonic()
        await asyncio.sleep(POLL_S)
    return None


@dataclass
class Usage:
    """CPU seconds of each part of the stack, to tell who the bottleneck is."""

    parts: dict[str, list[psutil.Process]]
    postgres: psutil.Process

    def snapshot(self) -> dict[str, dict[int, float]]:
        parts = {**self.parts, "postgres": [self.postgres, *self.postgres.children(True)]}
        taken: dict[str, dict[int, float]] = {}
        for name, processes in parts.items():
            taken[name] = {}
            for process in processes:
                with contextlib.suppress(psutil.NoSuchProcess):
                    times = process.cpu_times()
                    taken[name][process.pid] = times.user + times.system
        return taken

    def since(self, before: dict[str, dict[int, float]], wall_s: float) -> str:
        after = self.snapshot()
        used = {
            name: sum(cpu - before[name].get(pid, 0.0) for pid, cpu in pids.items())
            for name, pids in after.items()
        }
        parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in used.items())
        return f"CPU used over {wall_s:.1f} s on {psutil.cpu_count()} cores: {parts}"


async def bring_online(storm: Storm, workers: FleetWorkers, usage: Usage) -> None:
    """Phase 1: every relay dials (200 in flight); welcomed, owned, and at what cost."""
    report, count = storm.report, storm.relays
    before = usage.snapshot()
    go_at = await workers.go(FIRST_DIAL_CONCURRENCY)
    deadline = go_at + max(60.0, 4 * count / WELCOME_RATE)
    stats = await _until_all_welcomed(storm, workers, deadline)
    owned_at = await _until_all_owned(storm, deadline)
    report.info(usage.since(before, time.monotonic() - go_at))
    welcomed = sum(s["connected"] for s in stats)
    welcome_s = max(s["last_welcome_at"] for s in stats) - go_at
    report.check("relays welcomed", welcomed, count)
    report.check("relays owned", int(await storm.redis.hlen(OWNERS)), count)
    target_s = count / WELCOME_RATE
    report.verdict(
        "welcome",
        f"{welcomed} relays welcomed in {welcome_s:.1f} s",
        f"<= {target_s:.0f} s",
        welcome_s <= target_s,
    )
    owned = f"{owned_at - go_at:.1f} s" if owned_at else "not within the time limit"
    report.info(f"every relay owned in Redis: {owned} after the first dial")
    report.info(f"dials that failed and were retried: {sum(s['dial_failures'] for s in stats)}")
    await _spread(storm)


async def _spread(storm: Storm) -> None:
    ids, held = await storm.replica_ids(), await storm.held()
    counts = {storm.name(r): len(held.get(ids.get(r.port, ""), [])) for r in storm.replicas}
    storm.report.info("relays held: " + ", ".join(f"{n} {c}" for n, c in counts.items()))


@contextlib.asynccontextmanager
async def _fewest_alive(
    storm: Storm, replicas: Sequence[ServerProcess]
) -> AsyncIterator[list[int]]:
    """The fewest of ``replicas`` alive in Redis (their key not expired) at any moment inside
    the block: a live replica that misses its heartbeats is taken for dead, and reaped.

    The watch ends when told, not cancelled: a cancellation that lands in a Redis call can be
    lost (Python 3.11's ``wait_for`` race), and the run then waited for a watch that never
    ended until its time limit."""
    fewest, done = [len(replicas)], asyncio.Event()

    async def watch() -> None:
        while not done.is_set():
            alive = await storm.replica_ids()
            fewest[0] = min(fewest[0], sum(r.port in alive for r in replicas))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), POLL_S)

    task = asyncio.create_task(watch())
    try:
        yield fewest
    finally:
        done.set()
        await task


@dataclass
class Recovery:
    orphans: int
    reowned: int = 0
    reown_s: float | None = None
    dead_s: float | None = None
    reaped_s: float | None = None


async def _watch_recovery(
    storm: Storm, victim: str, live: set[str], orphans: list[str], killed_at: float
) -> Recovery:
    """Poll Redis until the victim's relays are owned by live replicas and it left the
    replica set (or two minutes passed)."""
    recovery, pending = Recovery(len(orphans)), set(orphans)
    while time.monotonic() < killed_at + 120:
        if pending:
            records = await storm.redis.hmget(OWNERS, sorted(pending))
            for relay_id, raw in zip(sorted(pending), records, strict=True):
                owner = parse_owner(relay_id, raw) if raw is not None else None
                if owner is not None and owner.replica in live:
                    pending.discard(relay_id)
            if not pending:
                recovery.reown_s = time.monotonic() - killed_at
        if recovery.reaped_s is None and not await storm.redis.sismember(REPLICAS, victim):
            recovery.reaped_s = time.monotonic() - killed_at
        if not pending and recovery.reaped_s is not None:
            break
        await asyncio.sleep(POLL_S)
    recovery.reowned = len(orphans) - len(pending)
    return recovery


async def _sample_until(storm: Storm, replica: ServerProcess, stop: asyncio.Event) -> Latency:
    """The list on ``replica`` ten times a second until ``stop``."""
    client, latency = storm.user_client(replica), Latency()
    try:
        while not stop.is_set():
            await storm.list_once(client, latency)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_S)
    finally:
        await client.close()
    return latency


def _seconds(value: float | None) -> str:
    return "not within 120 s" if value is None else f"{value:.2f} s"


async def kill_one(storm: Storm, workers: FleetWorkers) -> None:
    """Phase 2: SIGKILL one replica; its relays redial through the balancer."""
    victim, survivors = storm.replicas[0], storm.replicas[1:]
    ids = await storm.replica_ids()
    storm.report.check("replicas alive at the kill", len(ids), REPLICAS_COUNT)
    if victim.port not in ids:
        return
    victim_id, live = ids[victim.port], {ids[r.port] for r in survivors if r.port in ids}
    orphans = (await storm.held()).get(victim_id, [])
    stop = asyncio.Event()
    samplers = [asyncio.create_task(_sample_until(storm, r, stop)) for r in survivors]
    # Every replica reads the victim dead once its key expires: its TTL now says when.
    ttl_ms = int(await storm.redis.pttl(PREFIX + "replica:" + victim_id))
    killed_at = time.monotonic()
    victim.process.kill()
    try:
        recovery = await _watch_recovery(storm, victim_id, live, orphans, killed_at)
        recovery.dead_s = ttl_ms / 1000 if ttl_ms >= 0 else None
        stats = await _until_all_welcomed(storm, workers, killed_at + 120)
    finally:
        stop.set()
        during = await asyncio.gather(*samplers)
    _report_recovery(storm, recovery, stats, killed_at)
    for replica, latency in zip(survivors, during, strict=True):
        storm.report.info(
            f"during the storm {storm.name(replica)}: desktop_list_active {latency.text()}"
        )
        storm.report.check(
            f"during the storm {storm.name(replica)} list answered",
            latency.answered,
            len(latency.ms),
        )


def _report_recovery(
    storm: Storm, recovery: Recovery, stats: list[Stats], killed_at: float
) -> None:
    report = storm.report
    report.info(f"killed r1 (SIGKILL) holding {recovery.orphans} relays")
    report.check("relays of the killed replica re-owned", recovery.reowned, recovery.orphans)
    reown = recovery.reown_s
    report.verdict(
        "re-own",
        f"every relay of the killed replica owned by a live replica {_seconds(reown)} after "
        "the kill",
        f"<= {TARGET_REOWN_S:.0f} s",
        reown is not None and reown <= TARGET_REOWN_S,
    )
    report.check("relays welcomed again", sum(s["connected"] for s in stats), storm.relays)
    welcome_s = max(s["last_welcome_at"] for s in stats) - killed_at
    report.info(f"every relay welcomed again {welcome_s:.2f} s after the kill")
    dead = recovery.dead_s
    report.verdict(
        "seen dead",
        f"the killed replica's key expired {_seconds(dead)} after the kill (its TTL then)",
        f"<= {DEAD_AFTER_S:.0f} s (RELAYDESK_CLUSTER_DEAD_AFTER_S)",
        dead is not None and dead <= DEAD_AFTER_S,
    )
    reaped, bound = recovery.reaped_s, DEAD_AFTER_S + CLUSTER_HEARTBEAT_S
    report.verdict(
        "reaped",
        f"a live replica reaped it {_seconds(reaped)} after the kill",
        f"<= {bound:.0f} s (dead after + one heartbeat)",
        reaped is not None and reaped <= bound + POLL_S,
    )
    report.check("dead replica reaped", int(reaped is not None), 1)


async def settle(storm: Storm, within_s: float = 30.0) -> None:
    """Phase 3 (the storm is over): presence in the database, and the fleet's desktops as a
    user listing them sees them (a row a reaper left unknown is healed when listed)."""
    started = time.monotonic()
    while (connected := await relays_recorded_connected(storm.seed.database_url)) < storm.relays:
        if time.monotonic() - started > within_s:
            break
        await asyncio.sleep(0.5)
    report = storm.report
    report.info(
        f"every relay recorded connected {time.monotonic() - started:.1f} s after the reaping"
        if connected == storm.relays
        else f"relays recorded connected: {connected} after {within_s:.0f} s"
    )
    report.check("relays recorded connected", connected, storm.relays)
    fleet = await fleet_conversation(storm.seed, storm.relay_ids)
    running = await storm.fleet_list(storm.replicas[1], "after the storm", fleet)
    report.check("fleet desktops listed running", running, storm.relays)


def _list_verdicts(storm: Storm) -> None:
    baseline = {k.split()[-1]: v for k, v in storm.list_p50.items() if k.startswith("idle")}
    for phase, p50 in storm.list_p50.items():
        if phase.startswith("idle"):
            continue
        ratio = p50 / baseline[phase.split()[-1]]
        figure = f"desktop_list_active p50 {p50:.2f} ms, {ratio:.2f}x the same replica idle"
        target = f"p50 <= {TARGET_LIST_P50_MS:.0f} ms"
        storm.report.verdict(f"list {phase}", figure, target, p50 <= TARGET_LIST_P50_MS)


def _rss_verdicts(storm: Storm, phase: str, figures: dict[str, float], idle: dict[str, float]):
    for name, mb in figures.items():
        figure = f"{mb:.0f} MB ({mb - idle[name]:+.0f} MB over idle)"
        target = f"<= {TARGET_RSS_MB:.0f} MB"
        storm.report.verdict(f"rss {phase} {name}", figure, target, mb <= TARGET_RSS_MB)


# -- the run ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    relays: int
    workers: int
    watched: int
    samples: int


async def _start_replicas(
    tracker: ProcessTracker, seed: Seed, env: dict[str, str]
) -> list[ServerProcess]:
    starting = (start_server(tracker.start, seed, env=env) for _ in range(REPLICAS_COUNT))
    return list(await asyncio.gather(*starting))


def _usage(
    replicas: list[ServerProcess],
    workers: FleetWorkers,
    balancer: ManagedProcess,
    redis_server: RedisServer,
    database: PostgresCluster,
) -> Usage:
    assert database.process is not None and redis_server.process is not None
    parts = {
        "replicas": [psutil.Process(r.process.pid) for r in replicas],
        "relay workers": [psutil.Process(pid) for pid in workers.pids()],
        "haproxy": [psutil.Process(balancer.pid)],
        "redis": [psutil.Process(redis_server.process.pid)],
    }
    return Usage(parts, psutil.Process(database.process.pid))


async def run(
    options: Options,
    root: Path,
    database: PostgresCluster,
    redis_server: RedisServer,
    tracker: ProcessTracker,
) -> Report:
    seed = await _seed(root / "data", database.create_database("storm"))
    started = time.monotonic()
    specs, relay_ids = await register_fleet(seed, options.relays, options.watched)
    registered_s = time.monotonic() - started
    replicas = await _start_replicas(tracker, seed, _cluster_env(redis_server.url))
    ports = [r.port for r in replicas]
    balancer, port = start_haproxy(tracker.start, root, ports, maxconn=options.relays + 1000)
    client = redis.Redis.from_url(redis_server.url)
    storm = Storm(
        seed,
        replicas,
        client,
        specs,
        relay_ids,
        min(options.watched, options.relays),
        options.samples,
    )
    storm.report.info(
        f"{options.relays} simulated relays in {options.workers} worker processes, "
        f"{REPLICAS_COUNT} replicas behind HAProxy, PostgreSQL, Redis; "
        f"{psutil.cpu_count()} cores; relays registered in {registered_s:.1f} s"
    )
    try:
        idle = storm.rss("idle", replicas)
        await storm.lists("idle", replicas)
        workers = FleetWorkers(
            f"ws://127.0.0.1:{port}/relay/v1/connect", specs, options.workers, root
        )
        await workers.start()
        try:
            usage = _usage(replicas, workers, balancer, redis_server, database)
            async with _fewest_alive(storm, replicas) as fewest:
                await bring_online(storm, workers, usage)
                holding = storm.rss(f"holding {options.relays} relays", replicas)
                await storm.lists("with relays", replicas)
            storm.report.check("replicas alive throughout", fewest[0], REPLICAS_COUNT)
            async with _fewest_alive(storm, replicas[1:]) as fewest:
                await kill_one(storm, workers)
                await settle(storm)
            storm.report.check(
                "survivors alive throughout the storm", fewest[0], REPLICAS_COUNT - 1
            )
            await storm.lists("after the storm", replicas[1:])
            after = storm.rss("after the storm", replicas[1:])
        finally:
            await workers.stop()
        _list_verdicts(storm)
        _rss_verdicts(storm, "with relays", holding, idle)
        _rss_verdicts(storm, "after the storm", after, idle)
    finally:
        await client.aclose()
    return storm.report


async def main_async(
    options: Options, root: Path, database: PostgresCluster, redis_server: RedisServer
) -> int:
    tracker = ProcessTracker(root / "processes")
    try:
        report = await run(options, root, database, redis_server, tracker)
    except BaseException:
        for process in tracker.processes:
            print(f"----- {process.name}: {process.log_tail(3000)}", file=sys.stderr)
        raise
    finally:
        tracker.cleanup()
    if report.failed_checks:
        print("failed checks: " + ", ".join(report.failed_checks), flush=True)
        return 1
    return 0


def storm(options: Options) -> int:
    """Start PostgreSQL and Redis (outside the event loop: the cluster migrates with its own),
    run, and take everything down again."""
    limit = raise_fd_limit()
    if limit < 3 * options.relays + 1000:
        raise SystemExit(
            f"{options.relays} relays need about {3 * options.relays + 1000} file "
            f"descriptors; the hard limit is {limit}"
        )
    root = Path(tempfile.mkdtemp(prefix="relaydesk-storm-"))
    database = start_cluster()
    try:
        redis_server = start_redis()
        try:
            return asyncio.run(main_async(options, root, database, redis_server))
        finally:
            redis_server.stop()
            shutil.rmtree(redis_server.root, ignore_errors=True)
    finally:
        database.stop()
        shutil.rmtree(database.root, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    p = parser(__doc__ or "")
    p.add_argument(
        "--relays", type=int, help=f"simulated relays (default 5000; {QUICK_RELAYS} with --quick)"
    )
    p.add_argument("--workers", type=int, default=2, help="processes running the relays")
    p.add_argument(
        "--watched",
        type=int,
        default=30,
        help="relays the listing conversation sees (each with one desktop)",
    )
    p.add_argument(
        "--samples", type=int, help=f"list calls per replica and phase (200; {QUICK_SAMPLES} quick)"
    )
    args = p.parse_args()
    relays = args.relays or (QUICK_RELAYS if args.quick else 5000)
    samples = args.samples or (QUICK_SAMPLES if args.quick else 200)
    return storm(Options(relays, args.workers, args.watched, samples))


if __name__ == "__main__":
    sys.exit(main())
