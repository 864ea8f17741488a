"""Binary WebSocket frames (RFC 6455 §5.2, §5.3) for ends that place payloads themselves.

The server streams viewer bytes, and the relay its channel chunks, without a WebSocket library
copying each payload into a serialised frame: they write this header beside, or in front of,
the payload. Masked payloads are masked, and unmasked, in place.
"""

from __future__ import annotations

import struct
from typing import Final

import numpy as np

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


def header_length(head: bytes | bytearray) -> int:
    """How long the frame header that ``head`` starts is (2 until its second byte is there)."""
    if len(head) < 2:
        return 2
    short = head[1] & 0x7F
    extended = 2 if short == 126 else 8 if short == 127 else 0
    return 2 + extended + (4 if head[1] & _MASKED else 0)


def payload_length(head: bytes) -> int:
    """The payload length a complete frame header announces."""
    short = head[1] & 0x7F
    if short < 126:
        return short
    return int.from_bytes(head[2:4] if short == 126 else head[2:10], "big")


def is_masked_final_binary(head: bytes) -> bool:
    """A complete, masked binary message in one frame, no reserved bits set."""
    return head[0] == _FIN_BINARY and bool(head[1] & _MASKED)


def mask_in_place(view: memoryview, mask: bytes) -> None:
    """XOR ``view`` with the repeated 4-byte ``mask`` (a writable view, changed in place).

    Whole 8-byte words are done at once from the first aligned one (numpy copies unaligned
    words through a buffer, which costs as much as the XOR); the bytes around them one by one.
    """
    data = np.frombuffer(view, dtype=np.uint8)
    head = min(-data.ctypes.data % 8, len(data))
    whole = (len(data) - head) // 8 * 8
    if whole:
        words = data[head : head + whole].view(np.uint64)
        turned = mask[head % 4 :] + mask[: head % 4]
        np.bitwise_xor(words, np.frombuffer(turned * 2, dtype=np.uint64), out=words)
    for index in (*range(head), *range(head + whole, len(data))):
        data[index] ^= mask[index % 4]
