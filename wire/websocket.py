"""Headers of binary WebSocket frames (RFC 6455 §5.2) for ends that place payloads themselves.

The server streams viewer bytes, and the relay its channel chunks, without a WebSocket library
copying each payload into a serialised frame: they write this header beside, or in front of,
the payload.
"""

from __future__ import annotations

import struct
from typing import Final

_FIN_BINARY: Final = 0x82
_MASKED: Final = 0x80
_SHORT: Final = struct.Struct("!BB")
_MEDIUM: Final = struct.Struct("!BBH")
_LONG: Final = struct.Struct("!BBQ")


def binary_frame_header(length: int, *, masked: bool = False) -> bytes:
    """The header of a final binary frame of ``length`` bytes; ``masked`` sets the mask bit
    (a client's frame: the caller writes the 4-byte mask key after it)."""
    mask_bit = _MASKED if masked else 0
    if length < 126:
        return _SHORT.pack(_FIN_BINARY, mask_bit | length)
    if length < 65536:
        return _MEDIUM.pack(_FIN_BINARY, mask_bit | 126, length)
    return _LONG.pack(_FIN_BINARY, mask_bit | 127, length)
