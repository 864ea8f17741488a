"""``ControlStore``: where the control record of each desktop lives, changed atomically.

Two implementations behind one interface, chosen in one place (:func:`create_control_store`):
``MemoryControlStore`` (one server process, the default) and ``RedisControlStore``
(``RELAYDESK_REDIS_URL``: several replicas, so a person's input seen by one replica refuses an
agent whose request arrives at another). Every change is a pure function of the record
(``server.control.model``) applied under the store's atomicity: no await inside it in memory,
a ``WATCH``/``MULTI`` transaction in Redis.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final, Protocol, TypeVar

from server.control.model import DesktopControl, DesktopKey

T = TypeVar("T")
Change = Callable[[DesktopControl], tuple[DesktopControl, T]]

# name -> "module:Class"; the Redis client is imported only when Redis is chosen.
STORES: Final[dict[str, str]] = {
    "memory": "server.control.memory:MemoryControlStore",
    "redis": "server.control.redis:RedisControlStore",
}


class ControlStore(Protocol):
    """Read and atomically change the control records of desktops."""

    async def read_many(self, keys: Sequence[DesktopKey]) -> list[DesktopControl]:
        """The records of ``keys``, in order (an unknown desktop's is empty)."""
        ...

    async def change(self, key: DesktopKey, change: Change[T]) -> T:
        """Apply ``change`` to the desktop's record atomically; returns what it returned."""
        ...

    async def forget(self, key: DesktopKey) -> None:
        """Drop the record of a desktop that ended."""
        ...

    async def announce_stop(self, stop: dict[str, Any]) -> None:
        """Tell the other server replicas that a person pressed Stop (see ``stops``)."""
        ...

    def stops(self) -> AsyncIterator[dict[str, Any]]:
        """Stops announced by any replica, as they come (never ends in one process)."""
        ...

    async def approvals(self) -> list[str]:
        """Every safety-check request kept (``server.control.approvals``), as kept: JSON
        objects with their ``approval_id`` and ``state``."""
        ...

    async def put_approval(self, approval_id: str, record: str, if_state: str | None) -> bool:
        """Keep a request; ``if_state``: only when the kept one is in that state (a decision
        is made once, whichever replica it reaches). Whether it was kept."""
        ...

    async def drop_approvals(self, approval_ids: Sequence[str]) -> None:
        """Forget these requests."""
        ...

    async def close(self) -> None: ...


def create_control_store(redis_url: str) -> ControlStore:
    """Redis when ``redis_url`` is set, otherwise this process's memory."""
    name = "redis" if redis_url else "memory"
    module_name, _, class_name = STORES[name].partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    store: ControlStore = cls(redis_url) if name == "redis" else cls()
    return store
