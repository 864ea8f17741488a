"""``GET /metrics``: this replica's figures in the Prometheus text format."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server.services import Services, services_of


def _registry(services: Services) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    Gauge("relaydesk_relays_connected", "Relays connected to this replica", registry=registry).set(
        services.links.connected_count
    )
    relays_known = Gauge(
        "relaydesk_relays_owned", "Relays held by any live replica, as this replica sees them",
        registry=registry,
    )  # fmt: skip
    forwarded = Gauge(
        "relaydesk_forwarded_requests", "Requests forwarded to an owner replica since start",
        registry=registry,
    )  # fmt: skip
    cluster = services.cluster
    relays_known.set(cluster.owned_count if cluster else services.links.connected_count)
    forwarded.set(cluster.forwarded if cluster else 0)
    return registry


async def metrics(request: Request) -> Response:
    registry = _registry(services_of(request))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


metrics_routes = [Route("/metrics", metrics)]
