"""Binary channel frames: ``u8 kind | u32 channel_id | payload`` (network byte order).

Kinds: ``DATA`` (payload bytes), ``CREDIT`` (``u32`` bytes granted), ``CLOSE`` (``u16`` code +
UTF-8 reason).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from wire.errors import ChannelCloseCode, FrameTooLarge, ProtocolError
from wire.ids import ChannelId

HEADER: Final = struct.Struct("!BI")
CREDIT_BODY: Final = struct.Struct("!I")
CLOSE_CODE: Final = struct.Struct("!H")
DEFAULT_MAX_PAYLOAD: Final = 1024 * 1024
MAX_CHANNEL_ID: Final = 0xFFFFFFFF
MAX_REASON_BYTES: Final = 123
# The bytes of a DATA frame: a decoded payload is a read-only view of the received frame.
Payload = bytes | memoryview


class FrameKind(IntEnum):
    """The first byte of every binary frame."""

    DATA = 1
    CREDIT = 2
    CLOSE = 3


@dataclass(frozen=True)
class DataFrame:
    """Bytes of a channel's stream.

    A decoded payload is a read-only view into the received frame, not a copy: the stream's
    bytes are carried from one socket to the next without being copied on the way.
    """

    channel_id: ChannelId
    payload: Payload


@dataclass(frozen=True)
class CreditFrame:
    """The receiver grants the sender ``credit`` more bytes."""

    channel_id: ChannelId
    credit: int


@dataclass(frozen=True)
class CloseFrame:
    """The channel is closed, with a code and a short reason."""

    channel_id: ChannelId
    code: ChannelCloseCode
    reason: str = ""


ChannelFrame = DataFrame | CreditFrame | CloseFrame


def encode_frame(frame: ChannelFrame) -> bytes:
    """Serialise one channel frame."""
    match frame:
        case DataFrame():
            return HEADER.pack(FrameKind.DATA, frame.channel_id) + frame.payload
        case CreditFrame():
            return HEADER.pack(FrameKind.CREDIT, frame.channel_id) + CREDIT_BODY.pack(frame.credit)
        case CloseFrame():
            cut = frame.reason.encode("utf-8")[:MAX_REASON_BYTES]
            reason = cut.decode("utf-8", "ignore").encode("utf-8")
            body = CLOSE_CODE.pack(frame.code) + reason
            return HEADER.pack(FrameKind.CLOSE, frame.channel_id) + body


def _decode_credit(channel_id: ChannelId, body: bytes) -> CreditFrame:
    if len(body) != CREDIT_BODY.size:
        raise ProtocolError("CREDIT frame needs a 4-byte body")
    (credit,) = CREDIT_BODY.unpack(body)
    if credit == 0:
        raise ProtocolError("CREDIT frame grants nothing")
    return CreditFrame(channel_id, credit)


def _decode_close(channel_id: ChannelId, body: bytes) -> CloseFrame:
    if len(body) < CLOSE_CODE.size:
        raise ProtocolError("CLOSE frame needs a 2-byte code")
    (raw_code,) = CLOSE_CODE.unpack_from(body)
    try:
        code = ChannelCloseCode(raw_code)
    except ValueError:
        code = ChannelCloseCode.ERROR
    reason = body[CLOSE_CODE.size :].decode("utf-8", errors="replace")
    return CloseFrame(channel_id, code, reason)


def decode_frame(
    data: bytes | bytearray | memoryview, max_payload: int = DEFAULT_MAX_PAYLOAD
) -> ChannelFrame:
    """Parse one binary frame; raise :class:`ProtocolError` on anything malformed."""
    if len(data) < HEADER.size:
        raise ProtocolError("binary frame shorter than its 5-byte header")
    if len(data) - HEADER.size > max_payload:
        raise FrameTooLarge(len(data) - HEADER.size, max_payload)
    raw_kind, raw_channel = HEADER.unpack_from(data)
    channel_id = ChannelId(raw_channel)
    if raw_kind == FrameKind.DATA:
        # A view of an immutable frame costs nothing; so does one of a read-only view, which a
        # receiver hands over only for a buffer nobody writes any more (the server's WebSocket
        # protocol does, for frames it read into their own buffer). A writable buffer is
        # copied once, so the payload never changes under its reader.
        if isinstance(data, bytes) or (isinstance(data, memoryview) and data.readonly):
            return DataFrame(channel_id, memoryview(data)[HEADER.size :])
        return DataFrame(channel_id, bytes(data[HEADER.size :]))
    body = bytes(data[HEADER.size :])
    if raw_kind == FrameKind.CREDIT:
        return _decode_credit(channel_id, body)
    if raw_kind == FrameKind.CLOSE:
        return _decode_close(channel_id, body)
    raise ProtocolError(f"unknown binary frame kind {raw_kind}")
