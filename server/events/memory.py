"""``InProcessEventBus``: topics in this process's memory (one server process, no extra service)."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from server.events.bus import HISTORY_LENGTH, BusEvent, Fanout, Feed, parse_event_id, replay_after


class InProcessEventBus:
    """A ``EventBus`` whose ids are ``<process start ms>-<seq>``, so a restart is noticed."""

    def __init__(self, history: int = HISTORY_LENGTH) -> None:
        self._epoch = int(time.time() * 1000)
        self._seq = 0
        self._history: dict[str, deque[BusEvent]] = {}
        self._length = history
        self.fanout = Fanout()

    def _next_id(self) -> str:
        self._seq += 1
        return f"{self._epoch}-{self._seq}"

    async def publish(self, topic: str, event: str, data: dict[str, Any]) -> str:
        item = BusEvent(self._next_id(), topic, event, data)
        self._history.setdefault(topic, deque(maxlen=self._length)).append(item)
        self.fanout.deliver(item)
        return item.id

    async def open_feed(self, topic: str, last_event_id: str | None) -> Feed:
        last = parse_event_id(last_event_id)
        feed = Feed(topic, after=(self._epoch, self._seq))
        replay, complete = replay_after(self._history.get(topic, ()), last)
        feed.replay, feed.complete = replay, complete
        self.fanout.add(feed)
        return feed

    async def close_feed(self, feed: Feed) -> None:
        self.fanout.remove(feed)

    async def forget(self, topic: str) -> None:
        self._history.pop(topic, None)

    async def close(self) -> None:
        self.fanout.end_all()
