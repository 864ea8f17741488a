"""Sans-I/O state machine of one relay connection, driven by both ends.

The adapter feeds received frames in (:meth:`Connection.receive_text`,
:meth:`Connection.receive_bytes`), acts on the returned events, and writes out whatever
:meth:`Connection.data_to_send` returns. Nothing here touches a socket, a clock or a loop.

Flow control: every channel has a credit window per direction. The sender never has more
unacknowledged bytes in flight than granted; the receiver grants credit back as its consumer
takes bytes (:meth:`Connection.consumed`), in batches of a quarter of the channel's window.
A receiver whose consumer keeps up may grow a channel's window (:meth:`Connection.grow_window`);
the batch grows with it, so a fast stream costs the sender a few credit wake-ups per window.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from wire.errors import ChannelCloseCode, CloseCode, ErrorCode, OpError, ProtocolError
from wire.frames import (
    DEFAULT_MAX_PAYLOAD,
    HEADER,
    ChannelFrame,
    CloseFrame,
    CreditFrame,
    DataFrame,
    FrameKind,
    Payload,
    decode_frame,
    encode_frame,
)
from wire.ids import ChannelId, RequestId
from wire.messages import (
    DEFAULT_MAX_TEXT,
    DEFAULT_TIMEOUT_MS,
    PROTOCOL_VERSION,
    Cancel,
    Event,
    Hello,
    Message,
    Request,
    Response,
    Welcome,
    encode_message,
    parse_message,
)

DEFAULT_WINDOW: Final = 1024 * 1024
# Frames one send_data call queues at most: a peer that announces a tiny frame limit cannot
# make one call queue a frame per byte of a window.
MAX_FRAMES_PER_SEND: Final = 64
MAX_CREDIT: Final = 1 << 31


class Role(Enum):
    """Which end of the relay connection this machine drives."""

    SERVER = "server"
    RELAY = "relay"


class Phase(Enum):
    HANDSHAKE = "handshake"
    OPEN = "open"


@dataclass(frozen=True)
class HelloReceived:
    hello: Hello


@dataclass(frozen=True)
class WelcomeReceived:
    welcome: Welcome


@dataclass(frozen=True)
class RequestReceived:
    request: Request


@dataclass(frozen=True)
class ResponseReceived:
    response: Response


@dataclass(frozen=True)
class CancelReceived:
    id: RequestId


@dataclass(frozen=True)
class EventReceived:
    event: Event


@dataclass(frozen=True)
class ChannelData:
    channel_id: ChannelId
    payload: Payload


@dataclass(frozen=True)
class ChannelCredit:
    """The peer granted more credit: a sender waiting on this channel may resume."""

    channel_id: ChannelId
    window: int


@dataclass(frozen=True)
class ChannelClosed:
    channel_id: ChannelId
    code: ChannelCloseCode
    reason: str
    by_peer: bool


@dataclass(frozen=True)
class Notice:
    """Something the peer sent was ignored (e.g. a late response); worth a log line."""

    message: str


WireEvent = (
    HelloReceived
    | WelcomeReceived
    | RequestReceived
    | ResponseReceived
    | CancelReceived
    | EventReceived
    | ChannelData
    | ChannelCredit
    | ChannelClosed
    | Notice
)


@dataclass
class _Window:
    send_credit: int
    recv_allowance: int
    size: int
    unacked: int = 0


class Connection:
    """One relay connection's protocol state: handshake, requests, channels."""

    def __init__(
        self,
        role: Role,
        *,
        max_text: int = DEFAULT_MAX_TEXT,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        window: int = DEFAULT_WINDOW,
    ) -> None:
        self.role = role
        self.max_text = max_text
        self.max_payload = max_payload
        # The largest payload and text frame this end sends: what the peer announced it reads
        # (``hello.max_frame``/``max_text`` from a relay, ``welcome.…`` from the server).
        self.max_send_payload = max_payload
        self.max_send_text = max_text
        self.window = window
        self.phase = Phase.HANDSHAKE
        self._hello_seen = False
        self._hello_sent = False
        self._out: list[str | bytes] = []
        self._ids = itertools.count(1)
        self._pending_out: dict[RequestId, str] = {}
        self._pending_in: set[RequestId] = set()
        self._channels: dict[ChannelId, _Window] = {}

    # -- output ---------------------------------------------------------------------------

    def data_to_send(self) -> list[str | bytes]:
        """Frames to write, in order; the buffer is emptied."""
        out, self._out = self._out, []
        return out

    def _send(self, message: Message) -> None:
        self._out.append(encode_message(message))

    def _send_frame(self, frame: ChannelFrame) -> None:
        self._out.append(encode_frame(frame))

    # -- handshake ------------------------------------------------------------------------

    def send_hello(self, hello: Hello) -> None:
        """Relay: open the handshake."""
        self._expect_role(Role.RELAY, "hello")
        self._send(hello)
        self._hello_sent = True

    def accept(self, welcome: Welcome) -> None:
        """Server: admit the relay after its ``hello`` was authenticated and checked."""
        self._expect_role(Role.SERVER, "welcome")
        if not self._hello_seen:
            raise ProtocolError("welcome before hello")
        self._send(welcome)
        self.phase = Phase.OPEN

    def _expect_role(self, role: Role, what: str) -> None:
        if self.role is not role:
            raise ProtocolError(f"only the {role.value} sends {what}")

    # -- requests -------------------------------------------------------------------------

    def send_request(
        self, op: str, args: dict[str, Any] | None = None, timeout_ms: int = DEFAULT_TIMEOUT_MS
    ) -> RequestId:
        """Queue a request; the answer arrives as :class:`ResponseReceived`."""
        self._require_open()
        request_id = RequestId(f"{self.role.value[0]}{next(self._ids)}")
        self._pending_out[request_id] = op
        self._send(Request(request_id, op, args or {}, timeout_ms))
        return request_id

    def send_result(self, request_id: RequestId, result: Any) -> None:
        """Answer a received request successfully (dropped if it was cancelled).

        An answer larger than the peer reads (:attr:`max_send_text`) would make the peer close
        the whole connection; it is answered with a ``limit_reached`` error instead.
        """
        if not self._finish_incoming(request_id):
            return
        text = encode_message(Response(request_id, True, result=result))
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
        if size > self.max_send_text:
            message = (
                f"the answer is {size:,} bytes, over the {self.max_send_text:,}-byte message "
                "limit of the relay connection"
            )
            error = OpError(ErrorCode.LIMIT_REACHED, message)
            text = encode_message(Response(request_id, False, error=error.to_dict()))
        self._out.append(text)

    def send_error(self, request_id: RequestId, error: OpError) -> None:
        """Answer a received request with an error (dropped if it was cancelled)."""
        if self._finish_incoming(request_id):
            self._send(Response(request_id, False, error=error.to_dict()))

    def _finish_incoming(self, request_id: RequestId) -> bool:
        if request_id not in self._pending_in:
            return False
        self._pending_in.discard(request_id)
        return self.phase is Phase.OPEN

    def cancel(self, request_id: RequestId) -> None:
        """Stop waiting for ``request_id`` (timeout or caller gone) and tell the peer."""
        if self._pending_out.pop(request_id, None) is not None and self.phase is Phase.OPEN:
            self._send(Cancel(request_id))

    def send_event(self, name: str, data: dict[str, Any]) -> None:
        """Relay: notify the server."""
        self._expect_role(Role.RELAY, "events")
        self._require_open()
        self._send(Event(name, data))

    @property
    def pending_requests(self) -> int:
        return len(self._pending_out)

    def _require_open(self) -> None:
        if self.phase is not Phase.OPEN:
            raise ProtocolError("connection is not open")

    # -- channels -------------------------------------------------------------------------

    def open_channel(self, channel_id: ChannelId) -> None:
        """Register a channel with a fresh window in both directions."""
        if channel_id in self._channels:
            raise ProtocolError(f"channel {channel_id} is already open")
        self._channels[channel_id] = _Window(
            send_credit=self.window, recv_allowance=self.window, size=self.window
        )

    def has_channel(self, channel_id: ChannelId) -> bool:
        return channel_id in self._channels

    @property
    def channel_ids(self) -> list[ChannelId]:
        return list(self._channels)

    def send_window(self, channel_id: ChannelId) -> int:
        """How many bytes may be sent on the channel now (0 if closed)."""
        window = self._channels.get(channel_id)
        return window.send_credit if window else 0

    def recv_window(self, channel_id: ChannelId) -> int:
        """The receive window granted to the peer on the channel (0 if closed)."""
        window = self._channels.get(channel_id)
        return window.size if window else 0

    def send_data(self, channel_id: ChannelId, payload: bytes | memoryview) -> int:
        """Queue as much of ``payload`` as the credit allows; return the bytes taken.

        Each frame is built with a single copy of its slice of ``payload`` (a ``memoryview``
        lets the caller hand over the rest of a buffer without copying it first). One call
        queues at most :data:`MAX_FRAMES_PER_SEND` frames; the caller sends the rest next.
        """
        window = self._channels.get(channel_id)
        if window is None:
            return 0
        most = MAX_FRAMES_PER_SEND * self.max_send_payload
        taken = min(len(payload), window.send_credit, most)
        header = HEADER.pack(FrameKind.DATA, channel_id)
        for start in range(0, taken, self.max_send_payload):
            self._out.append(header + payload[start : min(start + self.max_send_payload, taken)])
        window.send_credit -= taken
        return taken

    def data_in_place(
        self, channel_id: ChannelId, buffer: bytearray | memoryview, start: int
    ) -> bool:
        """Make ``buffer[start - 5:]`` the DATA frame of the payload ``buffer[start:]``.

        The header is written into the 5 bytes before ``start``; nothing is queued. All or
        nothing: False, and nothing changed, when the channel's credit or the frame size limit
        does not allow the whole payload. The caller writes the frame right after whatever
        :meth:`data_to_send` returned, before anything else is queued.
        """
        window = self._channels.get(channel_id)
        size = len(buffer) - start
        if window is None or size > window.send_credit or size > self.max_send_payload:
            return False
        if start < HEADER.size:
            raise ValueError("no room for the DATA header")
        HEADER.pack_into(buffer, start - HEADER.size, FrameKind.DATA, channel_id)
        window.send_credit -= size
        return True

    def whole_frame_possible(self, size: int) -> bool:
        """Whether a sender waiting for credit will be able to send ``size`` bytes as one frame.

        A receiver holds back less than a quarter of its window (:meth:`consumed`), and windows
        only grow, so once the peer has taken everything, the credit is back above three
        quarters of the window.
        """
        return size <= min(self.max_send_payload, self.window * 3 // 4)

    def consumed(self, channel_id: ChannelId, size: int) -> None:
        """The local consumer took ``size`` received bytes: grant them back in batches."""
        window = self._channels.get(channel_id)
        if window is None:
            return
        window.unacked += size
        if window.unacked > 0 and window.unacked >= window.size // 4:
            self._grant(channel_id, window, window.unacked)
            window.unacked = 0

    def grow_window(self, channel_id: ChannelId, step: int) -> int:
        """Widen the channel's receive window by ``step`` (granted now); return its size."""
        window = self._channels.get(channel_id)
        if window is None or step <= 0:
            return 0
        window.size += step
        self._grant(channel_id, window, step)
        return window.size

    def _grant(self, channel_id: ChannelId, window: _Window, credit: int) -> None:
        window.recv_allowance += credit
        self._send_frame(CreditFrame(channel_id, credit))

    def close_channel(
        self,
        channel_id: ChannelId,
        code: ChannelCloseCode = ChannelCloseCode.NORMAL,
        reason: str = "",
    ) -> bool:
        """Close a channel locally and tell the peer; False if it was not open."""
        if self._channels.pop(channel_id, None) is None:
            return False
        self._send_frame(CloseFrame(channel_id, code, reason))
        return True

    # -- input ----------------------------------------------------------------------------

    def receive_text(self, text: str) -> list[WireEvent]:
        """Handle one text frame; raise :class:`ProtocolError` when the peer broke v1."""
        message = parse_message(text, self.max_text)
        if self.phase is Phase.HANDSHAKE:
            return [self._handshake(message)]
        return self._dispatch(message)

    def _handshake(self, message: Message) -> WireEvent:
        if self.role is Role.SERVER and isinstance(message, Hello) and not self._hello_seen:
            if message.protocol != PROTOCOL_VERSION:
                raise ProtocolError(
                    f"unsupported protocol {message.protocol}", CloseCode.UNSUPPORTED_PROTOCOL
                )
            self._hello_seen = True
            self.max_send_payload = message.max_frame
            self.max_send_text = message.max_text
            return HelloReceived(message)
        if self.role is Role.RELAY and isinstance(message, Welcome) and self._hello_sent:
            self.max_send_payload = message.max_frame
            self.max_send_text = message.max_text
            self.phase = Phase.OPEN
            return WelcomeReceived(message)
        if self.role is Role.SERVER and isinstance(message, Hello):
            raise ProtocolError("hello was already received", CloseCode.HELLO_EXPECTED)
        expected = "hello" if self.role is Role.SERVER else "welcome (after hello)"
        raise ProtocolError(f"expected {expected} first", CloseCode.HELLO_EXPECTED)

    def _dispatch(self, message: Message) -> list[WireEvent]:
        match message:
            case Request():
                return self._on_request(message)
            case Response():
                return self._on_response(message)
            case Cancel():
                self._pending_in.discard(message.id)
                return [CancelReceived(message.id)]
            case Event():
                if self.role is not Role.SERVER:
                    raise ProtocolError("events flow from relay to server only")
                return [EventReceived(message)]
            case Hello() | Welcome():
                raise ProtocolError("handshake message after the handshake")

    def _on_request(self, request: Request) -> list[WireEvent]:
        if request.id in self._pending_in:
            error = OpError(ErrorCode.DUPLICATE_REQUEST, f"request id {request.id} is in use")
            self._send(Response(request.id, False, error=error.to_dict()))
            return [Notice(f"duplicate request id {request.id}")]
        self._pending_in.add(request.id)
        return [RequestReceived(request)]

    def _on_response(self, response: Response) -> list[WireEvent]:
        if self._pending_out.pop(response.id, None) is None:
            return [Notice(f"response for unknown or cancelled request {response.id}")]
        return [ResponseReceived(response)]

    def receive_bytes(self, data: bytes) -> list[WireEvent]:
        """Handle one binary frame; raise :class:`ProtocolError` when the peer broke v1."""
        if self.phase is not Phase.OPEN:
            raise ProtocolError("binary frame before the handshake", CloseCode.HELLO_EXPECTED)
        frame = decode_frame(data, self.max_payload)
        match frame:
            case DataFrame():
                return self._on_data(frame)
            case CreditFrame():
                return self._on_credit(frame)
            case CloseFrame():
                return self._on_close(frame)

    def _on_data(self, frame: DataFrame) -> list[WireEvent]:
        window = self._channels.get(frame.channel_id)
        if window is None:
            self._send_frame(
                CloseFrame(frame.channel_id, ChannelCloseCode.UNKNOWN_CHANNEL, "unknown channel")
            )
            return [Notice(f"data for unknown channel {frame.channel_id}")]
        if len(frame.payload) > window.recv_allowance:
            reason = "sender exceeded its credit window"
            self.close_channel(frame.channel_id, ChannelCloseCode.CREDIT_EXCEEDED, reason)
            return [
                ChannelClosed(frame.channel_id, ChannelCloseCode.CREDIT_EXCEEDED, reason, False)
            ]
        window.recv_allowance -= len(frame.payload)
        return [ChannelData(frame.channel_id, frame.payload)]

    def _on_credit(self, frame: CreditFrame) -> list[WireEvent]:
        window = self._channels.get(frame.channel_id)
        if window is None:
            return []
        window.send_credit = min(MAX_CREDIT, window.send_credit + frame.credit)
        return [ChannelCredit(frame.channel_id, window.send_credit)]

    def _on_close(self, frame: CloseFrame) -> list[WireEvent]:
        if self._channels.pop(frame.channel_id, None) is None:
            return []
        return [ChannelClosed(frame.channel_id, frame.code, frame.reason, True)]
