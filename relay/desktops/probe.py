"""End-to-end readiness and health probes: the RFB banner (direct and through websockify's
WebSocket) and websockify's HTTP service of the noVNC page."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp

from wire.errors import ErrorCode, RelaydeskError

T = TypeVar("T")
LOOPBACK = "127.0.0.1"
BANNER_LEN = 12
_BANNER_RE = re.compile(rb"^RFB 003\.[0-9]{3}\n$")
_POLL_MIN_S = 0.005
_POLL_MAX_S = 0.1
# What a probe step raises when the thing probed is not (yet) there.
PROBE_ERRORS = (OSError, aiohttp.ClientError, TimeoutError)


class ProbeFailed(RelaydeskError):
    """One probe step failed; ``str()`` is the reason reported to the server."""

    code = ErrorCode.UNAVAILABLE

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def check_banner(data: bytes) -> bytes:
    if not _BANNER_RE.fullmatch(data):
        raise ProbeFailed(f"not an RFB banner: {data[:BANNER_LEN]!r}")
    return data


def probe_session(current: aiohttp.ClientSession | None) -> aiohttp.ClientSession:
    """``current`` while it is open, else a new session for the probes.

    No keep-alive (websockify forks a worker per connection) and no proxy from the environment
    (every probe goes to loopback).
    """
    if current is not None and not current.closed:
        return current
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True), trust_env=False)


async def rfb_banner_tcp(port: int, timeout_s: float) -> bytes:
    """Connect to a VNC server and read its protocol banner."""
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_connection(LOOPBACK, port)
        try:
            return check_banner(await reader.readexactly(BANNER_LEN))
        finally:
            writer.close()


async def vnc_html_status(session: aiohttp.ClientSession, port: int, timeout_s: float) -> None:
    """``GET /vnc.html`` on websockify must answer 200."""
    async with (
        asyncio.timeout(timeout_s),
        session.get(f"http://{LOOPBACK}:{port}/vnc.html", allow_redirects=False) as resp,
    ):
        await resp.read()
        if resp.status != 200:
            raise ProbeFailed(f"vnc.html answered HTTP {resp.status}")


async def rfb_banner_ws(session: aiohttp.ClientSession, port: int, timeout_s: float) -> bytes:
    """Open websockify's WebSocket (binary subprotocol) and read the RFB banner through it."""
    url = f"http://{LOOPBACK}:{port}/websockify"
    async with asyncio.timeout(timeout_s), session.ws_connect(url, protocols=("binary",)) as ws:
        data = b""
        while len(data) < BANNER_LEN:
            msg = await ws.receive()
            if msg.type != aiohttp.WSMsgType.BINARY:
                raise ProbeFailed(f"websocket gave {msg.type.name} before the RFB banner")
            data += msg.data
        return check_banner(data[:BANNER_LEN])


@dataclass
class ProbeResult:
    """Outcome of one end-to-end probe."""

    ok: bool
    reason: str | None = None
    checks: dict[str, bool] = field(default_factory=dict)
    elapsed_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "checks": dict(self.checks),
            "elapsed_ms": round(self.elapsed_ms, 1),
        }


async def probe_chain(
    session: aiohttp.ClientSession, websockify_port: int, timeout_s: float
) -> ProbeResult:
    """HTTP ``vnc.html`` then an RFB banner through websockify; stops at the first failure."""
    started = time.monotonic()
    result = ProbeResult(ok=True)
    steps = (("http_vnc_html", vnc_html_status), ("rfb_via_websockify", rfb_banner_ws))
    for name, step in steps:
        try:
            await step(session, websockify_port, timeout_s)
            result.checks[name] = True
        except (ProbeFailed, *PROBE_ERRORS) as err:
            result.checks[name] = False
            result.ok = False
            result.reason = f"{name}: {describe(err)}"
            break
    result.elapsed_ms = (time.monotonic() - started) * 1000
    return result


def describe(err: BaseException) -> str:
    """A probe failure as the short reason reported in status."""
    if isinstance(err, TimeoutError):
        return "timed out"
    return str(err) or type(err).__name__


async def poll_until_ready(
    attempt: Callable[[], Awaitable[T]],
    deadline: float,
    what: str,
    alive: Callable[[], bool] | None = None,
) -> T:
    """Retry the probe ``attempt()`` with growing pauses until it succeeds or ``deadline``.

    ``alive()`` (optional) ends the wait early when the process being probed has exited.
    """
    pause = _POLL_MIN_S
    while True:
        last: BaseException
        try:
            return await attempt()
        except (ProbeFailed, *PROBE_ERRORS) as err:
            last = err
        if alive is not None and not alive():
            raise ProbeFailed(f"{what} exited before it was ready")
        if time.monotonic() + pause > deadline:
            raise ProbeFailed(f"{what} not ready in time ({describe(last)})")
        await asyncio.sleep(pause)
        pause = min(pause * 2, _POLL_MAX_S)
