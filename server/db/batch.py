"""``Coalescer``: concurrent single-item calls served by one batched call (group commit).

A burst of relays connecting at once asks the store the same small questions a thousand times
(whose token is this, record this presence). Every transaction costs several round trips to the
database thread, and SQLite has one pooled connection, so those round trips queue. A coalescer
lets the first caller start a batch; callers arriving while it runs wait for the next one,
which takes all of them at once. A lone caller still gets its own batch of one right away.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

MAX_BATCH: Final = 500

BatchCall = Callable[[list[T]], Awaitable[Sequence[R]]]


class Coalescer(Generic[T, R]):
    """Runs ``call(items) -> results`` (one result per item, same order) for waiting callers."""

    def __init__(self, call: BatchCall[T, R], max_batch: int = MAX_BATCH) -> None:
        self._call = call
        self._max_batch = max_batch
        self._waiting: list[tuple[T, asyncio.Future[R]]] = []
        self._runner: asyncio.Task[None] | None = None

    async def submit(self, item: T) -> R:
        """``item``'s result, computed in the next batch (raises what the batch raised)."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if self._runner is None:
            self._runner = asyncio.create_task(self._run(), name="store-coalescer")
        return await future

    async def _run(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[: self._max_batch]
                del self._waiting[: self._max_batch]
                await self._one(batch)
        finally:
            self._runner = None

    async def _one(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self._call([item for item, _ in batch])
        except Exception as err:  # every waiter hears about the failure of its batch
            for _, future in batch:
                if not future.done():
                    future.set_exception(err)
            return
        except BaseException:
            for _, future in batch:
                future.cancel()
            raise
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)

    async def drain(self) -> None:
        """Wait until every submitted item is done (used before closing the store)."""
        while self._runner is not None:
            await asyncio.wait({self._runner})
