"""Sliding-window limiter for failed logins.

Failures are counted per username and per client address. An address gets a larger
allowance (``ADDRESS_FACTOR`` times) because many people may share one (NAT, a proxy);
a username's limit protects that one account wherever the guesses come from. The windows
live in this process (:class:`SlidingWindow`) on one machine and in Redis
(``server.auth.redis_windows``) when replicas share it, so all replicas spend one budget.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Protocol

ADDRESS_FACTOR = 5
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
    """Refuses login attempts after too many recent failures for a user or an address."""

    def __init__(self, users: Window, addresses: Window) -> None:
        self._users = users
        self._addresses = addresses

    @classmethod
    def in_process(
        cls, max_failures: int, window_s: float, *, clock: Callable[[], float] = time.monotonic
    ) -> LoginRateLimiter:
        """Windows kept in this process (one server)."""
        return cls(
            SlidingWindow(max_failures, window_s, clock),
            SlidingWindow(max_failures * ADDRESS_FACTOR, window_s, clock),
        )

    async def retry_after(self, username: str, address: str) -> float | None:
        """Seconds to wait before another attempt, or None when one is allowed now."""
        waits = [
            wait
            for wait in (
                await self._users.retry_after(_user_key(username)),
                await self._addresses.retry_after(address),
            )
            if wait is not None
        ]
        return max(waits) if waits else None

    async def address_retry_after(self, address: str) -> float | None:
        """The address's wait alone: checked before a login body is even read."""
        return await self._addresses.retry_after(address)

    async def record_failure(self, username: str, address: str) -> None:
        await self._users.add(_user_key(username))
        await self._addresses.add(address)

    async def record_success(self, username: str) -> None:
        """A correct password clears that user's failures (not the address's)."""
        await self._users.clear(_user_key(username))


def _user_key(username: str) -> str:
    return username.strip().lower()
