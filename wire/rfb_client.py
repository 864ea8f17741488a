"""What a viewer sends in an RFB session, sans-I/O: which bytes were a person's input.

:class:`RfbClientStream` follows the viewer → server half of an RFB session (the viewer's
handshake with a server offering security type None, then its client messages) and reports,
for each chunk it is fed, which kinds of person input the chunk completed: key presses
(KeyEvent, QEMU extended KeyEvent), pointer events that move or press (a stream's first
event without a button, and the same state sent again, are not motion) and clipboard text
(ClientCutText, or an extended-clipboard *provide*). It never copies or changes the stream;
the caller forwards the bytes as they are.

It knows the length of every client message noVNC sends (SetPixelFormat, SetEncodings,
FramebufferUpdateRequest, KeyEvent, PointerEvent and its extended form, ClientCutText and the
extended clipboard, EnableContinuousUpdates, ClientFence, XVP, SetDesktopSize, QEMU key and
audio messages), whole or split anywhere across chunks. A message it cannot follow (an unknown
type, a handshake it does not expect) ends the parsing of that stream for good: ``failed``
says why, and every later chunk is ignored at the cost of one attribute check.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import IntEnum, IntFlag
from typing import Final

from wire.errors import ProtocolError, RelaydeskError, RfbHandshakeError
from wire.rfb import SECURITY_NONE, VERSION_LEN, parse_version


class ClientInput(IntFlag):
    """Kinds of person input a chunk carried."""

    NONE = 0
    KEY = 1
    POINTER = 2
    CLIPBOARD = 4


class MessageType(IntEnum):
    """RFB client message types (RFC 6143 and the registered extensions noVNC uses)."""

    SET_PIXEL_FORMAT = 0
    SET_ENCODINGS = 2
    FRAMEBUFFER_UPDATE_REQUEST = 3
    KEY_EVENT = 4
    POINTER_EVENT = 5
    CLIENT_CUT_TEXT = 6
    ENABLE_CONTINUOUS_UPDATES = 150
    CLIENT_FENCE = 248
    XVP = 250
    SET_DESKTOP_SIZE = 251
    QEMU = 255


# Messages whose length is fixed, type byte included (plain ints: looked up per message).
FIXED_LENGTH: Final[dict[int, int]] = {
    int(MessageType.SET_PIXEL_FORMAT): 20,
    int(MessageType.FRAMEBUFFER_UPDATE_REQUEST): 10,
    int(MessageType.KEY_EVENT): 8,
    int(MessageType.ENABLE_CONTINUOUS_UPDATES): 10,
    int(MessageType.XVP): 4,
}
# The flags as plain ints inside the parser (enum arithmetic costs microseconds per message).
_NONE, _KEY, _POINTER, _CLIPBOARD = (
    0,
    int(ClientInput.KEY),
    int(ClientInput.POINTER),
    int(ClientInput.CLIPBOARD),
)
_KEY_EVENT: Final = int(MessageType.KEY_EVENT)
_RESULTS: Final = tuple(ClientInput(flags) for flags in range(8))
# The pseudo-encoding a viewer announces when it can send the 7-byte extended PointerEvent.
EXTENDED_MOUSE_BUTTONS: Final = -316
EXTENDED_POINTER_MARKER: Final = 0x80
QEMU_EXTENDED_KEY: Final = 0
QEMU_AUDIO: Final = 1
QEMU_AUDIO_SET_FORMAT: Final = 2
# Extended clipboard (a negative ClientCutText length): the action that carries text. A caps
# message (sent on connecting) lists every action it supports, provide included.
CLIPBOARD_CAPS: Final = 0x01000000
CLIPBOARD_PROVIDE: Final = 0x10000000
_U16: Final = struct.Struct(">H")
_S32: Final = struct.Struct(">i")
_U32: Final = struct.Struct(">I")


# A step measures the message at an offset: (its length, the input it carries as
# ``ClientInput`` bits), or None while the bytes that say its length have not all arrived.
Measured = tuple[int, int] | None
Step = Callable[[memoryview, int], Measured]


class RfbClientStream:
    """Follows one viewer's byte stream; ``feed`` says which person input each chunk carried."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._skip = 0  # bytes of a long message's tail still to pass over
        self._step: Step = self._version
        self._client_version: tuple[int, int] | None = None
        self._extended_pointer = False
        self._last_pointer: bytes | None = None
        self.failed: str | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> ClientInput:
        """The kinds of person input among the messages ``data`` completed."""
        if self.failed is not None:
            return ClientInput.NONE
        view = memoryview(data)
        if self._skip:
            taken = min(self._skip, len(view))
            self._skip -= taken
            view = view[taken:]
        if self._buffer:
            self._buffer += view
            view = memoryview(self._buffer)
        try:
            found, used = self._run(view)
        except RelaydeskError as err:
            return self._fail(err.message)
        if used < len(view):
            self._buffer = bytearray(view[used:])
        elif self._buffer:
            self._buffer = bytearray()
        return _RESULTS[found]

    def _fail(self, reason: str) -> ClientInput:
        self.failed = reason
        self._buffer = bytearray()
        return ClientInput.NONE

    def _run(self, view: memoryview) -> tuple[int, int]:
        found, at, end = _NONE, 0, len(view)
        while at < end and (measured := self._step(view, at)) is not None:
            size, kind = measured
            if at + size > end:
                self._skip = at + size - end
                return found | kind, end
            found |= kind
            at += size
        return found, at

    # -- handshake: version, security type (3.7 and 3.8), ClientInit ------------------------

    def _version(self, view: memoryview, at: int) -> Measured:
        if len(view) - at < VERSION_LEN:
            return None
        self._client_version = parse_version(bytes(view[at : at + VERSION_LEN]))
        self._step = self._client_init if self._client_version == (3, 3) else self._security
        return VERSION_LEN, _NONE

    def _security(self, view: memoryview, at: int) -> Measured:
        if view[at] != SECURITY_NONE:
            raise RfbHandshakeError(f"the viewer chose security type {view[at]}, not None")
        self._step = self._client_init
        return 1, _NONE

    def _client_init(self, view: memoryview, at: int) -> Measured:
        self._step = self._message
        return 1, _NONE

    # -- client messages ---------------------------------------------------------------------

    def _message(self, view: memoryview, at: int) -> Measured:
        kind = view[at]
        fixed = FIXED_LENGTH.get(kind)
        if fixed is not None:
            return fixed, _KEY if kind == _KEY_EVENT else _NONE
        measure = _MEASURES.get(kind)
        if measure is None:
            raise ProtocolError(f"unknown client message type {kind}")
        return measure(self, view, at)

    def _pointer(self, view: memoryview, at: int) -> Measured:
        if len(view) - at < 2:
            return None
        extended = self._extended_pointer and view[at + 1] & EXTENDED_POINTER_MARKER
        size = 7 if extended else 6
        if len(view) - at < size:
            return None
        state = bytes(view[at + 1 : at + size])
        last, self._last_pointer = self._last_pointer, state
        # Motion or a button is input; the same state again is not (browsers repeat the
        # pointer's position on layout changes). A stream's first event counts only with a
        # button held: it may be such a repeat of where the pointer already was.
        buttons = (state[0] & 0x7F) | state[5] << 7 if extended else state[0]
        moved = state != last if last is not None else buttons != 0
        return size, _POINTER if moved else _NONE

    def _encodings(self, view: memoryview, at: int) -> Measured:
        count = _field(view, at + 2, _U16)
        if count is None or len(view) - at < 4 + 4 * count:
            return None  # announcements are read whole (at most 256 KiB)
        encodings = struct.unpack_from(f">{count}i", view, at + 4)
        self._extended_pointer = EXTENDED_MOUSE_BUTTONS in encodings
        return 4 + 4 * count, _NONE

    def _cut_text(self, view: memoryview, at: int) -> Measured:
        length = _field(view, at + 4, _S32)
        if length is None:
            return None
        if length >= 0:
            return 8 + length, _CLIPBOARD
        flags = _field(view, at + 8, _U32) if -length >= 4 else 0
        if flags is None:
            return None
        provides = flags & CLIPBOARD_PROVIDE and not flags & CLIPBOARD_CAPS
        return 8 - length, _CLIPBOARD if provides else _NONE

    def _fence(self, view: memoryview, at: int) -> Measured:
        if len(view) - at < 9:
            return None
        return 9 + view[at + 8], _NONE

    def _desktop_size(self, view: memoryview, at: int) -> Measured:
        if len(view) - at < 8:
            return None
        return 8 + 16 * view[at + 6], _NONE

    def _qemu(self, view: memoryview, at: int) -> Measured:
        if len(view) - at < 2:
            return None
        subtype = view[at + 1]
        if subtype == QEMU_EXTENDED_KEY:
            return 12, _KEY
        if subtype != QEMU_AUDIO:
            raise ProtocolError(f"unknown QEMU client message {subtype}")
        operation = _field(view, at + 2, _U16)
        if operation is None:
            return None
        return (10 if operation == QEMU_AUDIO_SET_FORMAT else 4), _NONE


def _field(view: memoryview, offset: int, shape: struct.Struct) -> int | None:
    """The number at ``offset``, or None until it has arrived."""
    if len(view) < offset + shape.size:
        return None
    value: int = shape.unpack_from(view, offset)[0]
    return value


_MEASURES: Final[dict[int, Callable[[RfbClientStream, memoryview, int], Measured]]] = {
    int(MessageType.POINTER_EVENT): RfbClientStream._pointer,
    int(MessageType.SET_ENCODINGS): RfbClientStream._encodings,
    int(MessageType.CLIENT_CUT_TEXT): RfbClientStream._cut_text,
    int(MessageType.CLIENT_FENCE): RfbClientStream._fence,
    int(MessageType.SET_DESKTOP_SIZE): RfbClientStream._desktop_size,
    int(MessageType.QEMU): RfbClientStream._qemu,
}
