"""Shared helpers for benchmarks: percentiles, argument parsing, printing."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from relay.screen.service import ScreenService

T = TypeVar("T")


def percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def summary(name: str, samples_ms: Sequence[float]) -> str:
    p50, p99 = percentile(samples_ms, 0.5), percentile(samples_ms, 0.99)
    mean = statistics.fmean(samples_ms)
    return f"{name}: p50 {p50:.3f} ms  p99 {p99:.3f} ms  mean {mean:.3f} ms  n={len(samples_ms)}"


async def timed(work: Callable[[], Awaitable[T]]) -> tuple[float, T]:
    """How long ``work()`` took, in ms, and what it answered."""
    started = time.perf_counter()
    value = await work()
    return (time.perf_counter() - started) * 1000, value


def click_call(
    svc: ScreenService, display: str, args: dict[str, Any], guarded: bool
) -> Callable[[], Awaitable[Any]]:
    """A guarded click through the service, or the baseline: the same XTEST click in the same
    display worker with no guard step (the service itself refuses unguarded clicks)."""
    if guarded:
        return lambda: svc.run(display, "click", args)
    x, y = args["x"], args["y"]
    return lambda: svc.run_in_display(display, lambda ctx: ctx.input.click(x, y, 1, 1))


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a short smoke run (for the test suite)")
    return p


class HttpClient:
    """A minimal HTTP/1.1 client on one kept-alive loopback connection, for timing a server.

    It sends a request (``POST`` with a JSON body, or ``GET``) and reads the whole response
    (``Content-Length`` bodies only) and parses its JSON, and does nothing else, so a round trip
    measures the server rather than a client library (aiohttp's client added 0.1-1.0 ms per
    request at p50 on the screen tool's path, httpx ~1.5 ms).
    """

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"expected http://host:port, got {base_url!r}")
        self.host, self.port = parts.hostname, parts.port
        fixed = {"Host": f"{self.host}:{self.port}", "Content-Type": "application/json"}
        self._head = "".join(f"{k}: {v}\r\n" for k, v in {**fixed, **headers}.items())
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post_json(self, path: str, body: Any) -> tuple[int, Any]:
        """``(status, parsed JSON body)`` of ``POST path`` with ``body`` as JSON."""
        return await self._exchange("POST", path, json.dumps(body).encode())

    async def get_json(self, path: str) -> tuple[int, Any]:
        """``(status, parsed JSON body)`` of ``GET path``."""
        return await self._exchange("GET", path, None)

    async def _exchange(self, method: str, path: str, data: bytes | None) -> tuple[int, Any]:
        if self._reader is not None and self._reader.at_eof():
            await self.close()  # the server closed the idle connection (keep-alive timeout)
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        reader = self._reader
        assert reader is not None
        length = "" if data is None else f"Content-Length: {len(data)}\r\n"
        head = f"{method} {path} HTTP/1.1\r\n{self._head}{length}\r\n"
        self._writer.write(head.encode() + (data or b""))
        status_line, *header_lines = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        headers = dict(
            (name.strip().lower(), value.strip())
            for name, _, value in (line.partition(":") for line in header_lines if line)
        )
        if "content-length" not in headers:
            raise RuntimeError(f"response without Content-Length: {status_line}")
        payload = await reader.readexactly(int(headers["content-length"]))
        return int(status_line.split()[1]), json.loads(payload)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
            self._writer = self._reader = None
