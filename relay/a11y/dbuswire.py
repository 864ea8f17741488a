"""Reading D-Bus message bodies straight from their wire bytes (pure, no I/O).

GLib's Python bindings unpack a reply value by value in Python; for an app's whole
accessibility cache (``GetItems``, thousands of values) that took ~170 ms of a 600-node
Chromium page, against a few milliseconds read here with ``struct``. Only the types replies
of the accessibility bus use are read: ``y b n q i u x t d s o g a ( )`` (no variants, no
dictionaries); anything else raises ``WireError``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import cache
from typing import Any, Final

ALIGN: Final = {"y": 1, "b": 4, "n": 2, "q": 2, "i": 4, "u": 4, "x": 8, "t": 8, "d": 8,
                "s": 4, "o": 4, "g": 1, "a": 4, "(": 8}  # fmt: skip
FIXED: Final = {"y": "B", "b": "I", "n": "h", "q": "H", "i": "i", "u": "I", "x": "q", "t": "Q",
                "d": "d"}  # fmt: skip
HEADER_SIGNATURE: Final = 8
MAX_DEPTH: Final = 32


class WireError(ValueError):
    """Bytes that are not a D-Bus message of a type this reader knows."""


def _split(signature: str) -> list[str]:
    """The complete types of ``signature``, in order."""
    types, i = [], 0
    while i < len(signature):
        end = _type_end(signature, i)
        types.append(signature[i:end])
        i = end
    return types


def _type_end(signature: str, i: int, depth: int = 0) -> int:
    if depth > MAX_DEPTH or i >= len(signature):
        raise WireError(f"bad signature {signature!r}")
    char = signature[i]
    if char == "a":
        return _type_end(signature, i + 1, depth + 1)
    if char == "(":
        j = i + 1
        while j < len(signature) and signature[j] != ")":
            j = _type_end(signature, j, depth + 1)
        if j >= len(signature):
            raise WireError(f"unclosed struct in {signature!r}")
        return j + 1
    if char in FIXED or char in "sog":
        return i + 1
    raise WireError(f"type {char!r} is not read here")


Decoder = Callable[[bytes, int, int], tuple[Any, int]]
"""``(data, pos, origin) → (value, new pos)``; alignment is relative to ``origin``."""


@cache
def _decoder(t: str, little: bool, depth: int = 0) -> Decoder:
    """A decoder of one complete type, compiled once per signature."""
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    prefix = "<" if little else ">"
    char = t[0]
    if char in FIXED:
        packer = struct.Struct(prefix + FIXED[char])
        align, size, unpack = ALIGN[char], packer.size, packer.unpack_from
        as_bool = char == "b"

        def fixed(data: bytes, pos: int, origin: int) -> tuple[Any, int]:
            pos += -(pos - origin) % align
            (value,) = unpack(data, pos)
            return (bool(value) if as_bool else value), pos + size

        return fixed
    u32 = struct.Struct(prefix + "I").unpack_from
    if char in "so":

        def string(data: bytes, pos: int, origin: int) -> tuple[Any, int]:
            pos += -(pos - origin) % 4
            (length,) = u32(data, pos)
            start = pos + 4
            end = start + length
            if end >= len(data):
                raise WireError("string runs past the message")
            return data[start:end].decode("utf-8", "replace"), end + 1

        return string
    if char == "g":

        def signature(data: bytes, pos: int, origin: int) -> tuple[Any, int]:
            length = data[pos]
            return data[pos + 1 : pos + 1 + length].decode("ascii", "replace"), pos + length + 2

        return signature
    if char == "a":
        element = _decoder(t[1:], little, depth + 1)
        element_align = ALIGN[t[1]]

        def array(data: bytes, pos: int, origin: int) -> tuple[Any, int]:
            pos += -(pos - origin) % 4
            (length,) = u32(data, pos)
            pos += 4
            pos += -(pos - origin) % element_align
            end = pos + length
            if end > len(data):
                raise WireError("array runs past the message")
            items = []
            while pos < end:
                value, pos = element(data, pos, origin)
                items.append(value)
            return items, pos

        return array
    if char == "(":
        parts = tuple(_decoder(part, little, depth + 1) for part in _split(t[1:-1]))

        def record(data: bytes, pos: int, origin: int) -> tuple[Any, int]:
            pos += -(pos - origin) % 8
            values = []
            for part in parts:
                value, pos = part(data, pos, origin)
                values.append(value)
            return tuple(values), pos

        return record
    raise WireError(f"type {t!r} is not read here")


def read_body(blob: bytes) -> tuple[str, tuple[Any, ...]]:
    """``(signature, values)`` of a whole D-Bus message (as ``GDBusMessage.to_blob`` gives)."""
    if len(blob) < 16 or blob[:1] not in (b"l", b"B"):
        raise WireError("not a D-Bus message")
    little = blob[:1] == b"l"
    (fields_length,) = struct.unpack_from("<I" if little else ">I", blob, 12)
    signature = _header_signature(blob, 16, 16 + fields_length, little)
    body = 16 + fields_length
    body += -body % 8
    pos, values = body, []
    try:
        for t in _split(signature):
            value, pos = _decoder(t, little)(blob, pos, body)
            values.append(value)
    except (struct.error, IndexError) as err:
        raise WireError("a value runs past the message") from err
    return signature, tuple(values)


def _header_signature(blob: bytes, start: int, end: int, little: bool) -> str:
    """The body's signature from the header fields (each ``(y v)``, 8-aligned)."""
    pos = start
    u32 = "<I" if little else ">I"
    while pos < end:
        pos += -pos % 8
        if pos >= end:
            break
        code = blob[pos]
        sig_len = blob[pos + 1]
        sig = blob[pos + 2 : pos + 2 + sig_len].decode("ascii", "replace")
        pos += 2 + sig_len + 1
        if code == HEADER_SIGNATURE and sig == "g":
            length = blob[pos]
            return blob[pos + 1 : pos + 1 + length].decode("ascii", "replace")
        # skip the value: the header's variants hold s, o, g or u only
        if sig in ("s", "o"):
            pos += -pos % 4
            (length,) = struct.unpack_from(u32, blob, pos)
            pos += 4 + length + 1
        elif sig == "g":
            pos += 1 + blob[pos] + 1
        elif sig == "u":
            pos += -pos % 4
            pos += 4
        else:
            raise WireError(f"header field of type {sig!r}")
    return ""
