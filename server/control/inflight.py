"""Agent requests in flight on this server process, so Stop can end them.

An agent input path runs its work inside :meth:`InFlight.track`. Stop (here, or relayed from
another replica over the bus) cancels the tracked tasks of the stopped agents on that desktop;
the cancellation surfaces from ``track`` as ``stopped_by_user``, so the agent's request ends
with an answer instead of disappearing. Cancelling the task also cancels its relay request,
and the relay cancels its handler (wire protocol ``cancel``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from server.control.model import DesktopKey
from wire.errors import ErrorCode, OpError


@dataclass(eq=False)
class Running:
    """One tracked request: its task and its agent; ``stopped_by`` once Stop reached it."""

    task: asyncio.Task[object]
    agent_id: str
    stopped_by: str | None = None


def stopped_error(by: str) -> OpError:
    return OpError(
        ErrorCode.STOPPED_BY_USER,
        f"{by} stopped this agent on this desktop; this request was cancelled",
        {
            "reason": "stopped_by_user",
            "suggestion": "end this run and tell the person; do not retry",
        },
    )


class InFlight:
    """The tracked requests of this process, by desktop."""

    def __init__(self) -> None:
        self._running: dict[DesktopKey, set[Running]] = {}

    @contextlib.asynccontextmanager
    async def track(self, key: DesktopKey, agent_id: str) -> AsyncIterator[Running]:
        """Run the body as ``agent_id``'s request on ``key``; Stop ends it with
        ``stopped_by_user``."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("an agent request runs in a task")
        entry = Running(task, agent_id)
        self._running.setdefault(key, set()).add(entry)
        try:
            yield entry
        except asyncio.CancelledError:
            if entry.stopped_by is None:
                raise
            task.uncancel()
            raise stopped_error(entry.stopped_by) from None
        finally:
            self._discard(key, entry)

    def _discard(self, key: DesktopKey, entry: Running) -> None:
        group = self._running.get(key)
        if group is not None:
            group.discard(entry)
            if not group:
                del self._running[key]

    def cancel(self, key: DesktopKey, by: str, agent_id: str | None = None) -> int:
        """Cancel the requests on ``key`` (of ``agent_id``, or of every agent); how many."""
        count = 0
        for entry in list(self._running.get(key, ())):
            if agent_id in (None, entry.agent_id) and entry.stopped_by is None:
                entry.stopped_by = by
                entry.task.cancel(f"stopped by {by}")
                count += 1
        return count

    def count(self, key: DesktopKey | None = None) -> int:
        if key is not None:
            return len(self._running.get(key, ()))
        return sum(len(group) for group in self._running.values())
