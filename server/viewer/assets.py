"""noVNC's files under ``/novnc/…`` and the viewer page's own files.

The server serves the noVNC tree it ships with, and nothing else: ``web/node_modules/@novnc/
novnc``, exactly the version ``web/package.json`` pins (``npm ci`` in ``web/``, run by
``scripts/install`` and by the server image's build). :func:`check_novnc_tree` runs when the
server starts, and a tree that is missing, of another version or incomplete stops the start
with a message saying how to install it: code a relay or anyone else supplied is never served
from the server's origin. Only ``core/`` and ``vendor/`` are served (what ``core/rfb.js``
imports), and a path never leaves the tree.
"""

from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path
from typing import Final

from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response

from server.config import ConfigError

WEB_DIR: Final = Path(__file__).resolve().parents[2] / "web"
NODE_MODULES_NOVNC: Final = WEB_DIR / "node_modules" / "@novnc" / "novnc"
VIEWER_DIR: Final = WEB_DIR / "viewer"
NOVNC_PACKAGE: Final = "@novnc/novnc"
# The module the viewer imports; everything it imports in turn must be in the tree.
NOVNC_ENTRY: Final = "core/rfb.js"
INSTALL_HINT: Final = (
    "install it with `scripts/install`, or `npm ci` in the web/ directory of relaydesk "
    "(the server image installs it when it is built); the server serves no noVNC from "
    "anywhere else"
)

ALLOWED_DIRS: Final = ("core/", "vendor/")
ASSET_MAX_AGE_S: Final = 3600
ASSET_HEADERS: Final = {
    "Cache-Control": f"private, max-age={ASSET_MAX_AGE_S}",
    "X-Content-Type-Options": "nosniff",
}
CONTENT_TYPES: Final = {
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff": "font/woff",
    ".woff2": "font/woff2",
    ".ttf": "font/ttf",
}
# ``import … from "./x.js"`` / ``export … from '../y.js'`` (noVNC's modules use no other form).
_RELATIVE_IMPORT: Final = re.compile(
    r"""\b(?:import|export)\b[^;'"]*?\bfrom\s*['"](\.{1,2}/[^'"]+)['"]"""
)


class NovncTreeMissing(ConfigError):
    """The server's noVNC tree is missing, of another version, or incomplete."""

    def __init__(self, root: Path, problem: str) -> None:
        self.root = root
        self.problem = problem
        message = f"the viewer's noVNC files at {root} are unusable ({problem}): {INSTALL_HINT}"
        super().__init__(message)


def content_type(path: str) -> str:
    """The ``Content-Type`` relaydesk sends for ``path``."""
    return CONTENT_TYPES.get(posixpath.splitext(path)[1].lower(), "application/octet-stream")


def allowed_asset(path: str) -> str | None:
    """``path`` if it names a file under an allowed noVNC directory, else None."""
    if not path or len(path) > 256 or "\\" in path or "\x00" in path or path.startswith("/"):
        return None
    if any(part in ("", ".", "..") for part in path.split("/")):
        return None
    return path if path.startswith(ALLOWED_DIRS) else None


def find_file(root: Path, path: str) -> Path | None:
    """The file ``path`` in ``root``, never outside it."""
    candidate = (root / path).resolve()
    if candidate.is_relative_to(root.resolve()) and candidate.is_file():
        return candidate
    return None


def pinned_version(web_dir: Path = WEB_DIR) -> str:
    """The noVNC version ``web/package.json`` pins."""
    package = json.loads((web_dir / "package.json").read_text(encoding="utf-8"))
    return str(package["dependencies"][NOVNC_PACKAGE])


def _installed_version(root: Path) -> str:
    try:
        package = json.loads((root / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise NovncTreeMissing(root, "no readable package.json") from err
    if not isinstance(package, dict) or package.get("name") != NOVNC_PACKAGE:
        raise NovncTreeMissing(root, f"package.json does not name {NOVNC_PACKAGE}")
    return str(package.get("version"))


def missing_modules(root: Path, entry: str = NOVNC_ENTRY) -> list[str]:
    """The modules ``entry`` imports (transitively, by relative path) that the tree lacks."""
    seen: set[str] = set()
    missing: list[str] = []
    todo = [entry]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        found = find_file(root, path) if allowed_asset(path) else None
        if found is None:
            missing.append(path)
            continue
        base = posixpath.dirname(path)
        for spec in _RELATIVE_IMPORT.findall(found.read_text(encoding="utf-8", errors="replace")):
            todo.append(posixpath.normpath(posixpath.join(base, spec)))
    return sorted(missing)


def check_novnc_tree(root: Path | None = None) -> None:
    """Refuse (``NovncTreeMissing``) a tree that is not the pinned noVNC, whole (default:
    the server's own)."""
    root = root or NODE_MODULES_NOVNC
    if not root.is_dir():
        raise NovncTreeMissing(root, "not installed")
    wanted, installed = pinned_version(), _installed_version(root)
    if installed != wanted:
        raise NovncTreeMissing(root, f"version {installed}, but web/package.json pins {wanted}")
    missing = missing_modules(root)
    if missing:
        shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
        raise NovncTreeMissing(root, f"{len(missing)} module(s) missing: {shown}")


class NovncAssets:
    """Serves ``/novnc/{path}`` from the server's own noVNC tree."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or NODE_MODULES_NOVNC

    async def response(self, raw_path: str) -> Response:
        path = allowed_asset(raw_path)
        found = find_file(self.root, path) if path is not None else None
        if path is None or found is None:
            return PlainTextResponse("not found", status_code=404)
        return FileResponse(found, media_type=content_type(path), headers=ASSET_HEADERS)


VIEWER_FILES: Final = frozenset(
    {
        "viewer.js",
        "viewer.css",
        "bridge.js",
        "toolbar.js",
        "zoom.js",
        "audio.js",
        "control.js",
        "audio-worklet.js",
        "files.js",
        "clipimage.js",
    }
)


async def viewer_file(request: Request) -> Response:
    """``/viewer/{name}``: the viewer page's script and style sheet."""
    name = request.path_params["name"]
    if name not in VIEWER_FILES:
        return PlainTextResponse("not found", status_code=404)
    return FileResponse(VIEWER_DIR / name, media_type=content_type(name), headers=ASSET_HEADERS)
