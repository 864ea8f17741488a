"""``relay.a11y.dbuswire``: D-Bus message bodies read from their bytes.

Messages are written here by a small encoder of the D-Bus wire format (both byte orders);
the reader is also used on every accessibility read of the integration tests, against real
apps' replies."""

from __future__ import annotations

import contextlib
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.a11y.dbuswire import WireError, read_body

FIXED = {"y": ("B", 1), "b": ("I", 4), "i": ("i", 4), "u": ("I", 4), "x": ("q", 8), "d": ("d", 8)}


class Writer:
    def __init__(self, little: bool) -> None:
        self.p = "<" if little else ">"
        self.buf = bytearray()

    def pad(self, n: int) -> None:
        self.buf += b"\0" * (-len(self.buf) % n)

    def put(self, t: str, v: Any) -> None:
        if t in FIXED:
            code, align = FIXED[t]
            self.pad(align)
            self.buf += struct.pack(self.p + code, int(v) if t == "b" else v)
        elif t in "so":
            self.pad(4)
            data = v.encode()
            self.buf += struct.pack(self.p + "I", len(data)) + data + b"\0"
        elif t == "g":
            self.buf += bytes([len(v)]) + v.encode() + b"\0"
        elif t.startswith("a"):
            self.pad(4)
            at = len(self.buf)
            self.buf += b"\0\0\0\0"
            self.pad(8 if t[1] in "(xd" else 4 if t[1] in "siuob" else 1)
            start = len(self.buf)
            for item in v:
                self.put(t[1:], item)
            struct.pack_into(self.p + "I", self.buf, at, len(self.buf) - start)
        elif t.startswith("("):
            self.pad(8)
            for part, item in zip(split(t[1:-1]), v, strict=True):
                self.put(part, item)


def split(sig: str) -> list[str]:
    out, i = [], 0
    while i < len(sig):
        j = i
        while sig[j] == "a":
            j += 1
        if sig[j] == "(":
            depth = 0
            while True:
                depth += {"(": 1, ")": -1}.get(sig[j], 0)
                j += 1
                if depth == 0:
                    break
        else:
            j += 1
        out.append(sig[i:j])
        i = j
    return out


def message(sig: str, values: tuple[Any, ...], little: bool = True) -> bytes:
    """A method-return message with ``values`` of ``sig`` and a signature header field."""
    body = Writer(little)
    for t, v in zip(split(sig), values, strict=True):
        body.put(t, v)
    header = Writer(little)
    header.buf += (b"l" if little else b"B") + bytes([2, 0, 1])
    header.buf += struct.pack(header.p + "II", len(body.buf), 7)
    fields = Writer(little)
    fields.buf += bytes(16)  # fields are aligned as if they started at offset 16
    fields.pad(8)
    fields.buf += bytes([5, 1]) + b"u\0"  # REPLY_SERIAL, u
    fields.put("u", 3)
    fields.pad(8)
    fields.buf += bytes([8, 1]) + b"g\0"  # SIGNATURE, g
    fields.put("g", sig)
    field_bytes = bytes(fields.buf[16:])
    header.buf += struct.pack(header.p + "I", len(field_bytes)) + field_bytes
    header.pad(8)
    return bytes(header.buf + body.buf)


CACHE_ITEM = "a((so)(so)(so)iiassusau)"
names = st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=12)
ref = st.tuples(names, names)
items = st.lists(st.tuples(ref, ref, ref, st.integers(-(2**31), 2**31 - 1),
                           st.integers(-(2**31), 2**31 - 1), st.lists(names, max_size=4), names,
                           st.integers(0, 2**32 - 1), names,
                           st.lists(st.integers(0, 2**32 - 1), max_size=2)),
                 max_size=20)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(items, st.booleans())
def test_a_cache_reply_reads_back_exactly(values, little):
    sig, read = read_body(message(CACHE_ITEM, (values,), little))
    assert sig == CACHE_ITEM
    assert read == ([tuple(list(x) if isinstance(x, list) else x for x in v) for v in values],)


def test_mixed_fixed_types_are_aligned():
    values = (7, True, -3, 2**40, 1.5, "ok", [1, 2, 3], (9, "x"))
    sig, read = read_body(message("ybixdsau(ys)", values))
    assert read == values and sig == "ybixdsau(ys)"


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_is_a_wire_error_never_a_crash(blob):
    with contextlib.suppress(WireError):
        read_body(blob)


def test_a_truncated_reply_is_a_wire_error():
    blob = message(CACHE_ITEM, ([((":1.0", "/a"), (":1.0", "/b"), (":1.0", "/c"), 0, 1,
                                  ["x"], "n", 43, "d", [1, 0])],))  # fmt: skip
    with pytest.raises(WireError):
        read_body(blob[:-9])


def test_body_types_it_does_not_read_are_refused():
    blob = message("u", (1,))
    signature_field = b"\x08\x01g\x00\x01u\x00"
    assert signature_field in blob
    with pytest.raises(WireError, match="not read here"):
        read_body(blob.replace(signature_field, b"\x08\x01g\x00\x01v\x00"))


def test_header_fields_of_unknown_types_are_refused():
    blob = message("u", (1,))
    serial_field = b"\x05\x01u\x00"
    assert serial_field in blob
    with pytest.raises(WireError, match="header field"):
        read_body(blob.replace(serial_field, b"\x05\x01v\x00"))
