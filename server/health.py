"""``/healthz`` (the process is up) and ``/readyz`` (the database, and Redis when clustered)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from server.db.store import Store
from server.json_response import JSONResponse
from server.relays.hub import RelayHub


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


def health_routes(
    store: Store, links: RelayHub, redis_ok: Callable[[], Awaitable[bool]] | None
) -> list[BaseRoute]:
    """``redis_ok`` answers whether Redis is reachable when replicas share it (else None)."""

    async def readyz(request: Request) -> JSONResponse:
        database = await store.ping()
        ok = database
        body: dict[str, object] = {"database": database}
        if redis_ok is not None:
            body["redis"] = redis = await redis_ok()
            ok = database and redis
        body.update(ok=ok, relays_connected=links.connected_count)
        return JSONResponse(body, status_code=200 if ok else 503)

    return [Route("/healthz", healthz), Route("/readyz", readyz)]
