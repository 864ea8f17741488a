"""A desktop backend's accessibility workers: one per desktop session, started on first use as
the desktop's user, closed once their desktop is gone.

The virtual and the docker backends differ only in the worker's environment and log, whether a
started worker joins the desktop's processes, and how they know a desktop still runs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from relay.a11y.client import A11yWorker, WorkerSpec, a11y_python
from relay.a11y.settings import A11ySettings
from wire.errors import ErrorCode, OpError


class DesktopA11yWorkers:
    """``settings``: the relay's accessibility settings (which Python, the worker's policy)."""

    def __init__(self, settings: A11ySettings) -> None:
        self.settings = settings
        self._workers: dict[str, A11yWorker] = {}
        self._python: str | bool | None = False  # False: not looked for yet

    def get(self, session_id: str) -> A11yWorker | None:
        return self._workers.get(session_id)

    async def python(self) -> str:
        """The host's Python with the GObject bindings, looked for once."""
        if self._python is False:
            self._python = await asyncio.to_thread(a11y_python, self.settings.python)
        if not isinstance(self._python, str):
            raise OpError(
                ErrorCode.A11Y_UNAVAILABLE,
                "this relay's host has no Python with the GObject bindings the accessibility "
                "tools need (Debian: python3-gi; scripts/install installs it)",
                {"suggestion": "use the screen tool (screenshot, then a guarded click)"},
            )
        return self._python

    def add(
        self,
        session_id: str,
        name: str,
        spec: Callable[[], WorkerSpec],
        joined: Callable[[int], Awaitable[None]] | None = None,
    ) -> A11yWorker:
        worker = A11yWorker(name, spec, joined)
        self._workers[session_id] = worker
        return worker

    async def release_gone(self, running: Callable[[str], bool]) -> None:
        """Close the workers of desktop sessions that no longer run."""
        for session_id in [s for s in self._workers if not running(s)]:
            await self._workers.pop(session_id).aclose()

    async def aclose(self) -> None:
        for worker in self._workers.values():
            await worker.aclose()
        self._workers.clear()
