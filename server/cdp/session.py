"""One agent's CDP connection once admitted: every client message checked (JSON, size, what
it may do) and passed to the relay's ``cdp`` channel; what the browser answers passed back.

Methods that act (``wire.cdp_methods``) pass the control gate first: a person's takeover or
Stop answers them with a CDP error whose message starts ``takeover_active`` /
``stopped_by_user`` (reads go on). Methods that would end the browser are answered with an
error. A message that is not a JSON CDP command, or is too large, closes the connection with
a reason. Each refused call is an audit row.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Final

import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect

from server.actions import audit
from server.actions.context import ActionContext
from server.control.gate import DesktopTarget, admit_agent_input
from server.relays.router import RelayChannel
from wire import cdp_methods, jsontext
from wire.errors import ChannelClosedError, CloseCode, ErrorCode, OpError, RelaydeskError

NUL: Final = b"\0"
REFUSED_OP: Final = "desktop.browser.cdp_refused"
GATE_CODES: Final = (ErrorCode.TAKEOVER_ACTIVE, ErrorCode.STOPPED_BY_USER)


class Closing(RelaydeskError):
    """The client's connection ends with the WebSocket close code ``close_code`` and
    ``reason``."""

    code = ErrorCode.PROTOCOL_ERROR

    def __init__(self, close_code: int, reason: str) -> None:
        super().__init__(reason)
        self.close_code, self.reason = close_code, reason


@dataclass
class Command:
    """A client's CDP command, as much of it as the endpoint reads."""

    id: int
    method: str
    session_id: object

    @classmethod
    def parse(cls, text: str) -> Command:
        """The command ``text`` carries, or ``Closing`` saying what is wrong with it."""
        if len(text) > cdp_methods.MAX_CLIENT_MESSAGE:
            limit = cdp_methods.MAX_CLIENT_MESSAGE
            raise Closing(CloseCode.MESSAGE_TOO_BIG, f"a CDP message is over {limit} bytes")
        try:
            message = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise Closing(CloseCode.INVALID_DATA, "a CDP message must be JSON") from None
        if not isinstance(message, dict):
            raise Closing(CloseCode.INVALID_DATA, "a CDP message must be a JSON object")
        message_id, method = message.get("id"), message.get("method")
        if not isinstance(message_id, int) or isinstance(message_id, bool):
            raise Closing(CloseCode.INVALID_DATA, "a CDP message needs an integer 'id'")
        if not isinstance(method, str) or not method:
            raise Closing(CloseCode.INVALID_DATA, "a CDP message needs a 'method'")
        return cls(message_id, method, message.get("sessionId"))


@dataclass
class CdpSession:
    """The pumps of one admitted connection."""

    websocket: WebSocket
    channel: RelayChannel
    ctx: ActionContext
    target: DesktopTarget

    async def serve(self) -> None:
        """Until either side ends; ``Closing`` says why the client's side must close."""
        into = asyncio.create_task(self._from_client())
        out = asyncio.create_task(self._to_client())
        try:
            done, _ = await asyncio.wait({into, out}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
        finally:
            for task in (into, out):
                task.cancel()
            await asyncio.gather(into, out, return_exceptions=True)

    async def _from_client(self) -> None:
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                raise Closing(CloseCode.UNSUPPORTED_DATA, "CDP messages are text frames")
            command = Command.parse(text)
            refusal = await self._refusal(command)
            if refusal is None:
                await self.channel.write(text.encode() + NUL)
            else:
                answer = cdp_methods.error_answer(command.id, command.session_id, refusal)
                await self.websocket.send_text(jsontext.dumps_text(answer))

    async def _refusal(self, command: Command) -> str | None:
        """Why the server answers ``command`` itself with an error (None: it goes on)."""
        kind = cdp_methods.kind_of(command.method)
        if kind == "refused":
            await self._refused(command, "forbidden")
            return f"forbidden: {command.method} is not offered through relaydesk"
        if kind in ("reads", "script"):  # script: the relay's setting decides (wire.cdp_methods)
            return None
        try:
            await admit_agent_input(self.ctx, self.target)
        except OpError as err:
            if err.code not in GATE_CODES:
                raise
            await self._refused(command, err.code.value)
            return f"{err.code.value}: {err.message}"
        return None

    async def _refused(self, command: Command, outcome: str) -> None:
        await audit.record(self.ctx, REFUSED_OP, outcome, command.method)

    async def _to_client(self) -> None:
        pending = bytearray()
        while True:
            try:
                pending += await self.channel.read()
            except ChannelClosedError as err:
                raise Closing(CloseCode.GOING_AWAY, err.reason or "the browser went away") from None
            start = 0
            while (end := pending.find(NUL, start)) >= 0:
                await self.websocket.send_text(pending[start:end].decode("utf-8", "replace"))
                start = end + 1
            del pending[:start]


async def close_quietly(websocket: WebSocket, code: int, reason: str) -> None:
    """Close ``websocket`` with ``code`` (quietly if it is gone already)."""
    with contextlib.suppress(RuntimeError, WebSocketDisconnect, OSError):
        await websocket.close(code, reason[:120])
