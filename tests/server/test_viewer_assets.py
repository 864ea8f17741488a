"""noVNC's files: served from the server's own pinned tree only, checked whole at start."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from server.config import ConfigError
from server.viewer.assets import (
    NODE_MODULES_NOVNC,
    NovncAssets,
    NovncTreeMissing,
    check_novnc_tree,
    missing_modules,
    pinned_version,
)
from wire import ops

pytestmark = pytest.mark.unit


def client_for(assets: NovncAssets) -> TestClient:
    async def endpoint(request: Request) -> Response:
        return await assets.response(request.path_params["path"])

    return TestClient(Starlette(routes=[Route("/novnc/{path:path}", endpoint)]))


def test_node_modules_files_have_a_private_cache_and_javascript_type() -> None:
    client = client_for(NovncAssets())
    response = client.get("/novnc/core/rfb.js")
    assert response.status_code == 200
    assert response.content == (NODE_MODULES_NOVNC / "core" / "rfb.js").read_bytes()
    assert response.headers["content-type"] == "text/javascript; charset=utf-8"
    assert response.headers["cache-control"].startswith("private, max-age=")


@pytest.mark.parametrize(
    "path",
    [
        "../package.json",
        "core/../../package.json",
        "package.json",
        "core//rfb.js",
        "core/%2e%2e/x",
        "docs/LICENSE.txt",
        "core\\rfb.js",
        "vnc.html",
        "app/ui.js",
        "core/missing.js",
    ],
)
def test_paths_outside_the_allow_list_or_the_tree_are_not_found(path: str) -> None:
    client = client_for(NovncAssets())
    assert client.get(f"/novnc/{path}").status_code == 404


def test_the_installed_tree_is_the_pinned_version_and_whole() -> None:
    check_novnc_tree()
    assert missing_modules(NODE_MODULES_NOVNC) == []
    package = json.loads((NODE_MODULES_NOVNC / "package.json").read_text())
    assert package["version"] == pinned_version()


def _copy_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "novnc"
    shutil.copytree(NODE_MODULES_NOVNC, tree)
    return tree


def test_a_missing_tree_is_refused_saying_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        check_novnc_tree(tmp_path / "nothing")
    assert "not installed" in str(info.value)
    assert "npm ci" in str(info.value)
    assert "scripts/install" in str(info.value)


def test_a_tree_missing_a_module_the_viewer_imports_is_refused(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    (tree / "vendor" / "pako" / "lib" / "zlib" / "inflate.js").unlink()
    with pytest.raises(NovncTreeMissing) as info:
        check_novnc_tree(tree)
    assert "vendor/pako/lib/zlib/inflate.js" in str(info.value)
    (tree / "core" / "rfb.js").unlink()
    with pytest.raises(NovncTreeMissing, match=r"core/rfb\.js"):
        check_novnc_tree(tree)


def test_a_tree_of_another_version_or_package_is_refused(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    package = json.loads((tree / "package.json").read_text())
    (tree / "package.json").write_text(json.dumps({**package, "version": "1.3.0"}))
    with pytest.raises(NovncTreeMissing, match=r"version 1\.3\.0, but web/package\.json pins"):
        check_novnc_tree(tree)
    (tree / "package.json").write_text(json.dumps({**package, "name": "evil"}))
    with pytest.raises(NovncTreeMissing, match="does not name @novnc/novnc"):
        check_novnc_tree(tree)
    (tree / "package.json").unlink()
    with pytest.raises(NovncTreeMissing, match=r"no readable package\.json"):
        check_novnc_tree(tree)


def test_no_relay_op_serves_novnc_files() -> None:
    assert "novnc.asset" not in ops.OPS
