"""The periodic health loop; what one round checks lives in ``DesktopManager.check_all``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)


class Watchdog:
    """Runs ``check`` every ``interval_s`` until stopped; a failing round never ends the loop."""

    def __init__(self, check: Callable[[], Awaitable[None]], interval_s: float) -> None:
        self._check = check
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the loop (idempotent)."""
        if not self.running:
            self._task = asyncio.create_task(self._run(), name="desktop-watchdog")

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Cancel the loop and wait for it (bounded)."""
        task, self._task = self._task, None
        if task is None or task.done():
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, timeout_s)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self._check()
            except Exception:
                logger.exception("desktop watchdog round failed")
