"""Readiness and health probes: an RFB banner through websockify's WebSocket."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable

import aiohttp

LOOPBACK = "127.0.0.1"
BANNER_LEN = 12
_BANNER_RE = re.compile(rb"^RFB 003\.[0-9]{3}\n$")
_POLL_MIN_S = 0.005
_POLL_MAX_S = 0.1
PROBE_ERRORS = (OSError, aiohttp.ClientError, TimeoutError)


class ProbeFailed(Exception):
    """A probe step failed; ``str()`` is the reason reported in status."""


async def rfb_banner_ws(session: aiohttp.ClientSession, port: int, timeout_s: float) -> bytes:
    """Open websockify's WebSocket and read x11vnc's protocol banner through it."""
    url = f"http://{LOOPBACK}:{port}/websockify"
    async with asyncio.timeout(timeout_s), session.ws_connect(url, protocols=("binary",)) as ws:
        data = b""
        while len(data) < BANNER_LEN:
            msg = await ws.receive()
            if msg.type != aiohttp.WSMsgType.BINARY:
                raise ProbeFailed(f"websocket gave {msg.type.name} before the RFB banner")
            data += msg.data
    if not _BANNER_RE.fullmatch(data[:BANNER_LEN]):
        raise ProbeFailed(f"not an RFB banner: {data[:BANNER_LEN]!r}")
    return data[:BANNER_LEN]


def describe(err: BaseException) -> str:
    if isinstance(err, TimeoutError):
        return "timed out"
    return str(err) or type(err).__name__


async def poll_until_ready(
    attempt: Callable[[], Awaitable[object]], deadline: float, alive: Callable[[], bool]
) -> None:
    """Retry ``attempt`` with growing pauses until it succeeds, ``alive()`` fails or time is up."""
    pause = _POLL_MIN_S
    while True:
        try:
            await attempt()
            return
        except (ProbeFailed, *PROBE_ERRORS) as err:
            last = err
        if not alive():
            raise ProbeFailed("a child exited before the desktop was ready")
        if time.monotonic() + pause > deadline:
            raise ProbeFailed(f"not ready in time ({describe(last)})")
        await asyncio.sleep(pause)
        pause = min(pause * 2, _POLL_MAX_S)
