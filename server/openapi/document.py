"""``GET /api/v1/openapi.json``: OpenAPI 3.1 of the server, generated on each request.

Paths come from the app's own routes (described in ``routes_described``) and from the action
registry: every registered action is ``POST /api/v1/actions/{name}`` with its JSON Schema as the
request body, so a new action or route is in the document without new code. Public: the
document holds no secret, and client generators fetch it without credentials.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute

from server.actions.registry import Action, ActionRegistry
from server.json_response import JSONResponse
from server.openapi.parts import COMPONENTS, MEMBER_WRITE, Json, answer, operation, path_parameters
from server.openapi.routes_described import ACTION_ROUTE, DESCRIBED, INTERNAL_PREFIX, WEBSOCKET
from server.version import server_version

OPENAPI_VERSION: Final = "3.1.0"
PATH: Final = "/api/v1/openapi.json"
_PARAMETER: Final = re.compile(r"{([^}:]+)(?::[^}]*)?}")
DESCRIPTION: Final = (
    "Live Linux desktops for people and agents. Every typed action names the conversation it "
    "acts in (`conversation_id`), which decides the caller's role and the relays it sees; "
    "errors have one body `{ok: false, error: {code, message, …}}` (docs/http-api.md)."
)
Endpoint = tuple[str, str]  # (method or WEBSOCKET, path template)


def _endpoints(routes: Iterable[BaseRoute]) -> Iterator[Endpoint]:
    """Every (method, path) the app answers, outside the replicas' internal routes."""
    for route in routes:
        if isinstance(route, Route):
            for method in sorted(route.methods or ()):
                if method != "HEAD":
                    yield method, route.path_format
        elif isinstance(route, WebSocketRoute):
            yield WEBSOCKET, route.path_format
        elif isinstance(route, Mount):
            yield "GET", route.path_format  # "/app/{path}"


def public_endpoints(routes: Iterable[BaseRoute]) -> list[Endpoint]:
    return [e for e in _endpoints(routes) if not e[1].startswith(INTERNAL_PREFIX)]


def undocumented(routes: Iterable[BaseRoute]) -> list[Endpoint]:
    """The app's endpoints the route table does not describe."""
    return [e for e in public_endpoints(routes) if e != ACTION_ROUTE and e not in DESCRIBED]


def _fallback(method: str, path: str) -> Json:
    op = operation(
        f"{method.lower()}_{path}",
        f"{method} {path}",
        tag="undocumented",
        security=MEMBER_WRITE,
        responses=answer("See the docs."),
    )
    op["x-undocumented"] = True
    return op


def _with_path_parameters(op: Json, path: str) -> Json:
    names = _PARAMETER.findall(path)
    if not names:
        return op
    return {**op, "parameters": [*path_parameters(names), *op.get("parameters", [])]}


def action_operation(action: Action) -> Json:
    """``POST /api/v1/actions/{action.name}``: the action's schema is the body."""
    op = operation(
        action.name,
        action.description.split(". ")[0][:120],
        tag="actions",
        security=MEMBER_WRITE,
        body=action.json_schema,
        description=f"{action.description}\n\nNeeds role `{action.role}` in the conversation.",
        responses=answer("`{ok: true, …}`: the action's answer (docs/http-api.md)."),
    )
    op["x-required-role"] = action.role
    return op


def _paths(routes: Iterable[BaseRoute], registry: ActionRegistry) -> Json:
    paths: Json = {}
    for method, path in public_endpoints(routes):
        if (method, path) == ACTION_ROUTE:
            for name in registry.names():
                action = registry.get(name)
                if action is not None:
                    paths[f"/api/v1/actions/{name}"] = {"post": action_operation(action)}
            continue
        op = DESCRIBED.get((method, path)) or _fallback(method, path)
        verb = "get" if method == WEBSOCKET else method.lower()
        paths.setdefault(_PARAMETER.sub(r"{\1}", path), {})[verb] = _with_path_parameters(op, path)
    return paths


def openapi_document(routes: Iterable[BaseRoute], registry: ActionRegistry) -> Json:
    """The OpenAPI 3.1 document of an app with these routes and actions."""
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "relaydesk", "version": server_version(), "description": DESCRIPTION},
        "paths": _paths(routes, registry),
        "components": COMPONENTS,
    }


def openapi_routes(registry: ActionRegistry) -> list[BaseRoute]:
    """``GET /openapi.json``: the document of the app's routes and ``registry``'s actions."""

    async def openapi_json(request: Request) -> Response:
        document = openapi_document(request.app.routes, registry)
        return JSONResponse(document, headers={"Cache-Control": "no-cache"})

    return [Route(PATH, openapi_json, methods=["GET"])]
