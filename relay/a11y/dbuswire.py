"""D-Bus messages to and from their wire bytes (pure, no I/O).

GLib's Python bindings unpack a reply value by value in Python; for an app's whole
accessibility cache (``GetItems``, thousands of values) that took ~170 ms of a 600-node
Chromium page, against a few milliseconds read here with ``struct``. Sending through GLib costs
too (~0.2-0.5 ms of the worker's time per call, most of a pipelined batch): method calls are
written here, and the worker's socket (``relay/a11y/dbusconn.py``) sends and reads them.

Only the types the accessibility bus uses are read: ``y b n q i u x t d s o g v a ( ) { }``
(no file descriptors); anything else raises ``WireError``. Calls are written in little-endian
with arguments of the basic types and arrays of them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any, Final

ALIGN: Final = {
    "y": 1,
    "b": 4,
    "n": 2,
    "q": 2,
    "i": 4,
    "u": 4,
    "x": 8,
    "t": 8,
    "d": 8,
    "s": 4,
    "o": 4,
    "g": 1,
    "v": 1,
    "a": 4,
    "(": 8,
    "{": 8,
}
FIXED: Final = {
    "y": "B",
    "b": "I",
    "n": "h",
    "q": "H",
    "i": "i",
    "u": "I",
    "x": "q",
    "t": "Q",
    "d": "d",
}
# Message types and header fields (the D-Bus specification's numbers).
METHOD_CALL: Final = 1
METHOD_RETURN: Final = 2
ERROR: Final = 3
SIGNAL: Final = 4
HEADER_PATH: Final = 1
HEADER_INTERFACE: Final = 2
HEADER_MEMBER: Final = 3
HEADER_ERROR_NAME: Final = 4
HEADER_REPLY_SERIAL: Final = 5
HEADER_DESTINATION: Final = 6
HEADER_SIGNATURE: Final = 8
FIXED_HEADER: Final = 16
MAX_DEPTH: Final = 32
MAX_MESSAGE: Final = 1 << 27  # the specification's limit


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
    if char in "({":
        close = ")" if char == "(" else "}"
        j = i + 1
        while j < len(signature) and signature[j] != close:
            j = _type_end(signature, j, depth + 1)
        if j >= len(signature):
            raise WireError(f"unclosed {char} in {signature!r}")
        return j + 1
    if char in FIXED or char in "sogv":
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
    if char == "v":

        def variant(data: bytes, pos: int, origin: int) -> tuple[Any, int]:
            length = data[pos]
            inner = data[pos + 1 : pos + 1 + length].decode("ascii", "replace")
            if len(_split(inner)) != 1:
                raise WireError(f"a variant of {inner!r}")
            return _decoder(inner, little, depth + 1)(data, pos + length + 2, origin)

        return variant
    if char == "a":
        element = _decoder(t[1:], little, depth + 1)
        element_align = ALIGN[t[1]]
        as_dict = t[1] == "{"

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
            return (dict(items) if as_dict else items), pos

        return array
    if char in "({":
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


@dataclass(frozen=True)
class Message:
    """One message read: its type, serial, the serial it answers, an error's name, and its
    body (``values`` of ``signature``)."""

    kind: int
    serial: int
    reply_serial: int | None
    error_name: str | None
    signature: str
    values: tuple[Any, ...]


def read_body(blob: bytes) -> tuple[str, tuple[Any, ...]]:
    """``(signature, values)`` of a whole D-Bus message (as ``GDBusMessage.to_blob`` gives)."""
    message = read_message(blob)
    return message.signature, message.values


def message_length(buffer: bytes | bytearray, start: int = 0) -> int | None:
    """The length of the message that starts at ``start``, once its fixed header is there."""
    if len(buffer) - start < FIXED_HEADER:
        return None
    if buffer[start] not in (0x6C, 0x42):  # "l", "B"
        raise WireError("not a D-Bus message")
    u32 = "<I" if buffer[start] == 0x6C else ">I"
    (body_length,) = struct.unpack_from(u32, buffer, start + 4)
    (fields_length,) = struct.unpack_from(u32, buffer, start + 12)
    header = FIXED_HEADER + int(fields_length)
    total = header + (-header % 8) + int(body_length)
    if total > MAX_MESSAGE:
        raise WireError("message too large")
    return total


def read_message(blob: bytes, body: bool = True) -> Message:
    """A whole message, header and (unless not ``body``) body."""
    if len(blob) < FIXED_HEADER or blob[:1] not in (b"l", b"B"):
        raise WireError("not a D-Bus message")
    little = blob[:1] == b"l"
    serial, fields_length = struct.unpack_from("<II" if little else ">II", blob, 8)
    try:
        fields = _header_fields(blob, FIXED_HEADER, FIXED_HEADER + fields_length, little)
    except (struct.error, IndexError) as err:
        raise WireError("a header field runs past the message") from err
    signature = str(fields.get(HEADER_SIGNATURE, ""))
    start = FIXED_HEADER + fields_length
    start += -start % 8
    pos, values = start, []
    try:
        for t in _split(signature) if body else ():
            value, pos = _decoder(t, little)(blob, pos, start)
            values.append(value)
    except (struct.error, IndexError) as err:
        raise WireError("a value runs past the message") from err
    reply_serial = fields.get(HEADER_REPLY_SERIAL)
    error_name = fields.get(HEADER_ERROR_NAME)
    return Message(
        blob[1],
        serial,
        reply_serial if isinstance(reply_serial, int) else None,
        error_name if isinstance(error_name, str) else None,
        signature,
        tuple(values),
    )


def _header_fields(blob: bytes, start: int, end: int, little: bool) -> dict[int, str | int]:
    """The header fields (each ``(y v)``, 8-aligned); their variants hold s, o, g or u."""
    pos = start
    u32 = "<I" if little else ">I"
    fields: dict[int, str | int] = {}
    while pos < end:
        pos += -pos % 8
        if pos >= end:
            break
        code = blob[pos]
        sig_len = blob[pos + 1]
        sig = blob[pos + 2 : pos + 2 + sig_len].decode("ascii", "replace")
        pos += 2 + sig_len + 1
        if sig in ("s", "o"):
            pos += -pos % 4
            (length,) = struct.unpack_from(u32, blob, pos)
            fields[code] = blob[pos + 4 : pos + 4 + length].decode("utf-8", "replace")
            pos += 4 + length + 1
        elif sig == "g":
            fields[code] = blob[pos + 1 : pos + 1 + blob[pos]].decode("ascii", "replace")
            pos += 1 + blob[pos] + 1
        elif sig == "u":
            pos += -pos % 4
            (fields[code],) = struct.unpack_from(u32, blob, pos)
            pos += 4
        else:
            raise WireError(f"header field of type {sig!r}")
    return fields


# -- writing -----------------------------------------------------------------------------------

_U32: Final = struct.Struct("<I")
_WRITTEN: Final = {
    "y": struct.Struct("<B"),
    "b": _U32,
    "n": struct.Struct("<h"),
    "q": struct.Struct("<H"),
    "i": struct.Struct("<i"),
    "u": _U32,
    "x": struct.Struct("<q"),
    "t": struct.Struct("<Q"),
    "d": struct.Struct("<d"),
}


def _put(out: bytearray, t: str, value: Any) -> None:
    """Append one value of the complete type ``t`` (basic types and arrays of them)."""
    char = t[0]
    out += bytes(-len(out) % ALIGN.get(char, 1))
    if char in _WRITTEN:
        out += _WRITTEN[char].pack(int(value) if char == "b" else value)
    elif char in "so":
        data = str(value).encode()
        out += _U32.pack(len(data)) + data + b"\0"
    elif char == "g":
        data = str(value).encode("ascii")
        out += bytes([len(data)]) + data + b"\0"
    elif char == "a" and (t[1:] in _WRITTEN or t[1:] in ("s", "o")):
        at = len(out)
        out += bytes(4)
        out += bytes(-len(out) % ALIGN[t[1]])
        start = len(out)
        for item in value:
            _put(out, t[1:], item)
        _U32.pack_into(out, at, len(out) - start)
    else:
        raise WireError(f"type {t!r} is not written here")


@lru_cache(maxsize=4096)
def _call_header(destination: str, path: str, interface: str, member: str, signature: str) -> bytes:
    """A method call's header fields, padded to 8 (the same for every call to one method of
    one object)."""
    fields = bytearray()
    for code, sig, value in (
        (HEADER_PATH, "o", path),
        (HEADER_INTERFACE, "s", interface),
        (HEADER_MEMBER, "s", member),
        (HEADER_DESTINATION, "s", destination),
        (HEADER_SIGNATURE, "g", signature),
    ):
        if code == HEADER_SIGNATURE and not signature:
            continue
        fields += bytes(-len(fields) % 8) + bytes([code, 1]) + sig.encode() + b"\0"
        _put(fields, sig, value)
    return _U32.pack(len(fields)) + fields + bytes(-(FIXED_HEADER + len(fields)) % 8)


def method_call(
    serial: int,
    destination: str,
    path: str,
    interface: str,
    member: str,
    signature: str = "",
    values: Sequence[Any] = (),
) -> bytes:
    """A method call's bytes (little-endian; ``signature`` without the outer parentheses)."""
    body = bytearray()
    for t, value in zip(_split(signature), values, strict=True):
        _put(body, t, value)
    head = _call_header(destination, path, interface, member, signature)
    return b"l\x01\x00\x01" + _U32.pack(len(body)) + _U32.pack(serial) + head + body
