"""``/healthz`` (the process is up) and ``/readyz`` (the database answers)."""

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
    body = {"ok": database, "database": database, "relays_connected": services.hub.connected_count}
    return JSONResponse(body, status_code=200 if database else 503)


health_routes = [Route("/healthz", healthz), Route("/readyz", readyz)]
