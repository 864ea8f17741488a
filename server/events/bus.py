"""The event ``EventBus``: topics of ordered events with ids, a bounded history and live feeds.

Two implementations share this interface and the local fan-out below: ``InProcessEventBus`` (one
server process, the default) and ``RedisEventBus`` (Redis Streams, several server replicas). Which
one runs is decided in one place, :func:`create_event_bus`.

Event ids are Redis stream ids (``<ms>-<seq>``) on both buses, so they order the same way and
double as SSE ids. A feed replays what followed a client's ``Last-Event-ID`` from the bounded
history, then delivers live events, never one twice and never one out of order.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final, Protocol

log = logging.getLogger(__name__)

HISTORY_LENGTH: Final = 1000
FEED_QUEUE_LENGTH: Final = 512
# name -> "module:Class"; the Redis client is imported only when Redis is chosen.
BUSES: Final[dict[str, str]] = {
    "memory": "server.events.memory:InProcessEventBus",
    "redis": "server.events.redis:RedisEventBus",
}

EventId = tuple[int, int]


MAX_ID_PART: Final = 2**64 - 1  # Redis stream ids are two unsigned 64-bit numbers


def _id_part(text: str) -> int | None:
    # ASCII only: str.isdigit() also accepts other scripts' digits, which Redis would refuse.
    if not (text.isascii() and text.isdigit() and len(text) <= 20):
        return None
    value = int(text)
    return value if value <= MAX_ID_PART else None


def parse_event_id(text: str | None) -> EventId | None:
    """``"<ms>-<seq>"`` (each part a 64-bit unsigned number) as a comparable pair, or None."""
    if not text or len(text) > 64:
        return None
    ms, dash, seq = text.partition("-")
    ms_part, seq_part = _id_part(ms), _id_part(seq) if dash else 0
    if ms_part is None or seq_part is None:
        return None
    return ms_part, seq_part


@dataclass(frozen=True)
class BusEvent:
    """One published event."""

    id: str
    topic: str
    event: str
    data: dict[str, Any]
    # Wire forms of this event (e.g. SSE bytes), built by the first subscriber that sends it.
    encodings: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    @property
    def key(self) -> EventId:
        return parse_event_id(self.id) or (0, 0)

    @cached_property
    def data_json(self) -> str:
        """``data`` as compact JSON, encoded once however many subscribers receive it."""
        return json.dumps(self.data, separators=(",", ":"))


@dataclass(eq=False)
class Feed:
    """One subscriber's view of a topic: a replay, then live events from a bounded queue.

    ``complete`` is False when the client's ``Last-Event-ID`` is no longer in the history (or
    was none): the replay cannot close the gap and the client needs a fresh snapshot.
    """

    topic: str
    after: EventId | None
    replay: list[BusEvent] = field(default_factory=list)
    complete: bool = False
    lagged: bool = False
    stopping: bool = False
    _queue: asyncio.Queue[BusEvent | None] = field(
        default_factory=lambda: asyncio.Queue(FEED_QUEUE_LENGTH)
    )

    def offer(self, event: BusEvent) -> None:
        """Queue a live event; a subscriber too slow to keep up is cut off (it may resume)."""
        if self.lagged:
            return
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.lagged = True
            log.warning("event subscriber on %s fell behind; closing its stream", self.topic)
            self._drop_one_and_end()

    def _drop_one_and_end(self) -> None:
        with suppress(asyncio.QueueEmpty):
            self._queue.get_nowait()
        self._queue.put_nowait(None)

    def end(self) -> None:
        with suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)

    def stop(self) -> None:
        """End the feed because the server stops (even when its queue is full)."""
        self.stopping = True
        self.end_now()

    def end_now(self) -> None:
        """End the feed after what its subscriber already has, even when its queue is full
        (the subscriber's access was revoked, or the server stops)."""
        with suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)
            return
        self._drop_one_and_end()

    async def next(self) -> BusEvent | None:
        """The next event newer than any delivered, or None when the feed has ended."""
        while True:
            event = await self._queue.get()
            if event is None:
                return None
            if self.after is None or event.key > self.after:
                self.after = event.key
                return event

    def skip_replayed(self) -> None:
        """Live events up to the newest replayed one were already delivered by the replay."""
        if self.replay:
            self.after = max(self.after or (0, 0), self.replay[-1].key)


class EventBus(Protocol):
    """Publish and subscribe to topics of events."""

    # This process's subscribers (counted for /metrics).
    fanout: Fanout

    async def publish(self, topic: str, event: str, data: dict[str, Any]) -> str:
        """Append an event to ``topic``; returns its id."""
        ...

    async def open_feed(self, topic: str, last_event_id: str | None) -> Feed:
        """Register a live feed on ``topic`` (before the replay is read, so nothing is lost)."""
        ...

    async def close_feed(self, feed: Feed) -> None:
        """Unregister the feed (a disconnected subscriber)."""
        ...

    async def forget(self, topic: str) -> None:
        """Drop the topic's history (a desktop's topic once the desktop ended)."""
        ...

    async def close(self) -> None:
        """End every feed and release connections."""
        ...


class Fanout:
    """The local subscribers of each topic in this process."""

    def __init__(self) -> None:
        self._feeds: dict[str, set[Feed]] = {}

    def add(self, feed: Feed) -> bool:
        """Register; True when it is the topic's first local feed."""
        feeds = self._feeds.setdefault(feed.topic, set())
        feeds.add(feed)
        return len(feeds) == 1

    def remove(self, feed: Feed) -> bool:
        """Unregister; True when the topic has no local feed left."""
        feeds = self._feeds.get(feed.topic)
        if feeds is None:
            return False
        feeds.discard(feed)
        if not feeds:
            del self._feeds[feed.topic]
            return True
        return False

    def deliver(self, event: BusEvent) -> None:
        for feed in list(self._feeds.get(event.topic, ())):
            feed.offer(event)

    def count(self, topic: str | None = None) -> int:
        if topic is not None:
            return len(self._feeds.get(topic, ()))
        return sum(len(feeds) for feeds in self._feeds.values())

    def end_all(self) -> None:
        for feeds in self._feeds.values():
            for feed in feeds:
                feed.end()
        self._feeds.clear()


def replay_after(history: Iterable[BusEvent], last: EventId | None) -> tuple[list[BusEvent], bool]:
    """Events after ``last`` and whether ``last`` itself is still in the history."""
    events = list(history)
    if last is None:
        return [], False
    found = any(event.key == last for event in events)
    return ([e for e in events if e.key > last], True) if found else ([], False)


def create_event_bus(redis_url: str, history: int = HISTORY_LENGTH) -> EventBus:
    """Redis Streams when ``redis_url`` is set, otherwise the in-process bus."""
    name = "redis" if redis_url else "memory"
    module_name, _, class_name = BUSES[name].partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    bus: EventBus = cls(redis_url, history) if name == "redis" else cls(history)
    return bus
