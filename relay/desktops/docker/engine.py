"""A small client of the Docker Engine API over the daemon's unix socket.

The relay needs six calls (version, image, create, start, inspect, remove, list by label); the
HTTP API through aiohttp, already a relay dependency, costs a request each, where the ``docker``
command line would cost a process each (the watchdog's rounds and every adoption use them).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import aiohttp

from wire.errors import ErrorCode, RelaydeskError

logger = logging.getLogger(__name__)

# Docker 20.10's API; later daemons answer it as well.
API_VERSION: Final = "v1.41"
REQUEST_TIMEOUT_S: Final = 60.0
NOT_FOUND: Final = 404
CONFLICT: Final = 409
NOT_MODIFIED: Final = 304


class DockerEngineError(RelaydeskError):
    """The daemon refused a call (``daemon_status``: its HTTP status) or did not answer
    (``daemon_status`` 0)."""

    code = ErrorCode.UNAVAILABLE

    def __init__(self, daemon_status: int, reason: str) -> None:
        self.daemon_status = daemon_status
        self.reason = reason
        super().__init__(
            f"Docker: {reason}" if daemon_status else f"Docker does not answer: {reason}"
        )


class DockerEngine:
    """The Engine API on one unix socket; one connection pool, closed by :meth:`aclose`."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=str(self.socket)),
                timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
            )
        return self._session

    async def _call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
    ) -> tuple[int, Any]:
        """``(status, decoded JSON body or None)``; ``DockerEngineError(0, …)`` when the daemon
        cannot be reached."""
        url = f"http://docker/{API_VERSION}{path}"
        try:
            async with self._client().request(method, url, params=params, json=body) as resp:
                raw = await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            raise DockerEngineError(0, str(err) or type(err).__name__) from err
        try:
            return resp.status, json.loads(raw) if raw else None
        except ValueError:
            return resp.status, None

    async def _ok(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
        also: tuple[int, ...] = (),
    ) -> Any:
        status, data = await self._call(method, path, params=params, body=body)
        if status >= 300 and status not in also:
            message = data.get("message") if isinstance(data, dict) else None
            raise DockerEngineError(status, str(message or f"HTTP {status}"))
        return data

    async def version(self) -> str:
        """The daemon's version (the cheapest question that proves it answers)."""
        data = await self._ok("GET", "/version")
        return str(data.get("Version", "?")) if isinstance(data, dict) else "?"

    async def image(self, name: str) -> dict[str, Any] | None:
        """The image's description (``Size`` among it), None when the daemon has no such image."""
        status, data = await self._call("GET", f"/images/{quote(name, safe='')}/json")
        return data if status == 200 and isinstance(data, dict) else None

    async def has_image(self, name: str) -> bool:
        return await self.image(name) is not None

    async def stats(self, container_id: str) -> dict[str, Any]:
        """One sample of the container's resource use (``memory_stats``, ``cpu_stats``)."""
        data = await self._ok("GET", f"/containers/{container_id}/stats", params={"stream": "0"})
        return data if isinstance(data, dict) else {}

    async def create(self, name: str, config: dict[str, Any]) -> str:
        """Create a container named ``name``; its id."""
        data = await self._ok("POST", "/containers/create", params={"name": name}, body=config)
        return str(data["Id"])

    async def start(self, container_id: str) -> None:
        await self._ok("POST", f"/containers/{container_id}/start", also=(NOT_MODIFIED,))

    async def pause(self, container_id: str, paused: bool) -> None:
        """Freeze (``paused``) or thaw every process of the container (the daemon's freezer)."""
        await self._ok("POST", f"/containers/{container_id}/{'pause' if paused else 'unpause'}")

    async def inspect(self, container_id: str) -> dict[str, Any] | None:
        """The container's description, None when there is no such container."""
        data = await self._ok("GET", f"/containers/{container_id}/json", also=(NOT_FOUND,))
        return data if isinstance(data, dict) and "Id" in data else None

    async def remove(self, container_id: str) -> None:
        """Kill and remove (idempotent: a container that is gone, or already being removed by
        the daemon's auto-remove, is fine)."""
        await self._ok(
            "DELETE",
            f"/containers/{container_id}",
            params={"force": "1", "v": "1"},
            also=(NOT_FOUND, CONFLICT),
        )

    async def labelled(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        """Every container (running or not) carrying all of ``labels``."""
        filters = json.dumps({"label": [f"{key}={value}" for key, value in labels.items()]})
        data = await self._ok("GET", "/containers/json", params={"all": "1", "filters": filters})
        return [c for c in data if isinstance(c, dict)] if isinstance(data, list) else []

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
