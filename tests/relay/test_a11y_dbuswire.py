"""``relay.a11y.dbuswire``: D-Bus messages read from their bytes, and method calls written.

Messages are written here by a small encoder of the D-Bus wire format (both byte orders);
the reader and the call writer are also used on every accessibility read of the integration
tests, against real apps and a real bus."""

from __future__ import annotations

import contextlib
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.a11y.dbuswire import (
    ERROR,
    METHOD_CALL,
    WireError,
    message_length,
    method_call,
    read_body,
    read_message,
)
from tests.support.examples import examples

pytestmark = pytest.mark.unit

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
        elif t == "v":  # (signature, value)
            self.put("g", v[0])
            self.put(v[0], v[1])
        elif t.startswith("a"):
            self.pad(4)
            at = len(self.buf)
            self.buf += b"\0\0\0\0"
            self.pad(8 if t[1] in "({xd" else 4 if t[1] in "siuob" else 1)
            start = len(self.buf)
            for item in v.items() if isinstance(v, dict) else v:
                self.put(t[1:], item)
            struct.pack_into(self.p + "I", self.buf, at, len(self.buf) - start)
        elif t.startswith(("(", "{")):
            self.pad(8)
            for part, item in zip(split(t[1:-1]), v, strict=True):
                self.put(part, item)


def split(sig: str) -> list[str]:
    out, i = [], 0
    while i < len(sig):
        j = i
        while sig[j] == "a":
            j += 1
        if sig[j] in "({":
            depth = 0
            while True:
                depth += {"(": 1, ")": -1, "{": 1, "}": -1}.get(sig[j], 0)
                j += 1
                if depth == 0:
                    break
        else:
            j += 1
        out.append(sig[i:j])
        i = j
    return out


def message(
    sig: str,
    values: tuple[Any, ...],
    little: bool = True,
    reply_to: int = 3,
    error: str | None = None,
    serial: int = 7,
) -> bytes:
    """A method-return (or, with ``error``, error) message with ``values`` of ``sig``."""
    body = Writer(little)
    for t, v in zip(split(sig), values, strict=True):
        body.put(t, v)
    header = Writer(little)
    header.buf += (b"l" if little else b"B") + bytes([2 if error is None else 3, 0, 1])
    header.buf += struct.pack(header.p + "II", len(body.buf), serial)
    fields = Writer(little)
    fields.buf += bytes(16)  # fields are aligned as if they started at offset 16
    fields.pad(8)
    fields.buf += bytes([5, 1]) + b"u\0"  # REPLY_SERIAL, u
    fields.put("u", reply_to)
    if error is not None:
        fields.pad(8)
        fields.buf += bytes([4, 1]) + b"s\0"  # ERROR_NAME, s
        fields.put("s", error)
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
items = st.lists(
    st.tuples(
        ref,
        ref,
        ref,
        st.integers(-(2**31), 2**31 - 1),
        st.integers(-(2**31), 2**31 - 1),
        st.lists(names, max_size=4),
        names,
        st.integers(0, 2**32 - 1),
        names,
        st.lists(st.integers(0, 2**32 - 1), max_size=2),
    ),
    max_size=20,
)


@settings(max_examples=examples(60), deadline=None)
@given(items, st.booleans())
def test_a_cache_reply_reads_back_exactly(values, little):
    sig, read = read_body(message(CACHE_ITEM, (values,), little))
    assert sig == CACHE_ITEM
    assert read == ([tuple(list(x) if isinstance(x, list) else x for x in v) for v in values],)


def test_mixed_fixed_types_are_aligned():
    values = (7, True, -3, 2**40, 1.5, "ok", [1, 2, 3], (9, "x"))
    sig, read = read_body(message("ybixdsau(ys)", values))
    assert read == values and sig == "ybixdsau(ys)"


@settings(max_examples=examples(100), deadline=None)
@given(st.binary(max_size=200))
def test_garbage_is_a_wire_error_never_a_crash(blob):
    with contextlib.suppress(WireError):
        read_body(blob)


def test_a_truncated_reply_is_a_wire_error():
    blob = message(
        CACHE_ITEM,
        ([((":1.0", "/a"), (":1.0", "/b"), (":1.0", "/c"), 0, 1, ["x"], "n", 43, "d", [1, 0])],),
    )
    with pytest.raises(WireError):
        read_body(blob[:-9])


def test_body_types_it_does_not_read_are_refused():
    blob = message("u", (1,))
    signature_field = b"\x08\x01g\x00\x01u\x00"
    assert signature_field in blob
    with pytest.raises(WireError, match="not read here"):
        read_body(blob.replace(signature_field, b"\x08\x01g\x00\x01h\x00"))  # a file descriptor


def test_header_fields_of_unknown_types_are_refused():
    blob = message("u", (1,))
    serial_field = b"\x05\x01u\x00"
    assert serial_field in blob
    with pytest.raises(WireError, match="header field"):
        read_body(blob.replace(serial_field, b"\x05\x01v\x00"))


def test_variants_and_dictionaries_read_as_their_values():
    # Properties.Get answers a variant, GetAll a dictionary of them
    props = {"Name": ("s", "Save"), "ChildCount": ("i", 2), "Parent": ("(so)", (":1.4", "/a"))}
    _, read = read_body(message("va{sv}", (("s", "Save"), props)))
    assert read == ("Save", {"Name": "Save", "ChildCount": 2, "Parent": (":1.4", "/a")})


def test_a_variant_of_several_types_is_refused():
    blob = message("v", (("s", "x"),))
    with pytest.raises(WireError):
        read_body(blob.replace(b"\x01s\x00", b"\x02si"))


def test_an_error_reply_names_the_error_and_the_call_it_answers():
    read = read_message(
        message(
            "s", ("no such object",), reply_to=41, error="org.freedesktop.DBus.Error.UnknownObject"
        )
    )
    assert (read.kind, read.reply_serial, read.error_name) == (
        ERROR,
        41,
        "org.freedesktop.DBus.Error.UnknownObject",
    )
    assert read.values == ("no such object",)


arguments = st.one_of(
    st.tuples(st.just("u"), st.tuples(st.integers(0, 2**32 - 1))),
    st.tuples(st.just("ss"), st.tuples(names, names)),
    st.tuples(
        st.just("ii"), st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1))
    ),
    st.tuples(st.just("isi"), st.tuples(st.integers(0, 99), names, st.integers(0, 99))),
    st.tuples(st.just("sas"), st.tuples(names, st.lists(names, max_size=4))),
    st.tuples(st.just(""), st.just(())),
)


@settings(max_examples=examples(80), deadline=None)
@given(arguments, st.integers(1, 2**32 - 1), names, names)
def test_a_written_call_reads_back_exactly(args, serial, member, path):
    signature, values = args
    blob = method_call(
        serial,
        ":1.5",
        "/" + path.replace("/", ""),
        "org.a11y.atspi.Text",
        member or "M",
        signature,
        values,
    )
    assert message_length(blob) == len(blob)
    read = read_message(blob)
    assert (read.kind, read.serial, read.signature) == (METHOD_CALL, serial, signature)
    assert read.values == values


def test_a_message_length_needs_the_fixed_header_only():
    blob = method_call(1, ":1.5", "/a", "i.f", "M", "s", ("x" * 100,))
    assert message_length(blob[:15]) is None
    assert message_length(blob[:16]) == len(blob)
    assert message_length(b"junk" + blob, 4) == len(blob)
    with pytest.raises(WireError):
        message_length(b"X" * 16)
