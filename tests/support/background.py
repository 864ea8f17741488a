"""An in-process server on its own event loop in a background thread, so hypothesis can drive
it with a plain (blocking) client; and the ERROR records it logs meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

from tests.support.processes import scaled

T = TypeVar("T")


class ErrorRecords(logging.Handler):
    """Collects ERROR records and tracebacks from every logger while it is installed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.records.append(record)


@contextlib.contextmanager
def error_records() -> Iterator[ErrorRecords]:
    """An :class:`ErrorRecords` on the root logger for the block."""
    errors = ErrorRecords()
    logging.getLogger().addHandler(errors)
    try:
        yield errors
    finally:
        logging.getLogger().removeHandler(errors)


@contextlib.contextmanager
def in_background_thread(
    serve: Callable[[], AbstractAsyncContextManager[T]], start_timeout_s: float = 60
) -> Iterator[T]:
    """What ``serve()`` yields, entered on a new event loop in a daemon thread; left on exit."""
    ready = threading.Event()
    started: list[T] = []
    stop: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    async def main() -> None:
        stop.append((asyncio.get_running_loop(), asyncio.Event()))
        try:
            async with serve() as value:
                started.append(value)
                ready.set()
                await stop[0][1].wait()
        finally:
            ready.set()  # a failed start ends the wait at once

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    try:
        assert ready.wait(scaled(start_timeout_s)) and started, "the server did not start"
        yield started[0]
    finally:
        if stop:
            loop, stopped = stop[0]
            loop.call_soon_threadsafe(stopped.set)
        thread.join(scaled(20))
