"""``RedisBus``: topics as Redis Streams, so events reach subscribers on every server replica.

Each topic with local subscribers has one reader task (``XREAD BLOCK``) that fans events out to
this process's feeds; publishing is one ``XADD`` with an approximate ``MAXLEN`` (the bounded
history). Stream ids are the event ids.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Final

import redis.asyncio as redis
from redis.exceptions import RedisError

from server.events.bus import HISTORY_LENGTH, BusEvent, Fanout, Feed, parse_event_id, replay_after
from wire.errors import ErrorCode, OpError

log = logging.getLogger(__name__)

KEY_PREFIX: Final = "relaydesk:events:"
BLOCK_MS: Final = 2000
# The client's default 5 s socket timeout must outlast a blocking read.
SOCKET_TIMEOUT_S: Final = 10.0
STOP_GRACE_S: Final = 0.5
RETRY_S: Final = 1.0


def _key(topic: str) -> str:
    return KEY_PREFIX + topic


def _event(topic: str, entry_id: Any, fields: dict[Any, Any]) -> BusEvent:
    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    decoded = {text(k): text(v) for k, v in fields.items()}
    return BusEvent(text(entry_id), topic, decoded.get("event", ""), json.loads(decoded["data"]))


class RedisBus:
    """A ``Bus`` on Redis Streams (``RELAYDESK_REDIS_URL``)."""

    def __init__(self, url: str, history: int = HISTORY_LENGTH) -> None:
        self._url = url
        self._redis = self._client()
        self._length = history
        self.fanout = Fanout()
        self._readers: dict[str, _Reader] = {}

    def _client(self) -> redis.Redis:
        return redis.Redis.from_url(
            self._url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S
        )

    async def publish(self, topic: str, event: str, data: dict[str, Any]) -> str:
        fields: dict[Any, Any] = {"event": event, "data": json.dumps(data, separators=(",", ":"))}
        try:
            entry_id = await self._redis.xadd(
                _key(topic), fields, maxlen=self._length, approximate=True
            )
        except RedisError as err:
            raise OpError(ErrorCode.UNAVAILABLE, "event bus is not reachable") from err
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    async def open_feed(self, topic: str, last_event_id: str | None) -> Feed:
        tail = await self._tail(topic)
        feed = Feed(topic, after=parse_event_id(tail))
        if self.fanout.add(feed):
            self._readers[topic] = _Reader(self._client(), topic, tail, self.fanout)
        last = parse_event_id(last_event_id)
        if last is not None:
            history = await self._range(topic, last_event_id or "-", tail)
            feed.replay, feed.complete = replay_after(history, last)
            feed.skip_replayed()
        return feed

    async def close_feed(self, feed: Feed) -> None:
        if self.fanout.remove(feed):
            await self._stop_reader(feed.topic)

    async def close(self) -> None:
        self.fanout.end_all()
        for topic in list(self._readers):
            await self._stop_reader(topic)
        await self._redis.aclose()

    async def _tail(self, topic: str) -> str:
        """The id of the topic's newest event (``0-0`` when it has none)."""
        try:
            newest = await self._redis.xrevrange(_key(topic), count=1)
        except RedisError as err:
            raise OpError(ErrorCode.UNAVAILABLE, "event bus is not reachable") from err
        entries: list[Any] = list(newest or ())
        return _event(topic, entries[0][0], entries[0][1]).id if entries else "0-0"

    async def _range(self, topic: str, start: str, end: str) -> list[BusEvent]:
        entries: list[Any] = list(await self._redis.xrange(_key(topic), min=start, max=end) or ())
        return [_event(topic, entry_id, fields) for entry_id, fields in entries]

    async def _stop_reader(self, topic: str) -> None:
        reader = self._readers.pop(topic, None)
        if reader is not None:
            await reader.stop()


class _Reader:
    """One topic's ``XREAD BLOCK`` loop on its own connection, fanning out to local feeds."""

    def __init__(self, client: redis.Redis, topic: str, cursor: str, fanout: Fanout) -> None:
        self._client = client
        self._topic = topic
        self._fanout = fanout
        self._stopping = False
        self._task = asyncio.create_task(self._read(cursor), name=f"bus-reader-{topic}")

    async def stop(self) -> None:
        """Cancel the read; closing the connection ends a read that ignores the cancel."""
        self._stopping = True
        self._task.cancel()
        _done, pending = await asyncio.wait({self._task}, timeout=STOP_GRACE_S)
        await self._client.aclose()
        if pending:
            await asyncio.wait(pending, timeout=SOCKET_TIMEOUT_S)

    async def _read(self, cursor: str) -> None:
        """Deliver every event after ``cursor`` to the local feeds, until stopped."""
        key = _key(self._topic)
        while not self._stopping:
            try:
                answer: Any = await self._client.xread({key: cursor}, block=BLOCK_MS, count=500)
            except RedisError:
                if self._stopping:
                    return
                log.warning("event bus read on %s failed; retrying", self._topic, exc_info=True)
                await asyncio.sleep(RETRY_S)
                continue
            for _stream, entries in answer or ():
                for entry_id, fields in entries:
                    event = _event(self._topic, entry_id, fields)
                    cursor = event.id
                    self._fanout.deliver(event)
