"""The periodic health loop; what one round checks lives in ``Desktops.check_all``
(``relay/desktops/lifecycle.py``, with each kind's own checks in its launcher);
``ProbeStrikes`` is the rule it applies to a round's probe results (docs/desktops.md,
"Watchdog")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from relay.desktops.probe import ProbeResult

logger = logging.getLogger(__name__)


# Checks whose failure means the desktop is dead, not slow: it fails in the round that sees it.
VITAL_CHECKS: Final = ("processes", "container", "sockets")


class ProbeStrikes:
    """Consecutive watchdog rounds whose end-to-end chain probe failed, per desktop session.

    A desktop whose essential processes (or container, or sockets) are gone fails at once. One
    whose processes are alive but whose chain did not answer (a loaded host, an x11vnc busy
    writing to a viewer that stopped reading) fails only after ``limit`` rounds in a row; a
    round that answers clears its count."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._counts: dict[str, int] = {}

    def verdict(self, session_id: str, result: ProbeResult) -> str | None:
        """The reason to fail this desktop now, or None to keep it running."""
        if result.ok:
            self._counts.pop(session_id, None)
            return None
        reason = result.reason or "unhealthy"
        if any(result.checks.get(name) is False for name in VITAL_CHECKS):
            self._counts.pop(session_id, None)
            return reason
        count = self._counts.get(session_id, 0) + 1
        if count < self.limit:
            self._counts[session_id] = count
            logger.warning(
                "desktop %s: its chain probe failed (%s), %d of %d rounds before it is failed",
                session_id[:8],
                reason,
                count,
                self.limit,
            )
            return None
        self._counts.pop(session_id, None)
        return f"{reason} ({count} watchdog rounds in a row)"

    def keep_only(self, session_ids: Iterable[str]) -> None:
        """Forget the counts of desktops that are gone."""
        live = set(session_ids)
        for gone in [key for key in self._counts if key not in live]:
            del self._counts[gone]


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
