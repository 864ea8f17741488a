"""A small Server-Sent Events reader for tests (httpx streaming, no extra dependency)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.processes import scaled


@dataclass
class SseEvent:
    event: str = "message"
    id: str | None = None
    data: Any = None
    comment: str | None = None


@dataclass
class SseStream:
    """Events of one open stream, collected in the background."""

    response: httpx.Response
    events: asyncio.Queue[SseEvent] = field(default_factory=asyncio.Queue)
    comments: list[str] = field(default_factory=list)

    async def next(self, timeout: float = 5.0, skip_comments: bool = True) -> SseEvent:
        async with asyncio.timeout(scaled(timeout)):
            return await self.events.get()

    def pending(self) -> list[SseEvent]:
        items = []
        while not self.events.empty():
            items.append(self.events.get_nowait())
        return items


async def _pump(stream: SseStream) -> None:
    current = SseEvent()
    data: list[str] = []
    async for line in stream.response.aiter_lines():
        if line == "":
            if data:
                text = "\n".join(data)
                with contextlib.suppress(ValueError):
                    current.data = json.loads(text)
                if current.data is None:
                    current.data = text
                await stream.events.put(current)
            current, data = SseEvent(), []
        elif line.startswith(":"):
            stream.comments.append(line[1:].strip())
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data.append(value)
            elif name == "event":
                current.event = value
            elif name == "id":
                current.id = value


@contextlib.asynccontextmanager
async def open_sse(
    client: httpx.AsyncClient, url: str, headers: dict[str, str] | None = None
) -> AsyncIterator[SseStream]:
    """Open ``url`` as an event stream; events arrive on ``stream.events``."""
    async with client.stream("GET", url, headers=headers, timeout=None) as response:
        stream = SseStream(response)
        if response.status_code != 200:
            await response.aread()
            yield stream
            return
        task = asyncio.create_task(_pump(stream))
        try:
            yield stream
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await task
