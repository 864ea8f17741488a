"""Binary WebSocket frames from the relay to the server, built where their payload lies.

The relay is the WebSocket client, so each frame it sends is masked (RFC 6455 §5.3). A chunk of
a channel's stream is read into a buffer with :data:`HEADROOM` free bytes in front of it: the
DATA header, the WebSocket header and the mask key are written into that room and the payload
is masked in place, so the frame goes to the socket without its bytes being copied. aiohttp's
writer would copy each payload three times (frame header, a mutable copy to mask, header plus
masked copy); on a viewer's stream those copies were the relay's largest cost after the kernel.
"""

from __future__ import annotations

import os
from typing import Any, Final, Protocol

from wire.frames import HEADER
from wire.websocket import binary_frame_header, mask_in_place

# The longest client frame header: 2 bytes, a 64-bit length and the 4-byte mask key.
MAX_FRAME_HEADER: Final = 14
# Free bytes a chunk keeps in front of its data: the frame header and the DATA header, placed
# so that the masked part (DATA header, then data) starts 8-byte aligned in its buffer.
HEADROOM: Final = 16 + HEADER.size


def frame_in_place(buffer: bytearray | memoryview, start: int) -> int:
    """Make ``buffer[start:]`` the payload of a masked binary frame; return where it begins.

    The header and the mask key go into the bytes just before ``start`` (at most
    :data:`MAX_FRAME_HEADER` of them); the payload is masked in place.
    """
    header = binary_frame_header(len(buffer) - start, masked=True)
    mask = os.urandom(4)
    begin = start - 4 - len(header)
    if begin < 0:
        raise ValueError("no room for the frame header")
    buffer[begin : start - 4] = header
    buffer[start - 4 : start] = mask
    mask_in_place(memoryview(buffer)[start:], mask)
    return begin


class FrameWriter(Protocol):
    """Writes binary frames built in place on the link's connection, in call order."""

    def write_binary(self, buffer: bytearray | memoryview, start: int) -> None:
        """Send ``buffer[start:]`` as one binary message (``buffer`` is not used afterwards)."""

    async def drain(self) -> None:
        """Wait while the connection's send buffer is above its high-water mark."""


class AiohttpFrames:
    """A :class:`FrameWriter` on an aiohttp client WebSocket's own transport.

    It writes beside aiohttp's writer, whose uncompressed frames also go straight to the
    transport in call order, so the two interleave whole. aiohttp offers no public way to
    reach the transport: :meth:`of` returns ``None`` when its internals change, and the link
    then sends through ``send_bytes`` (copying).
    """

    def __init__(self, writer: Any) -> None:
        self._writer = writer
        self._transport = writer.transport
        self._protocol = writer.protocol

    @classmethod
    def of(cls, ws: Any) -> AiohttpFrames | None:
        writer = getattr(ws, "_writer", None)
        transport = getattr(writer, "transport", None)
        protocol = getattr(writer, "protocol", None)
        if transport is None or not hasattr(protocol, "_drain_helper"):
            return None
        if getattr(writer, "compress", 0):
            return None  # compressed links need aiohttp's framing
        return cls(writer)

    def write_binary(self, buffer: bytearray | memoryview, start: int) -> None:
        # After aiohttp sent its close frame (``_closing``), no data frame may follow it.
        if self._transport.is_closing() or getattr(self._writer, "_closing", False):
            raise ConnectionResetError("the server connection is closing")
        begin = frame_in_place(buffer, start)
        self._transport.write(memoryview(buffer)[begin:])

    async def drain(self) -> None:
        if getattr(self._protocol, "writing_paused", False):
            await self._protocol._drain_helper()
