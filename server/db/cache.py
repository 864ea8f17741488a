"""``ReadCache``: a short-lived, bounded memo of hot ``Store`` reads (tokens, roles, visibility).

Writes made through this process's ``Store`` clear the matching cache at once; with Redis,
writes made elsewhere (the ``relaydesk admin`` CLI, another server replica) clear it when their
notice arrives (``invalidation.py``). Otherwise, or when a notice is lost, they are seen within
``ttl_s`` (``READ_CACHE_TTL_S``, 2 s): the staleness bound of a revocation, a role change or a
share made outside this process. A read that raced a write is never stored: each
fill remembers the generation it started in, and a write bumps the generation.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Final, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

READ_CACHE_TTL_S: Final = 2.0
READ_CACHE_ENTRIES: Final = 4096


class ReadCache(Generic[K, V]):
    """At most ``max_entries`` values, each trusted for ``ttl_s`` seconds."""

    def __init__(
        self,
        ttl_s: float = READ_CACHE_TTL_S,
        max_entries: int = READ_CACHE_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self.generation = 0

    def get(self, key: K) -> tuple[bool, V | None]:
        """``(True, value)`` for a fresh entry, else ``(False, None)``."""
        entry = self._entries.get(key)
        if entry is None:
            return False, None
        if entry[0] <= self._clock():
            del self._entries[key]
            return False, None
        return True, entry[1]

    def put(self, key: K, value: V, generation: int) -> None:
        """Remember ``value`` unless a write happened since ``generation`` was read."""
        if generation != self.generation or self.ttl_s <= 0:
            return
        self._entries[key] = (self._clock() + self.ttl_s, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """A write through this process: forget everything, and refuse fills already running."""
        self.generation += 1
        self._entries.clear()
