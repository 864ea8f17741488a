"""``/healthz`` (the process is up) and ``/readyz`` (the database, and Redis when clustered)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from server.json_response import JSONResponse
from server.services import services_of


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


async def readyz(request: Request) -> JSONResponse:
    services = services_of(request)
    database = await services.store.ping()
    ok = database
    body: dict[str, object] = {"database": database}
    if services.cluster is not None:
        body["redis"] = redis = await services.cluster.redis_ok()
        ok = database and redis
    body.update(ok=ok, relays_connected=services.links.connected_count)
    return JSONResponse(body, status_code=200 if ok else 503)


health_routes = [Route("/healthz", healthz), Route("/readyz", readyz)]
