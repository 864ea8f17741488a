"""uvicorn's sans-I/O WebSocket protocol, with two changes for streams of large binary messages.

The viewer tunnel and the relay link carry VNC bytes in messages of up to 1 MiB. Measured in
``benchmarks/bench_viewer.py`` (``docs/viewing.md``), two things uvicorn does per message
cost throughput there:

- **Sending** a binary message serialises header and payload into one new buffer (a copy of
  every byte on its way to the viewer). Here the header is written beside the payload with
  ``transport.writelines``, which hands both to the socket without joining them.
- **Receiving** pauses the socket after every message until the application takes it, so the
  loop reads one message per iteration. Here reading pauses only once ``QUEUED_MESSAGES`` wait
  in the queue (so at most that many messages, each within ``ws_max_size``, are buffered).

Everything else — handshake, text frames, pings, close, errors, a binary send in any other
state — is uvicorn's own code.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

from wire.websocket import binary_frame_header

# Messages received and not yet taken by the application before reading pauses.
QUEUED_MESSAGES = 4


class StreamingWebSocketProtocol(WebSocketsSansIOProtocol):
    """``ws=`` for uvicorn: see the module docstring."""

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
