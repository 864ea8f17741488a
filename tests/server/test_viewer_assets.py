"""noVNC asset serving: sources, allow-list, no traversal, headers; the relay's op."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from relay.handlers import Handlers
from server.viewer.assets import NODE_MODULES_NOVNC, NovncAssets, canonical_headers
from wire.errors import InvalidArgs, OpError
from wire.ids import RelayId, RequestId
from wire.messages import Request as OpRequest

pytestmark = pytest.mark.unit


class FakeRelays:
    def __init__(self, handlers: Handlers) -> None:
        self.handlers = handlers
        self.calls = 0

    async def connected_with(self, capability: str) -> list[RelayId]:
        return [RelayId("r1")] if capability in self.handlers.capabilities() else []

    async def request(self, relay_id: RelayId, op: str, args: dict[str, Any]) -> Any:
        self.calls += 1
        request = OpRequest(RequestId("r1"), op, args)
        return await self.handlers.dispatch(None, request)  # type: ignore[arg-type]


def client_for(assets: NovncAssets) -> TestClient:
    async def endpoint(request: Request) -> Response:
        return await assets.response(request.path_params["path"])

    return TestClient(Starlette(routes=[Route("/novnc/{path:path}", endpoint)]))


def test_node_modules_files_have_a_private_cache_and_javascript_type() -> None:
    client = client_for(NovncAssets([NODE_MODULES_NOVNC]))
    response = client.get("/novnc/core/rfb.js")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/javascript; charset=utf-8"
    assert response.headers["cache-control"].startswith("private, max-age=")


@pytest.mark.parametrize(
    "path",
    ["../package.json", "core/../../package.json", "package.json", "core//rfb.js",
     "core/%2e%2e/x", "docs/LICENSE.txt", "core\\rfb.js"],
)  # fmt: skip
def test_paths_outside_the_allow_list_are_not_found(path: str) -> None:
    client = client_for(NovncAssets([NODE_MODULES_NOVNC]))
    assert client.get(f"/novnc/{path}").status_code == 404


def test_relay_fallback_serves_canonical_headers_and_caches(tmp_path: Path) -> None:
    tree = tmp_path / "novnc"
    (tree / "core").mkdir(parents=True)
    (tree / "core" / "rfb.js").write_text("export default 1;\n")
    relays = FakeRelays(Handlers(novnc_dir=tree))
    client = client_for(NovncAssets([], relays))
    for _ in range(2):
        response = client.get("/novnc/core/rfb.js")
        assert response.status_code == 200
        assert response.text == "export default 1;\n"
        names = [k for k, _ in response.headers.raw if k.lower() == b"content-type"]
        assert len(names) == 1
        assert response.headers["content-type"] == "text/javascript; charset=utf-8"
    assert relays.calls == 1
    assert client.get("/novnc/core/missing.js").status_code == 404


async def test_the_relay_op_refuses_traversal_and_reads_allowed_files(tmp_path: Path) -> None:
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "a.js").write_bytes(b"x")
    (tmp_path / "secret").write_text("no")
    handlers = Handlers(novnc_dir=tmp_path)
    answer = await handlers._novnc_asset(None, {"path": "core/a.js"})  # type: ignore[arg-type]
    assert base64.b64decode(answer["data"]) == b"x"
    for bad in ("secret", "../secret", "core/../secret", "/etc/passwd", "", None):
        with pytest.raises(InvalidArgs):
            await handlers._novnc_asset(None, {"path": bad})  # type: ignore[arg-type, typeddict-item]
    with pytest.raises(OpError):
        await handlers._novnc_asset(None, {"path": "core/none.js"})  # type: ignore[arg-type]


def test_backend_header_names_become_one_canonical_name() -> None:
    headers = canonical_headers([("Content-type", "a"), ("content-TYPE", "b"), ("x-foo", "c")])
    assert headers == {"Content-Type": "b", "X-Foo": "c"}
