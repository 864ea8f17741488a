"""One agent's CDP connection to the desktop's browser, carried on a ``cdp`` channel
(docs/browser.md, "The CDP endpoint").

The browser's DevTools pipe is one connection, shared with the relay's browser tools, so each
agent gets a browser session of its own on it (``Target.attachToBrowserTarget``): its target
discovery, auto-attach and domains are its own, as on a connection of its own. Messages on the
channel are the pipe's framing (JSON, each ended by a NUL byte). The client's ids are mapped to
the pipe's and back; a message without a ``sessionId`` goes to the client's browser session,
one with a session the client attached goes as it is, and only the events of the client's
sessions come back.

What leaves for the server waits in a bounded buffer (:data:`MAX_PENDING`): the shared pipe
cannot be paused for one slow client, so a client that stops reading is cut off instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from pathlib import Path
from typing import Any, Final

import orjson

from relay.browser.cdp import CdpConnection, CdpError
from relay.channels import Chunk
from relay.wsframes import HEADROOM
from wire import browser as rules
from wire import cdp_methods, jsontext
from wire.errors import ChannelCloseCode, OpError
from wire.frames import Payload

logger = logging.getLogger(__name__)

NUL: Final = b"\0"
# Bytes waiting for the server beyond this cut the client off.
MAX_PENDING: Final = 64 * 1024 * 1024
SCRIPT_OFF: Final = (
    f"forbidden: script in the page is off on this relay (start it with {rules.EVALUATE_ENV}=1)"
)
LAST_TAB: Final = "forbidden: the browser's last tab stays open (the person watches it)"


class CdpClientStream:
    """A channel's byte stream to one client's browser session on the shared pipe."""

    def __init__(self, cdp: CdpConnection, root: str, script: bool, downloads: Path) -> None:
        self._cdp = cdp
        self._downloads = downloads
        self._root = root
        self._sessions = {root}
        self._script = script
        self._inbox = bytearray()
        self._out: deque[Chunk] = deque()
        self._pending = 0
        self._readable = asyncio.Event()
        self.ended: tuple[ChannelCloseCode, str] | None = None
        self._untap = cdp.tap(self._event)

    @classmethod
    async def open(cls, cdp: CdpConnection, script: bool, downloads: Path) -> CdpClientStream:
        """A new browser session on ``cdp`` for one client; downloads stay in ``downloads``."""
        answer = await cdp.call("Target.attachToBrowserTarget")
        return cls(cdp, str(answer["sessionId"]), script, downloads)

    # -- to the client ---------------------------------------------------------------------
    def _deliver(self, message: dict[str, Any]) -> None:
        data = jsontext.dumps(message)
        chunk = bytearray(HEADROOM + len(data) + 1)
        chunk[HEADROOM:-1] = data
        self._out.append(chunk)
        self._pending += len(data) + 1
        self._readable.set()
        if self._pending > MAX_PENDING:
            self._end(ChannelCloseCode.ERROR, "the CDP client is not reading its messages")

    def _end(self, code: ChannelCloseCode, reason: str) -> None:
        if self.ended is None:
            self.ended = (code, reason)
        self._out.clear()
        self._readable.set()

    def _event(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        session = message.get("sessionId")
        if method == "Inspector.detached" and session is None:
            self._end(ChannelCloseCode.TARGET_CLOSED, "the browser has closed")
            return
        if session not in self._sessions:
            return
        params = message.get("params")
        child = params.get("sessionId") if isinstance(params, dict) else None
        if method == "Target.attachedToTarget" and isinstance(child, str):
            self._sessions.add(child)
        elif method == "Target.detachedFromTarget" and isinstance(child, str):
            self._sessions.discard(child)
        if session == self._root:
            message = {k: v for k, v in message.items() if k != "sessionId"}
        self._deliver(message)

    async def read(self) -> Chunk:
        while not self._out:
            if self.ended is not None:
                return bytearray()
            self._readable.clear()
            await self._readable.wait()
        chunk = self._out.popleft()
        self._pending -= len(chunk) - HEADROOM
        return chunk

    # -- from the client -------------------------------------------------------------------
    async def write(self, data: Payload) -> None:
        if self.ended is not None:
            raise ConnectionResetError(self.ended[1])
        self._inbox += data
        while (end := self._inbox.find(NUL)) >= 0:
            raw = bytes(self._inbox[:end])
            del self._inbox[: end + 1]
            await self._from_client(raw)
        if len(self._inbox) > cdp_methods.MAX_CLIENT_MESSAGE:
            self._end(ChannelCloseCode.ERROR, "a CDP message is too large")

    async def _from_client(self, raw: bytes) -> None:
        try:
            message = orjson.loads(raw)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            self._end(ChannelCloseCode.ERROR, "a CDP message is not a JSON object")
            return
        message_id, method = message.get("id"), message.get("method")
        if not isinstance(message_id, int) or not isinstance(method, str):
            self._end(ChannelCloseCode.ERROR, "a CDP message needs an integer id and a method")
            return
        session = message.get("sessionId")
        refusal = await self._refusal(method, session, message.get("params"))
        if refusal is not None:
            self._deliver(cdp_methods.error_answer(message_id, session, refusal))
            return
        sent = {**message, "sessionId": self._root if session is None else session}
        if method == cdp_methods.DOWNLOAD_BEHAVIOR:
            sent["params"] = self._download_behavior(message.get("params"))

        def answered(answer: dict[str, Any]) -> None:
            result = answer.get("result")
            attached = result.get("sessionId") if isinstance(result, dict) else None
            if method == "Target.attachToTarget" and isinstance(attached, str):
                self._sessions.add(attached)
            back = {k: v for k, v in answer.items() if k != "sessionId"}
            if session is not None:
                back["sessionId"] = session
            self._deliver({**back, "id": message_id})

        try:
            self._cdp.forward(sent, answered)
        except OpError as err:
            self._end(ChannelCloseCode.TARGET_CLOSED, err.message)

    def _download_behavior(self, params: object) -> dict[str, Any]:
        """The desktop's own download setting, with the client's wish for events."""
        asked = params if isinstance(params, dict) else {}
        setting: dict[str, Any] = {
            "behavior": "allow",
            "downloadPath": str(self._downloads),
            "eventsEnabled": asked.get("eventsEnabled") is True,
        }
        if isinstance(asked.get("browserContextId"), str):
            setting["browserContextId"] = asked["browserContextId"]
        return setting

    async def _refusal(self, method: str, session: object, params: object) -> str | None:
        """Why the relay answers ``method`` itself with an error (None: it goes on)."""
        if session is not None and session not in self._sessions:
            return f"no session {str(session)[:64]!r} of this connection"
        kind = cdp_methods.kind_of(method)
        if kind == "refused":
            return f"forbidden: {method} is not offered through relaydesk"
        if kind == "script" and not self._script:
            return SCRIPT_OFF
        detached = params.get("sessionId") if isinstance(params, dict) else None
        if method == "Target.detachFromTarget" and detached not in self._sessions - {self._root}:
            return "forbidden: only sessions of this connection can be detached"
        if method in cdp_methods.CLOSES_TAB and await self._last_tab():
            return LAST_TAB
        return None

    async def _last_tab(self) -> bool:
        try:
            answer = await self._cdp.call("Target.getTargets")
        except (CdpError, OpError):
            return True
        pages = [t for t in answer.get("targetInfos", []) if t.get("type") == "page"]
        return len(pages) <= 1

    async def aclose(self) -> None:
        self._untap()
        if self.ended is None:
            self._end(ChannelCloseCode.NORMAL, "closed")
        if not self._cdp.closed:
            with contextlib.suppress(CdpError, OpError):
                await self._cdp.call("Target.detachFromTarget", {"sessionId": self._root})

    async def end_reason(self) -> tuple[ChannelCloseCode, str]:
        """Why the stream ended, for the channel's close."""
        return self.ended or (ChannelCloseCode.TARGET_CLOSED, "the browser has closed")
