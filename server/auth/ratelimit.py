"""Sliding-window limiter for failed logins, per client address.

Failures are counted per client address (``server.auth.addresses``: the connection's, or the
one a trusted proxy forwards), never per username: a lock per username would let anyone who
knows a name lock its owner out, and would refuse the right password. An address over its limit
is refused every attempt (429) until its oldest failure leaves the window; every other address,
and so the account's owner, signs in as usual. The windows live in this process
(:class:`SlidingWindow`) on one machine and in Redis (``server.auth.redis_windows``) when
replicas share it, so all replicas spend one budget.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Protocol

# Bounded memory: the least recently failing keys are forgotten first.
MAX_KEYS = 10_000


class Window(Protocol):
    """Recent events per key, counted against a limit."""

    limit: int

    async def add(self, key: str) -> None: ...

    async def retry_after(self, key: str) -> float | None:
        """Seconds until ``key`` is below its limit again, or None when it is now."""
        ...

    async def clear(self, key: str) -> None: ...


class SlidingWindow:
    """Timestamps of recent events per key (in this process), dropping those older than
    ``window_s``."""

    def __init__(self, limit: int, window_s: float, clock: Callable[[], float]) -> None:
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._events: OrderedDict[str, deque[float]] = OrderedDict()

    async def add(self, key: str) -> None:
        events = self._fresh(key)
        events.append(self._clock())
        self._events[key] = events
        self._events.move_to_end(key)
        while len(self._events) > MAX_KEYS:
            self._events.popitem(last=False)

    async def retry_after(self, key: str) -> float | None:
        """Seconds until ``key`` is below its limit again, or None when it is now."""
        events = self._fresh(key)
        if len(events) < self.limit:
            return None
        return max(0.0, events[-self.limit] + self.window_s - self._clock())

    async def clear(self, key: str) -> None:
        self._events.pop(key, None)

    def _fresh(self, key: str) -> deque[float]:
        events = self._events.get(key, deque())
        horizon = self._clock() - self.window_s
        while events and events[0] <= horizon:
            events.popleft()
        if not events:
            self._events.pop(key, None)
        return events


class LoginRateLimiter:
    """Refuses login attempts from an address after too many recent failures from it."""

    def __init__(self, addresses: Window) -> None:
        self._addresses = addresses

    @classmethod
    def in_process(
        cls, max_failures: int, window_s: float, *, clock: Callable[[], float] = time.monotonic
    ) -> LoginRateLimiter:
        """A window kept in this process (one server)."""
        return cls(SlidingWindow(max_failures, window_s, clock))

    async def retry_after(self, address: str) -> float | None:
        """Seconds ``address`` must wait before another attempt, or None when it may try now."""
        return await self._addresses.retry_after(address)

    async def record_failure(self, address: str) -> None:
        await self._addresses.add(address)
