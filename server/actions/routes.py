"""``GET /api/v1/actions`` (tool definitions) and ``POST /api/v1/actions/{name}``."""

from __future__ import annotations

from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from server.actions.invoke import ActionRunner, Body, request_id_from
from server.auth.dependencies import Authenticator
from server.auth.errors import AuthError, error_response
from server.boundary.body import read_json_object
from server.json_response import JSONResponse
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


def action_routes(auth: Authenticator, actions: ActionRunner) -> list[BaseRoute]:
    """The typed actions over HTTP, for callers ``auth`` knows."""

    async def list_actions(request: Request) -> Response:
        try:
            await auth.authenticate(request)
        except AuthError as err:
            return error_response(err)
        definitions = actions.registry.definitions()
        return JSONResponse({"ok": True, "actions": definitions}, headers=NO_STORE)

    async def call_action(request: Request) -> Response:
        try:
            principal = await auth.authenticate(request)
        except AuthError as err:
            return error_response(err)
        request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
        body = await _read_body(request, actions.max_body_bytes)
        status, payload = await actions.invoke(
            principal,
            request.path_params["name"],
            body,
            source=SOURCES[principal.via],
            request_id=request_id,
        )
        headers = {**NO_STORE, REQUEST_ID_HEADER: request_id}
        return JSONResponse(payload, status_code=status, headers=headers)

    return [
        Route("/api/v1/actions", list_actions, methods=["GET"]),
        Route("/api/v1/actions/{name}", call_action, methods=["POST"]),
    ]
