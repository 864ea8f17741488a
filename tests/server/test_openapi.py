"""``GET /api/v1/openapi.json``: valid OpenAPI 3.1, generated from the app's routes and actions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

from server.actions.registry import Action, tool_schema
from server.openapi.document import public_endpoints, undocumented
from tests.support.routes import routes_of_a_fresh_app
from tests.support.stack import Seed, inprocess_server, seed_database

pytestmark = pytest.mark.unit
MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")

DOCS = Path(__file__).resolve().parents[2] / "docs"


async def _noop(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    return {"done": True}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Any, str, Seed]]:
    seed = await seed_database(tmp_path_factory.mktemp("openapi") / "data")
    async with inprocess_server(seed) as (app, url):
        yield app, url, seed


async def _document(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url) as client:
        response = await client.get("/api/v1/openapi.json")  # no credential needed
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    document: dict[str, Any] = response.json()
    return document


@MODULE_LOOP
async def test_the_document_is_valid_openapi_3_1(served) -> None:
    _app, url, _seed = served
    document = await _document(url)
    assert document["openapi"].startswith("3.1")
    validate(document)


@MODULE_LOOP
async def test_a_broken_document_is_caught_by_the_validator(served) -> None:
    _app, url, _seed = served
    document = await _document(url)
    # a path parameter the operation does not declare
    del document["paths"]["/api/v1/conversations/{conversation_id}/messages"]["get"]["parameters"]
    with pytest.raises(OpenAPIValidationError):
        validate(document)


@MODULE_LOOP
async def test_every_action_is_an_operation_with_its_schema_as_the_body(served) -> None:
    app, url, _seed = served
    document = await _document(url)
    registry = app.state.parts.actions.registry
    for name in registry.names():
        action = registry.get(name)
        operation = document["paths"][f"/api/v1/actions/{name}"]["post"]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body == action.json_schema
        assert operation["operationId"] == name and operation["x-required-role"] == action.role
        assert {"apiToken": []} in operation["security"]
    assert "/api/v1/actions/{name}" not in document["paths"]


@MODULE_LOOP
async def test_a_new_action_appears_without_new_code(served) -> None:
    app, url, _seed = served
    registry = app.state.parts.actions.registry
    registry.register(Action("desktop_probe_extra", "read", tool_schema({}), "Extra.", _noop))
    document = await _document(url)
    assert "/api/v1/actions/desktop_probe_extra" in document["paths"]


@MODULE_LOOP
async def test_every_route_of_the_app_is_described_with_its_auth(served) -> None:
    app, url, _seed = served
    assert undocumented(app.routes) == []
    document = await _document(url)
    paths = document["paths"]
    expected = (
        "/api/v1/conversations/{conversation_id}/messages",
        "/api/v1/events",
        "/vnc/{desktop_session_id}/{token}/",
        "/vnc/{sid}/{token}/keyboard-state",
        "/vnc/{desktop_session_id}/{token}/websockify",
        "/api/v1/openapi.json",
    )
    for path in expected:
        assert path in paths, path
    assert paths["/api/v1/conversations/{conversation_id}/mcp"]["post"]["security"] == [
        {"apiToken": []}
    ]
    messages = paths["/api/v1/conversations/{conversation_id}/messages"]["post"]["security"]
    assert {"sessionCookie": [], "csrfToken": []} in messages
    assert paths["/vnc/{desktop_session_id}/{token}/"]["get"]["security"] == []
    assert not any(path.startswith("/internal/") for path in paths)


def test_a_route_missing_from_the_table_is_reported() -> None:
    from starlette.routing import Route

    routes = routes_of_a_fresh_app()
    extra = Route("/api/v1/new-thing", _noop, methods=["GET"])
    assert undocumented([*routes, extra]) == [("GET", "/api/v1/new-thing")]
    assert ("GET", "/api/v1/new-thing") in public_endpoints([*routes, extra])


def test_the_http_api_docs_link_the_document() -> None:
    assert "/api/v1/openapi.json" in (DOCS / "http-api.md").read_text(encoding="utf-8")
