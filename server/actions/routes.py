"""``GET /api/v1/actions`` (tool definitions) and ``POST /api/v1/actions/{name}``."""

from __future__ import annotations

from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server.actions.invoke import Body, invoke, request_id_from
from server.auth.dependencies import authenticate
from server.auth.errors import AuthError, error_response
from server.boundary.body import read_json_object
from server.json_response import JSONResponse
from server.services import services_of
from wire.errors import RequestRejected

REQUEST_ID_HEADER: Final = "X-Request-ID"
NO_STORE: Final = {"Cache-Control": "no-store"}
SOURCES: Final = {"cookie": "web", "token": "api"}


async def _read_body(request: Request, limit: int) -> Body:
    """The checked JSON object, or the boundary's refusal (``invoke`` answers and audits it)."""
    try:
        return await read_json_object(request, limit)
    except RequestRejected as refused:
        return refused


async def list_actions(request: Request) -> Response:
    try:
        await authenticate(request)
    except AuthError as err:
        return error_response(err)
    registry = services_of(request).actions
    return JSONResponse({"ok": True, "actions": registry.definitions()}, headers=NO_STORE)


async def call_action(request: Request) -> Response:
    try:
        principal = await authenticate(request)
    except AuthError as err:
        return error_response(err)
    request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
    services = services_of(request)
    body = await _read_body(request, services.settings.max_body_bytes)
    status, payload = await invoke(
        services,
        principal,
        request.path_params["name"],
        body,
        source=SOURCES[principal.via],
        request_id=request_id,
    )
    headers = {**NO_STORE, REQUEST_ID_HEADER: request_id}
    return JSONResponse(payload, status_code=status, headers=headers)


action_routes = [
    Route("/api/v1/actions", list_actions, methods=["GET"]),
    Route("/api/v1/actions/{name}", call_action, methods=["POST"]),
]
