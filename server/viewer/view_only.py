"""A view-only viewer stream: the server forwards what asks to see and drops all input.

A viewer capability minted for an agent (an API token, ``ViewerGrant.person`` false) may watch
a desktop and nothing more: on its way to the desktop, each chunk the viewer sends is measured
message by message (``wire.rfb_client``'s measurements of the handshake and of every client
message noVNC sends) and only these are forwarded: the handshake, SetPixelFormat,
SetEncodings, FramebufferUpdateRequest, EnableContinuousUpdates, ClientFence and the QEMU
audio messages. Key and pointer events, clipboard text, XVP (power) and SetDesktopSize never
reach the desktop, and they never count as a person's input. A message the parser cannot
follow ends the stream (:class:`ViewOnlyBroken`): what cannot be measured cannot be checked.
"""

from __future__ import annotations

from typing import Final

from wire.errors import RelaydeskError
from wire.rfb_client import QEMU_AUDIO, MessageType, RfbClientStream

# Client messages a view-only viewer may send: each only asks for pictures or sound.
SEEING: Final = frozenset(
    int(kind)
    for kind in (
        MessageType.SET_PIXEL_FORMAT,
        MessageType.SET_ENCODINGS,
        MessageType.FRAMEBUFFER_UPDATE_REQUEST,
        MessageType.ENABLE_CONTINUOUS_UPDATES,
        MessageType.CLIENT_FENCE,
    )
)
_QEMU: Final = int(MessageType.QEMU)


class ViewOnlyBroken(RelaydeskError):
    """The viewer sent what the server cannot measure: the stream must end."""


class ViewOnlyFilter(RfbClientStream):
    """Follows one view-only viewer's stream and keeps only what asks to see."""

    def __init__(self) -> None:
        super().__init__()
        self._dropping_tail = False  # the tail still to skip belongs to a dropped message
        self.dropped = 0  # input messages dropped so far

    def filter(self, data: bytes | bytearray | memoryview) -> bytes:
        """The bytes of ``data`` to forward (possibly none); ``ViewOnlyBroken`` if the
        stream cannot be followed."""
        if self.failed is not None:
            raise ViewOnlyBroken(self.failed)
        view, kept = memoryview(data), bytearray()
        if self._skip:
            taken = min(self._skip, len(view))
            if not self._dropping_tail:
                kept += view[:taken]
            self._skip -= taken
            view = view[taken:]
        if self._buffer:
            self._buffer += view
            view = memoryview(self._buffer)
        try:
            used = self._keep_seeing(view, kept)
        except RelaydeskError as err:
            self._fail(err.message)
            raise ViewOnlyBroken(err.message) from None
        self._buffer = bytearray(view[used:])
        return bytes(kept)

    def _keep_seeing(self, view: memoryview, kept: bytearray) -> int:
        """Measure the messages in ``view``, append those that only ask to see to ``kept``;
        returns how many bytes were measured (the rest waits for more)."""
        at, end = 0, len(view)
        while at < end:
            kind = view[at] if self._step == self._message else None
            measured = self._step(view, at)
            if measured is None:
                break
            size = measured[0]
            keep = kind is None or kind in SEEING or (kind == _QEMU and view[at + 1] == QEMU_AUDIO)
            if keep:
                kept += view[at : min(at + size, end)]
            else:
                self.dropped += 1
            if at + size > end:
                self._skip, self._dropping_tail = at + size - end, not keep
                return end
            at += size
        return at
