"""``Activity``: when each desktop was last used through the relay.

Every op that acts on a desktop (a screen action, a screenshot, the accessibility, window,
clipboard, shell, file and browser tools, a launch, a channel it opens) notes its desktop when
it finds it, and again when it ends; an op still running keeps its desktop busy. The idle
pause reads it (relay/desktops/idle.py; docs/desktops.md, "Idle pause").
"""

from __future__ import annotations

import contextvars
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

# The desktops the op now being dispatched acts on (one list per op).
_ACTING: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "relaydesk_acting", default=None
)


class Activity:
    """The last use of each desktop (monotonic seconds) and the ops running on it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: dict[str, float] = {}
        self._busy: Counter[str] = Counter()

    @contextmanager
    def op(self) -> Iterator[None]:
        """Around one op: the desktops it acts on (:meth:`acting`) stay busy until it ends."""
        acting: list[str] = []
        token = _ACTING.set(acting)
        try:
            yield
        finally:
            _ACTING.reset(token)
            for session_id in acting:
                self._busy[session_id] -= 1
                if self._busy[session_id] <= 0:
                    del self._busy[session_id]
                self.touch(session_id)

    def acting(self, desktop_session_id: str) -> None:
        """The op being dispatched acts on this desktop."""
        self.touch(desktop_session_id)
        acting = _ACTING.get()
        if acting is not None and desktop_session_id not in acting:
            acting.append(desktop_session_id)
            self._busy[desktop_session_id] += 1

    def touch(self, desktop_session_id: str) -> None:
        """The desktop is in use now (an action, a viewer, a recording)."""
        self._last[desktop_session_id] = self._clock()

    def idle_s(self, desktop_session_id: str) -> float:
        """Seconds since the desktop was last used; 0 while an op runs on it. A desktop not
        seen before counts from now (a start, a re-adopted desktop)."""
        if self._busy[desktop_session_id] > 0:
            return 0.0
        now = self._clock()
        return now - self._last.setdefault(desktop_session_id, now)

    def keep_only(self, desktop_session_ids: Iterable[str]) -> None:
        """Forget desktops that are gone."""
        kept = set(desktop_session_ids) | set(self._busy)
        self._last = {k: v for k, v in self._last.items() if k in kept}
