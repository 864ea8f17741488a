"""``RedisEventBus``: topics as Redis Streams, so events reach subscribers on every server replica.

Each topic with local subscribers has one reader task (``XREAD BLOCK``, on its own connection)
that fans events out to this process's feeds; publishing is one ``XADD`` with an approximate
``MAXLEN`` (the bounded history). Stream ids are the event ids.

Opening a feed costs Redis nothing once its topic's reader runs: the reader reads the stream's
tail once when it starts (every feed opening meanwhile waits for that one read), and only a
``Last-Event-ID`` replay reads the history. Commands share a bounded, blocking connection pool,
so a burst of subscribers queues for a connection instead of failing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Final

import redis.asyncio as redis
from redis.exceptions import RedisError

from server.events.bus import HISTORY_LENGTH, BusEvent, Fanout, Feed, parse_event_id, replay_after
from server.instruments import redis_error
from wire.errors import ErrorCode, OpError

log = logging.getLogger(__name__)

KEY_PREFIX: Final = "relaydesk:events:"
BLOCK_MS: Final = 2000
# The client's default 5 s socket timeout must outlast a blocking read.
SOCKET_TIMEOUT_S: Final = 10.0
# Connections shared by publishing and replays; more callers wait (at most POOL_WAIT_S) for one.
POOL_SIZE: Final = 32
POOL_WAIT_S: Final = 10.0
STOP_GRACE_S: Final = 0.5
RETRY_S: Final = 1.0


def _key(topic: str) -> str:
    return KEY_PREFIX + topic


def _unreachable() -> OpError:
    redis_error("events")
    return OpError(ErrorCode.UNAVAILABLE, "event bus is not reachable")


def _event(topic: str, entry_id: Any, fields: dict[Any, Any]) -> BusEvent:
    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    decoded = {text(k): text(v) for k, v in fields.items()}
    return BusEvent(text(entry_id), topic, decoded.get("event", ""), json.loads(decoded["data"]))


class RedisEventBus:
    """A ``EventBus`` on Redis Streams (``RELAYDESK_REDIS_URL``)."""

    def __init__(self, url: str, history: int = HISTORY_LENGTH) -> None:
        self._url = url
        pool = redis.BlockingConnectionPool.from_url(
            url,
            max_connections=POOL_SIZE,
            timeout=POOL_WAIT_S,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
        )
        self._redis = redis.Redis.from_pool(pool)
        self._length = history
        self.fanout = Fanout()
        self._readers: dict[str, _Reader] = {}

    async def publish(self, topic: str, event: str, data: dict[str, Any]) -> str:
        fields: dict[Any, Any] = {"event": event, "data": json.dumps(data, separators=(",", ":"))}
        try:
            entry_id = await self._redis.xadd(
                _key(topic), fields, maxlen=self._length, approximate=True
            )
        except RedisError as err:
            raise _unreachable() from err
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    async def open_feed(self, topic: str, last_event_id: str | None) -> Feed:
        # Registered first: the reader delivers whatever follows its start, and a replay read
        # afterwards reaches past anything already queued (``skip_replayed`` drops the overlap).
        feed = Feed(topic, after=None)
        self.fanout.add(feed)
        try:
            await self._reader(topic).started()
            last = parse_event_id(last_event_id)
            if last is not None:
                feed.replay, feed.complete = replay_after(await self._since(topic, last), last)
                feed.skip_replayed()
        except BaseException:
            await self.close_feed(feed)
            raise
        return feed

    async def close_feed(self, feed: Feed) -> None:
        if self.fanout.remove(feed):
            await self._stop_reader(feed.topic)

    async def forget(self, topic: str) -> None:
        try:
            await self._redis.delete(_key(topic))
        except RedisError as err:
            raise _unreachable() from err

    async def close(self) -> None:
        self.fanout.end_all()
        for topic in list(self._readers):
            await self._stop_reader(topic)
        await self._redis.aclose()

    def _reader(self, topic: str) -> _Reader:
        """The topic's reader, started now when it has none (or its start failed)."""
        reader = self._readers.get(topic)
        if reader is None or reader.failed:
            client = redis.Redis.from_url(
                self._url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S
            )
            reader = self._readers[topic] = _Reader(client, topic, self.fanout)
        return reader

    async def _since(self, topic: str, last: tuple[int, int]) -> list[BusEvent]:
        """The history from ``last`` (inclusive) to the newest event."""
        try:
            entries: Any = await self._redis.xrange(_key(topic), min=f"{last[0]}-{last[1]}")
        except RedisError as err:
            raise _unreachable() from err
        return [_event(topic, entry_id, fields) for entry_id, fields in entries or ()]

    async def _stop_reader(self, topic: str) -> None:
        reader = self._readers.pop(topic, None)
        if reader is not None:
            await reader.stop()


class _Reader:
    """One topic's ``XREAD BLOCK`` loop on its own connection, fanning out to local feeds.

    It starts from the stream's tail at the time it starts; ``started()`` waits for that.
    """

    def __init__(self, client: redis.Redis, topic: str, fanout: Fanout) -> None:
        self._client = client
        self._topic = topic
        self._fanout = fanout
        self._stopping = False
        self._ready = asyncio.Event()
        self._error: RedisError | None = None
        self._task = asyncio.create_task(self._run(), name=f"bus-reader-{topic}")

    @property
    def failed(self) -> bool:
        return self._error is not None

    async def started(self) -> None:
        """Wait until the reader knows where to start; ``OpError`` when Redis did not answer."""
        await self._ready.wait()
        if self._error is not None or self._stopping:
            raise _unreachable() from self._error

    async def stop(self) -> None:
        """Cancel the read; closing the connection ends a read that ignores the cancel."""
        self._stopping = True
        self._task.cancel()
        _done, pending = await asyncio.wait({self._task}, timeout=STOP_GRACE_S)
        await self._client.aclose()
        if pending:
            await asyncio.wait(pending, timeout=SOCKET_TIMEOUT_S)

    async def _run(self) -> None:
        try:
            cursor = await self._tail()
        except RedisError as err:
            redis_error("events")
            await self._client.aclose()
            self._error = err  # only now: a failed reader is replaced without being awaited
            return
        finally:
            self._ready.set()
        await self._read(cursor)

    async def _tail(self) -> str:
        """The id of the topic's newest event (``0-0`` when it has none)."""
        newest: Any = await self._client.xrevrange(_key(self._topic), count=1)
        entries: list[Any] = list(newest or ())
        return _event(self._topic, entries[0][0], entries[0][1]).id if entries else "0-0"

    async def _read(self, cursor: str) -> None:
        """Deliver every event after ``cursor`` to the local feeds, until stopped."""
        key = _key(self._topic)
        while not self._stopping:
            try:
                answer: Any = await self._client.xread({key: cursor}, block=BLOCK_MS, count=500)
            except RedisError:
                if self._stopping:
                    return
                redis_error("events")
                log.warning("event bus read on %s failed; retrying", self._topic, exc_info=True)
                await asyncio.sleep(RETRY_S)
                continue
            for _stream, entries in answer or ():
                for entry_id, fields in entries:
                    event = _event(self._topic, entry_id, fields)
                    cursor = event.id
                    self._fanout.deliver(event)
