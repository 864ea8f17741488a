"""``GET /metrics``: this replica's figures in the Prometheus text format.

Who may scrape (checked before anything is read): only a request carrying
``Authorization: Bearer <RELAYDESK_METRICS_TOKEN>``, from any address (compared in constant
time, as SHA-256 digests, so not even the token's length shows); anyone else gets 401. Without
a token configured the metrics are off (403 saying how to turn them on): loopback is no proof
of who is asking on a host other people or processes share.

The answer is the process's instruments (``server.instruments``) and what the parts
count themselves, read now: relays, desktops by state (from the database, the same on every
replica), viewers and the bytes relayed to and from them, event-stream subscribers, requests
forwarded to other replicas, the screen revisions kept. docs/operations.md lists them.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from server.cluster.channel import FORWARD_KINDS
from server.db.store import Store
from server.errors import NO_STORE, error_body, status_of
from server.events.bus import EventBus
from server.instruments import REGISTRY
from server.json_response import JSONResponse
from server.relays.hub import RelayHub
from server.relays.pools import pool_reports
from server.screen.revisions import RevisionStore
from server.viewer.audio import AudioService
from server.viewer.service import ViewerService
from wire import ops
from wire.errors import ErrorCode, OpError
from wire.ids import RelayId
from wire.ops import DESKTOP_STATES, POOL_CAPABILITY

if TYPE_CHECKING:
    from server.cluster.router import ClusterRouter

log = logging.getLogger(__name__)

# A scrape must answer even when the database does not: its figures are left out then.
DATABASE_TIMEOUT_S: Final = 2.0
_BEARER: Final = "bearer "


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def refusal(request: Request, token: str) -> OpError | None:
    """Why this client may not read the metrics; ``None`` when it may."""
    if not token:
        return OpError(
            ErrorCode.FORBIDDEN,
            "metrics are off: set RELAYDESK_METRICS_TOKEN on the server and send "
            "Authorization: Bearer <token>",
        )
    given = request.headers.get("authorization", "")
    presented = given[len(_BEARER) :] if given.lower().startswith(_BEARER) else ""
    if presented and hmac.compare_digest(_digest(presented), _digest(token)):
        return None
    return OpError(
        ErrorCode.UNAUTHORIZED,
        "metrics need Authorization: Bearer <RELAYDESK_METRICS_TOKEN> (missing or wrong)",
    )


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _by(
    family: type[GaugeMetricFamily | CounterMetricFamily],
    name: str,
    documentation: str,
    label: str,
    values: Iterable[tuple[str, float]],
) -> Metric:
    metric = family(name, documentation, labels=[label])
    for key, value in values:
        metric.add_metric([key], value)
    return metric


@dataclass(frozen=True)
class MetricSources:
    """The parts whose figures ``/metrics`` reads, and the token that may read them."""

    token: str
    store: Store
    links: RelayHub
    cluster: ClusterRouter | None
    viewer: ViewerService
    audio: AudioService
    bus: EventBus
    revisions: RevisionStore


class LiveFigures(Collector):
    """What the parts of one server count, as metric families (read when scraped)."""

    def __init__(
        self,
        sources: MetricSources,
        desktops: Mapping[str, int] | None,
        pools: Mapping[RelayId, ops.PoolReport] | None = None,
    ) -> None:
        self._sources = sources
        self._desktops = desktops
        self._pools = pools or {}

    def collect(self) -> Iterable[Metric]:
        yield from _relays(self._sources)
        if self._desktops is not None:
            yield _desktops(self._desktops)
        yield from _pools(self._pools)
        yield from _viewers(self._sources)
        yield from _revisions(self._sources)


def _relays(sources: MetricSources) -> Iterable[Metric]:
    cluster = sources.cluster
    connected = sources.links.connected_count
    yield _gauge("relaydesk_relays_connected", "Relays connected to this replica", connected)
    yield _gauge(
        "relaydesk_relays_owned",
        "Relays held by any live replica, as this replica sees them",
        cluster.owned_count if cluster else connected,
    )
    forwarded = cluster.forwarded if cluster else dict.fromkeys(FORWARD_KINDS, 0)
    yield _by(
        CounterMetricFamily,
        "relaydesk_forwarded_requests",
        "Calls sent to another replica: relay requests and channels to the relay's owner, "
        "screen calls to the replica that issued their revision",
        "kind",
        forwarded.items(),
    )


def _desktops(counts: Mapping[str, int]) -> Metric:
    return _by(
        GaugeMetricFamily,
        "relaydesk_desktops",
        "Desktops in the inventory by state (stopped and failed: the history kept)",
        "state",
        [(state, counts.get(state, 0)) for state in DESKTOP_STATES],
    )


def _pools(reports: Mapping[RelayId, ops.PoolReport]) -> Iterable[Metric]:
    """The warm pools of the relays connected here (docs/desktops.md, "Warm pool")."""
    size = GaugeMetricFamily(
        "relaydesk_pool_size",
        "Ready desktops a relay keeps per profile",
        labels=["relay", "profile"],
    )
    held = GaugeMetricFamily(
        "relaydesk_pool_desktops",
        "Pooled desktops of a relay per profile: ready, or starting",
        labels=["relay", "profile", "state"],
    )
    takes = CounterMetricFamily(
        "relaydesk_pool_starts",
        "Starts matching a relay's pool since it started: hit (a pooled desktop served it), "
        "miss (the pool was empty: a cold start)",
        labels=["relay", "outcome"],
    )
    for relay_id, report in sorted(reports.items()):
        for entry in report["profiles"]:
            size.add_metric([relay_id, entry["profile"]], entry["size"])
            for state in ("ready", "starting"):
                held.add_metric([relay_id, entry["profile"], state], entry[state])
        takes.add_metric([relay_id, "hit"], report["hits"])
        takes.add_metric([relay_id, "miss"], report["misses"])
    yield from (size, held, takes)


def _viewers(sources: MetricSources) -> Iterable[Metric]:
    viewers = [("vnc", sources.viewer.registry.count()), ("audio", sources.audio.count())]
    yield _by(
        GaugeMetricFamily,
        "relaydesk_viewers",
        "Viewer streams open on this replica",
        "kind",
        viewers,
    )
    to_viewer, from_viewer = sources.viewer.registry.bytes_relayed()
    yield _by(
        CounterMetricFamily,
        "relaydesk_viewer_bytes",
        "VNC bytes relayed between this replica's viewers and their desktops",
        "direction",
        [("to_viewer", to_viewer), ("from_viewer", from_viewer)],
    )
    yield _gauge(
        "relaydesk_sse_subscribers",
        "Event streams (conversation and desktop control) open on this replica",
        sources.bus.fanout.count(),
    )


def _revisions(sources: MetricSources) -> Iterable[Metric]:
    stats = sources.revisions.stats()
    yield _gauge(
        "relaydesk_screen_revisions", "Screen revisions whose capture is kept here", stats.entries
    )
    yield _gauge(
        "relaydesk_screen_revision_bytes", "Memory the kept captures take", stats.memory_bytes
    )
    yield _by(
        CounterMetricFamily,
        "relaydesk_screen_revisions_dropped",
        "Kept captures dropped, for the memory bound or the TTL",
        "reason",
        [("memory", stats.evicted_for_memory), ("ttl", stats.expired)],
    )


async def _desktop_counts(sources: MetricSources) -> dict[str, int] | None:
    try:
        async with asyncio.timeout(DATABASE_TIMEOUT_S):
            return await sources.store.desktop_counts()
    except (SQLAlchemyError, OSError, TimeoutError) as err:
        log.warning(
            "metrics without desktop counts: the database did not answer (%s)", type(err).__name__
        )
        return None


async def _pool_reports(sources: MetricSources) -> dict[RelayId, ops.PoolReport]:
    """The pools of the relays connected to this replica that keep one."""
    links = sources.links
    keeping = [r for r in links.connected_ids() if POOL_CAPABILITY in links.capabilities(r)]
    return await pool_reports(links, keeping) if keeping else {}


def metrics_routes(sources: MetricSources) -> list[BaseRoute]:
    async def metrics(request: Request) -> Response:
        refused = refusal(request, sources.token)
        if refused is not None:
            headers = dict(NO_STORE)
            if refused.code is ErrorCode.UNAUTHORIZED:
                headers["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return JSONResponse(error_body(refused), status_of(refused), headers=headers)
        live = CollectorRegistry(auto_describe=False)
        pools = await _pool_reports(sources)
        live.register(LiveFigures(sources, await _desktop_counts(sources), pools))
        body = generate_latest(live) + generate_latest(REGISTRY)
        return Response(body, media_type=CONTENT_TYPE_LATEST, headers=NO_STORE)

    return [Route("/metrics", metrics)]
