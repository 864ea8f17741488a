"""The instruments the server's parts record into as they work, one set per process.

Figures a part already keeps (relays connected, viewers open, bytes relayed, requests
forwarded, revisions kept) are read from it when ``/metrics`` is scraped
(``server.metrics.endpoint``); only what nothing else counts lives here: how long actions take,
and the errors Redis and the database gave. Every label has a fixed, small set of values
(action names come from the registry, components and kinds from the tuples below), so the
number of series never grows with traffic. Imports nothing of the server: any part may record.
"""

from __future__ import annotations

from typing import Any, Final, Literal, get_args

from prometheus_client import CollectorRegistry, Counter, Histogram
from sqlalchemy.exc import IntegrityError

REGISTRY: Final = CollectorRegistry(auto_describe=True)

# Seconds; from a cheap status read to a desktop start or a slow relay's full timeout.
LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

ACTION_SECONDS: Final = Histogram(
    "relaydesk_action_seconds",
    "Typed actions (HTTP, MCP, chat, Cua) from admission to answer, by action name",
    ["action"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
SCREEN_SECONDS: Final = Histogram(
    "relaydesk_screen_action_seconds",
    "Calls of the screen tool on the replica they came in to, by screen action",
    ["action"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)

RedisComponent = Literal["cluster", "events", "control", "caches", "logins"]
REDIS_ERRORS: Final = Counter(
    "relaydesk_redis_errors",
    "Redis commands that failed (unreachable, timed out, refused), by the part that sent them",
    ["component"],
    registry=REGISTRY,
)

DatabaseErrorKind = Literal["disconnect", "other"]
DATABASE_ERRORS: Final = Counter(
    "relaydesk_database_errors",
    "Database statements that failed (constraint violations, which are answers, excluded)",
    ["kind"],
    registry=REGISTRY,
)

for _component in get_args(RedisComponent):
    REDIS_ERRORS.labels(_component)
for _kind in get_args(DatabaseErrorKind):
    DATABASE_ERRORS.labels(_kind)


def redis_error(component: RedisComponent) -> None:
    """Count one failed Redis command of ``component``."""
    REDIS_ERRORS.labels(component).inc()


def database_error(context: Any) -> None:
    """SQLAlchemy's ``handle_error`` hook: count the failure (it is raised as before). A
    stale pooled connection found by the pre-ping is replaced, not an error anyone sees."""
    if context.is_pre_ping or isinstance(context.sqlalchemy_exception, IntegrityError):
        return
    DATABASE_ERRORS.labels("disconnect" if context.is_disconnect else "other").inc()
