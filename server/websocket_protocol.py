"""uvicorn's sans-I/O WebSocket protocol, with three changes for streams of large binary messages.

The viewer tunnel and the relay link carry VNC bytes in messages of up to 1 MiB. Measured in
``benchmarks/bench_viewer.py`` (``docs/viewing.md``), three things uvicorn and websockets do per
message cost throughput there:

- **Sending** a binary message serialises header and payload into one new buffer (a copy of
  every byte on its way to the viewer). Here the header is written beside the payload with
  ``transport.writelines``, which hands both to the socket without joining them.
- **Receiving** a large binary frame copies its bytes four times (the event loop's read into a
  new ``bytes``, websockets' buffer, the frame's slice of it, the unmasked copy). Here reads
  go through a buffered protocol: a final, masked binary frame of at least
  ``STREAM_IN_MIN`` bytes is read by the socket straight into a buffer of its own, unmasked in
  place, and handed to the application as a read-only view of that buffer. Every other frame
  (text, control, fragments, small or malformed ones) goes to websockets whole and in order,
  which checks it as before; so does everything before the handshake completes and after
  a close.
- **Receiving** pauses the socket after every message until the application takes it, so the
  loop reads one message per iteration. Here reading pauses only once ``QUEUED_MESSAGES`` wait
  in the queue (so at most that many messages, each within ``ws_max_size``, are buffered).

Everything else — handshake, text frames, pings, close, errors, a binary send in any other
state — is uvicorn's own code.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Final

import numpy as np
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

from wire.errors import CloseCode
from wire.websocket import (
    binary_frame_header,
    header_length,
    is_masked_final_binary,
    mask_in_place,
    payload_length,
)

# Messages received and not yet taken by the application before reading pauses.
QUEUED_MESSAGES = 4
# Binary frames at least this long are read into their own buffer (shorter ones cost little to
# copy, and many of them would each need a buffer).
STREAM_IN_MIN: Final = 64 * 1024
# What one read takes between streamed frames (headers, small frames, the start of a payload).
READ_CHUNK: Final = 64 * 1024
# Close reason of every WebSocket (viewers, audio, relays) when the server stops.
SHUTDOWN: Final = "server shutting down"


class _ReadChunk(threading.local):
    """The buffer every connection of this thread's event loop reads into between streamed
    frames: one per loop, not one per connection (a server holds thousands of mostly idle relay
    connections). Sharing it is safe because each read is consumed before the next one starts:
    the loop calls ``get_buffer``, reads, then ``buffer_updated``, which copies every byte it
    keeps (into a header, a streamed frame's own buffer, or websockets' buffer)."""

    view: memoryview | None = None

    def get(self) -> memoryview:
        if self.view is None:
            self.view = memoryview(bytearray(READ_CHUNK))
        return self.view


_read_chunk = _ReadChunk()


class _Reader(asyncio.BufferedProtocol):
    """The transport's protocol once the handshake is done: reads go into the buffers
    :class:`StreamingWebSocketProtocol` chooses. (uvloop reads into a buffered protocol only
    when it is not also an ``asyncio.Protocol``, which uvicorn's protocol is.)"""

    def __init__(self, protocol: StreamingWebSocketProtocol) -> None:
        self._protocol = protocol

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._protocol.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._protocol.buffer_updated(nbytes)

    def eof_received(self) -> None:
        self._protocol.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._protocol.connection_lost(exc)

    def pause_writing(self) -> None:
        self._protocol.pause_writing()

    def resume_writing(self) -> None:
        self._protocol.resume_writing()


class StreamingWebSocketProtocol(WebSocketsSansIOProtocol):
    """``ws=`` for uvicorn: see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head = bytearray()  # header bytes of the next frame, while incomplete
        self._payload: memoryview | None = None  # a streamed frame's buffer, being filled
        self._filled = 0
        self._mask = b""
        self._passing = 0  # bytes of the current frame still owed to websockets
        self._chunk = _read_chunk.get()
        self._into_payload = False

    # -- server shutdown -----------------------------------------------------------------------
    def shutdown(self) -> None:
        """uvicorn's server shutdown: close with a code *and a reason* a viewer can show and a
        relay can log (uvicorn's own is a bare 1012); the rest is uvicorn's."""
        if not (self.handshake_complete and not self.close_sent):
            return super().shutdown()
        self.stop_keepalive()
        self.queue.put_nowait(
            {"type": "websocket.disconnect", "code": CloseCode.GOING_AWAY, "reason": SHUTDOWN}
        )
        self.conn.send_close(CloseCode.GOING_AWAY, SHUTDOWN)
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.transport.close()

    # -- sending -------------------------------------------------------------------------------
    async def send(self, message: Any) -> None:
        data = message.get("bytes") if message.get("type") == "websocket.send" else None
        if data is None or not self._streaming():
            return await super().send(message)
        await self.writable.wait()
        if not self._streaming():  # closed while we waited: uvicorn says how
            return await super().send(message)
        pending = self.conn.data_to_send()  # e.g. a pong not written yet: keep the order
        self.transport.writelines([*pending, binary_frame_header(len(data)), data])

    def _streaming(self) -> bool:
        return (
            self.handshake_complete
            and not self.close_sent
            and not self.disconnected
            and self.conn.state is State.OPEN
            and not self.conn.extensions
            and not self.transport.is_closing()
        )

    # -- receiving -----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # uvicorn hands this protocol the upgrade request, then makes it the transport's
        # protocol, all in one call: read through a buffered protocol from right after that.
        self.loop.call_soon(self._read_into_buffers)

    def _read_into_buffers(self) -> None:
        if not self.transport.is_closing():
            self.transport.set_protocol(_Reader(self))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._payload is not None:
            self._into_payload = True
            return self._payload[self._filled :]
        self._into_payload = False
        return self._chunk

    def buffer_updated(self, nbytes: int) -> None:
        if self._into_payload:
            self._filled += nbytes
            self._payload_done()
        else:
            self._receive(self._chunk[:nbytes])

    def data_received(self, data: bytes) -> None:
        # The upgrade request arrives here (uvicorn hands it over before switching protocols).
        self._receive(memoryview(data))

    def _receive(self, data: memoryview) -> None:
        while data:
            if self.conn.parser_exc is not None:
                return  # websockets failed the connection and uvicorn is closing it
            if self._payload is not None:
                taken = min(len(data), len(self._payload) - self._filled)
                self._payload[self._filled : self._filled + taken] = data[:taken]
                self._filled += taken
                data = data[taken:]
                self._payload_done()
            elif self._passing:
                taken = min(len(data), self._passing)
                self._passing -= taken
                self._to_websockets(data[:taken])
                data = data[taken:]
            elif self._head or self._at_frame_boundary():
                data = self._read_header(data)
            else:
                self._to_websockets(data)
                return

    def _at_frame_boundary(self) -> bool:
        """Whether this protocol splits frames now: an open connection, and websockets waiting
        for a new frame with nothing of its own buffered."""
        conn = self.conn
        # websockets' internals, read defensively: if a release renames them, every frame goes
        # to websockets as before (and the streamed-view tests fail).
        return (
            conn.state is State.OPEN
            and not conn.extensions
            and not getattr(conn.reader, "buffer", b"?")
            and conn.parser_exc is None
        )

    def _read_header(self, data: memoryview) -> memoryview:
        need = header_length(self._head)
        while True:
            taken = min(len(data), need - len(self._head))
            self._head += data[:taken]
            data = data[taken:]
            if len(self._head) < need:
                return data
            if (full := header_length(self._head)) == need:
                break
            need = full
        head = bytes(self._head)
        self._head.clear()
        length = payload_length(head)
        limit = getattr(self.conn, "max_message_size", 0)
        if (
            is_masked_final_binary(head)
            and length >= STREAM_IN_MIN
            and (limit is None or length <= limit)
            and getattr(self.conn, "current_size", 0) is None  # no fragmented message open
            and not self.close_sent
        ):
            self._mask = head[-4:]
            self._payload = np.empty(length, dtype=np.uint8).data
            self._filled = 0
        else:
            self._passing = length
            self._to_websockets(memoryview(head))
        return data

    def _payload_done(self) -> None:
        """Hand a streamed frame to the application once all of it has arrived."""
        payload = self._payload
        if payload is None or self._filled < len(payload):
            return
        self._payload, self._filled = None, 0
        mask_in_place(payload, self._mask)
        self.curr_msg_data_type = "bytes"
        self.frames = [payload.toreadonly()]  # type: ignore[list-item]
        self.send_receive_event_to_app()

    def _to_websockets(self, data: memoryview) -> None:
        super().data_received(bytes(data))
        if not self.handshake_initiated and self.conn.handshake_exc is not None:
            self._refuse_handshake()

    def _refuse_handshake(self) -> None:
        """websockets refused the upgrade request itself (a request line or headers too long:
        414/431, or not HTTP): send its answer and close. uvicorn sends only answers to
        requests that parsed, so the client would otherwise wait for nothing."""
        self.handshake_initiated = self.handshake_complete = self.close_sent = True
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.transport.close()

    def send_receive_event_to_app(self) -> None:
        if self.read_paused or self.queue.qsize() + 1 >= QUEUED_MESSAGES:
            super().send_receive_event_to_app()  # queues the message and pauses reading
            return
        # uvicorn pauses reading after every message unless it is paused already: say so for
        # this message only, and keep reading.
        self.read_paused = True
        try:
            super().send_receive_event_to_app()
        finally:
            self.read_paused = False
