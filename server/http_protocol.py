"""uvicorn's HTTP protocol with a time limit on every request head and a cap per address.

uvicorn times only the silence between two requests on a kept-alive connection: a client that
sends half a request line, or trickles its headers, holds the connection (and a file
descriptor) for as long as it likes, before any credential is asked for. Here:

- a request's head (request line and headers) must arrive within ``header_timeout_s`` of the
  connection opening, or of the first byte of the next request on a kept-alive connection;
  otherwise the server answers ``408`` and closes;
- at most ``max_pending_per_address`` connections from one client address may be sending
  a head at once; one more new connection is answered ``429`` and closed at once.

Both answers carry the server's one error body. The hooks are the parser callbacks httptools
calls on its protocol (``on_message_begin``, ``on_headers_complete``); everything else —
parsing, the application cycle, keep-alive, the WebSocket upgrade — is uvicorn's own code.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from typing import Any, ClassVar, Final

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from wire.errors import ErrorCode

log = logging.getLogger(__name__)

HEADER_TIMEOUT_SETTING: Final = "RELAYDESK_HEADER_TIMEOUT_S"
PENDING_SETTING: Final = "RELAYDESK_MAX_PENDING_REQUESTS_PER_ADDRESS"
_REASONS: Final = {408: b"Request Timeout", 429: b"Too Many Requests"}


def error_answer(status: int, code: ErrorCode, message: str) -> bytes:
    """A complete ``Connection: close`` HTTP answer with the server's error body."""
    body = json.dumps({"ok": False, "error": {"code": code.value, "message": message}}).encode()
    head = (
        b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])
        + b"content-type: application/json\r\n"
        + b"content-length: %d\r\n" % len(body)
        + b"cache-control: no-store\r\nconnection: close\r\n\r\n"
    )
    return head + body


class GuardedHttpProtocol(HttpToolsProtocol):
    """``http=`` for uvicorn: see the module docstring (configured by :func:`guarded_http`)."""

    header_timeout_s: ClassVar[float] = 10.0
    max_pending_per_address: ClassVar[int] = 256
    # Connections sending a head now, per client address (one counter per configured class).
    pending: ClassVar[Counter[str]] = Counter()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._pending_address: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._begin_head(may_refuse=True)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._pending_address is None:  # the next request on a kept-alive connection
            self._begin_head(may_refuse=False)

    def on_headers_complete(self) -> None:
        self._end_head()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_head()
        super().connection_lost(exc)

    def _begin_head(self, *, may_refuse: bool) -> None:
        """Time the head now arriving and count it; a new connection over the cap is refused
        before anything is read (a kept-alive one is only timed: it is mid-parse)."""
        address = self.client[0] if self.client else ""
        cap = self.max_pending_per_address
        if may_refuse and 0 < cap <= self.pending[address]:
            log.warning("refused a connection from %s: %d sending a request already", address, cap)
            message = (
                f"too many connections from this address still sending their request: at most "
                f"{cap} at once ({PENDING_SETTING}); retry in a moment"
            )
            self._answer_and_close(error_answer(429, ErrorCode.LIMIT_REACHED, message))
            return
        self.pending[address] += 1
        self._pending_address = address
        if self.header_timeout_s > 0:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _end_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        address, self._pending_address = self._pending_address, None
        if address is not None:
            self.pending[address] -= 1
            if self.pending[address] <= 0:
                del self.pending[address]

    def _head_timed_out(self) -> None:
        self._head_timer = None
        self._end_head()
        peer = self.client[0] if self.client else "?"
        log.info(
            "closed a connection from %s: no request head within %g s", peer, self.header_timeout_s
        )
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            self.transport.close()  # a pipelined head: an answer is being sent, just close
            return
        message = (
            f"the request's line and headers did not arrive within {self.header_timeout_s:g} s "
            f"({HEADER_TIMEOUT_SETTING})"
        )
        self._answer_and_close(error_answer(408, ErrorCode.TIMEOUT, message))

    def _answer_and_close(self, answer: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(answer)
            self.transport.close()


def guarded_http(header_timeout_s: float, max_pending_per_address: int) -> type[HttpToolsProtocol]:
    """The protocol class for one server, with its own settings and counter."""

    class Configured(GuardedHttpProtocol):
        pass

    Configured.header_timeout_s = header_timeout_s
    Configured.max_pending_per_address = max_pending_per_address
    Configured.pending = Counter()
    return Configured
