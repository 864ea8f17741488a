"""noVNC's files under ``/novnc/…`` and the viewer page's own files.

Sources, first that exists wins: ``web/node_modules/@novnc/novnc`` (pinned in
``web/package.json``), Debian's ``/usr/share/novnc``, and finally a connected relay's own tree
through the ``novnc.asset`` op. Only ``core/``, ``vendor/``, ``app/`` and ``vnc.html`` are ever
served, and a path never leaves its tree.
"""

from __future__ import annotations

import base64
import binascii
import logging
import posixpath
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response

from wire import ops
from wire.errors import OpError
from wire.ids import RelayId

log = logging.getLogger(__name__)

WEB_DIR = Path(__file__).resolve().parents[2] / "web"
NODE_MODULES_NOVNC = WEB_DIR / "node_modules" / "@novnc" / "novnc"
DEBIAN_NOVNC = Path("/usr/share/novnc")
VIEWER_DIR = WEB_DIR / "viewer"

ALLOWED_DIRS = ("core/", "vendor/", "app/")
ALLOWED_FILES = frozenset({"vnc.html"})
ASSET_MAX_AGE_S = 3600
ASSET_HEADERS = {
    "Cache-Control": f"private, max-age={ASSET_MAX_AGE_S}",
    "X-Content-Type-Options": "nosniff",
}
CONTENT_TYPES = {
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
    ".oga": "audio/ogg",
    ".ogg": "audio/ogg",
    ".mp3": "audio/mpeg",
}
RELAY_CACHE_BYTES = 16 * 1024 * 1024
RELAY_ASSET_CAPABILITY = "novnc_asset"


def content_type(path: str) -> str:
    """The ``Content-Type`` relaydesk sends for ``path`` (decided here, never by a backend)."""
    return CONTENT_TYPES.get(posixpath.splitext(path)[1].lower(), "application/octet-stream")


def allowed_asset(path: str) -> str | None:
    """``path`` normalised if it names an allowed noVNC file, else None."""
    if not path or len(path) > 256 or "\\" in path or "\x00" in path or path.startswith("/"):
        return None
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    if path in ALLOWED_FILES or path.startswith(ALLOWED_DIRS):
        return path
    return None


def canonical_header_name(name: str) -> str:
    """``content-type`` / ``Content-type`` → ``Content-Type``."""
    return "-".join(word.capitalize() for word in name.strip().split("-"))


def canonical_headers(raw: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Backend header pairs with one canonical name each (a later duplicate wins)."""
    headers: dict[str, str] = {}
    for name, value in raw:
        headers[canonical_header_name(name)] = value
    return headers


def find_file(roots: Iterable[Path], path: str) -> Path | None:
    """The file ``path`` in the first root that has it, never outside that root."""
    for root in roots:
        candidate = (root / path).resolve()
        if candidate.is_relative_to(root.resolve()) and candidate.is_file():
            return candidate
    return None


class AssetRelays(Protocol):
    """How the relay fallback reaches relays (the hub and the store's relay list)."""

    async def connected_with(self, capability: str) -> list[RelayId]: ...

    async def request(self, relay_id: RelayId, op: str, args: dict[str, Any]) -> Any: ...


class RelayAssetCache:
    """Files fetched from relays, kept in memory up to a byte budget (oldest dropped first)."""

    def __init__(self, budget: int = RELAY_CACHE_BYTES) -> None:
        self.budget = budget
        self._files: OrderedDict[str, tuple[bytes, dict[str, str]]] = OrderedDict()
        self._size = 0

    def get(self, path: str) -> tuple[bytes, dict[str, str]] | None:
        found = self._files.get(path)
        if found is not None:
            self._files.move_to_end(path)
        return found

    def put(self, path: str, body: bytes, headers: dict[str, str]) -> None:
        if len(body) > self.budget or path in self._files:
            return
        self._files[path] = (body, headers)
        self._size += len(body)
        while self._size > self.budget:
            _, (old, _) = self._files.popitem(last=False)
            self._size -= len(old)


class NovncAssets:
    """Serves ``/novnc/{path}`` from the first source that has the file."""

    def __init__(self, roots: Iterable[Path], relays: AssetRelays | None = None) -> None:
        self.roots = [root for root in roots if root.is_dir()]
        self.relays = relays
        self.cache = RelayAssetCache()

    @classmethod
    def default_roots(cls) -> list[Path]:
        return [NODE_MODULES_NOVNC, DEBIAN_NOVNC]

    async def response(self, raw_path: str) -> Response:
        path = allowed_asset(raw_path)
        if path is None:
            return PlainTextResponse("not found", status_code=404)
        found = find_file(self.roots, path)
        if found is not None:
            return FileResponse(found, media_type=content_type(path), headers=ASSET_HEADERS)
        if not self.roots and self.relays is not None:
            return await self._from_relay(path)
        return PlainTextResponse("not found", status_code=404)

    async def _from_relay(self, path: str) -> Response:
        cached = self.cache.get(path) or await self._fetch(path)
        if cached is None:
            return PlainTextResponse("not found", status_code=404)
        body, backend_headers = cached
        # The backend's own names (websockify says ``Content-type``) are folded into one
        # canonical header each; the type itself is ours, decided by the path.
        headers = {**backend_headers, **ASSET_HEADERS, "Content-Type": content_type(path)}
        return Response(body, headers=headers)

    async def _fetch(self, path: str) -> tuple[bytes, dict[str, str]] | None:
        assert self.relays is not None
        for relay_id in await self.relays.connected_with(RELAY_ASSET_CAPABILITY):
            try:
                args = ops.NovncAssetArgs(path=path)
                result = await self.relays.request(relay_id, ops.NOVNC_ASSET.name, dict(args))
                body = base64.b64decode(result["data"], validate=True)
            except (OpError, KeyError, TypeError, binascii.Error) as err:
                log.info("relay %s has no noVNC asset %s: %s", relay_id, path, err)
                continue
            headers = _kept_headers(result.get("headers"))
            self.cache.put(path, body, headers)
            return body, headers
        return None


# Of a backend's headers only these describe the file; the rest are the backend's business.
_KEPT = frozenset({"Content-Type", "Last-Modified"})


def _kept_headers(raw: object) -> dict[str, str]:
    pairs = raw.items() if isinstance(raw, Mapping) else ()
    headers = canonical_headers((str(k), str(v)) for k, v in pairs)
    return {name: value for name, value in headers.items() if name in _KEPT}


VIEWER_FILES = frozenset(
    {"viewer.js", "viewer.css", "bridge.js", "toolbar.js", "zoom.js", "audio.js", "control.js",
     "audio-worklet.js"}
)  # fmt: skip


async def viewer_file(request: Request) -> Response:
    """``/viewer/{name}``: the viewer page's script and style sheet."""
    name = request.path_params["name"]
    if name not in VIEWER_FILES:
        return PlainTextResponse("not found", status_code=404)
    return FileResponse(VIEWER_DIR / name, media_type=content_type(name), headers=ASSET_HEADERS)
