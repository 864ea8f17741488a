"""``MemoryControlStore``: control records in this process (one server, no extra service)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from server.control.model import DesktopControl, DesktopKey
from server.control.store import Change, T

EMPTY = DesktopControl()


class MemoryControlStore:
    """A ``ControlStore`` in a dict; a change runs without awaiting, so it is atomic."""

    def __init__(self) -> None:
        self._records: dict[DesktopKey, DesktopControl] = {}
        self._approvals: dict[str, str] = {}

    async def read_many(self, keys: Sequence[DesktopKey]) -> list[DesktopControl]:
        return [self._records.get(key, EMPTY) for key in keys]

    async def change(self, key: DesktopKey, change: Change[T]) -> T:
        record, result = change(self._records.get(key, EMPTY))
        if record.is_empty():
            self._records.pop(key, None)
        else:
            self._records[key] = record
        return result

    async def forget(self, key: DesktopKey) -> None:
        self._records.pop(key, None)

    async def announce_stop(self, stop: dict[str, Any]) -> None:
        return None  # one process: Stop already reached every request in flight

    async def stops(self) -> AsyncIterator[dict[str, Any]]:
        await asyncio.Event().wait()  # no other replica to hear from
        yield {}

    async def approvals(self) -> list[str]:
        return list(self._approvals.values())

    async def put_approval(self, approval_id: str, record: str, if_state: str | None) -> bool:
        kept = self._approvals.get(approval_id)
        if if_state is not None and (kept is None or json.loads(kept)["state"] != if_state):
            return False
        self._approvals[approval_id] = record
        return True

    async def drop_approvals(self, approval_ids: Sequence[str]) -> None:
        for approval_id in approval_ids:
            self._approvals.pop(approval_id, None)

    def __len__(self) -> int:
        return len(self._records)

    async def close(self) -> None:
        self._records.clear()
        self._approvals.clear()
