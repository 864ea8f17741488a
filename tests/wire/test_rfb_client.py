"""The viewer-side RFB parser: which bytes were a person's input, whatever the chunking.

Byte vectors of every client message noVNC sends, each fed whole, split at every byte and in
random chunks; handshakes of RFB 3.3, 3.7 and 3.8; a stream it cannot follow stops being
parsed (and says why) without an exception; fuzzed input never raises.
"""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.examples import examples
from wire.rfb_client import CLIPBOARD_PROVIDE, EXTENDED_MOUSE_BUTTONS, ClientInput, RfbClientStream

pytestmark = pytest.mark.unit

HANDSHAKE_38 = b"RFB 003.008\n" + b"\x01" + b"\x01"  # version, security None, ClientInit shared
HANDSHAKE_37 = b"RFB 003.007\n" + b"\x01" + b"\x00"
HANDSHAKE_33 = b"RFB 003.003\n" + b"\x01"  # 3.3: the server names the security type


def set_pixel_format() -> bytes:
    return (
        b"\x00\x00\x00\x00"
        + bytes([32, 24, 0, 1])
        + struct.pack(">HHH", 255, 255, 255)
        + (bytes([0, 8, 16, 0, 0, 0]))
    )


def set_encodings(*encodings: int) -> bytes:
    return struct.pack(">BBH", 2, 0, len(encodings)) + struct.pack(
        f">{len(encodings)}i", *encodings
    )


def update_request(incremental: bool = True) -> bytes:
    return struct.pack(">BBHHHH", 3, int(incremental), 0, 0, 1280, 800)


def key_event(keysym: int = 0x61, down: bool = True) -> bytes:
    return struct.pack(">BBHI", 4, int(down), 0, keysym)


def pointer_event(x: int = 10, y: int = 20, mask: int = 0) -> bytes:
    return struct.pack(">BBHH", 5, mask, x, y)


def extended_pointer_event(x: int = 10, y: int = 20, mask: int = 0x100) -> bytes:
    return struct.pack(">BBHHB", 5, (mask & 0x7F) | 0x80, x, y, (mask >> 7) & 0xFF)


def cut_text(text: bytes) -> bytes:
    return struct.pack(">BxxxI", 6, len(text)) + text


def extended_clipboard(flags: int, payload: bytes = b"") -> bytes:
    body = struct.pack(">I", flags) + payload
    return struct.pack(">Bxxxi", 6, -len(body)) + body


def continuous_updates() -> bytes:
    return struct.pack(">BBHHHH", 150, 1, 0, 0, 1280, 800)


def fence(payload: bytes = b"abc") -> bytes:
    return struct.pack(">BxxxIB", 248, 0x80000000, len(payload)) + payload


def xvp() -> bytes:
    return bytes([250, 0, 1, 2])


def desktop_size(screens: int = 1) -> bytes:
    head = struct.pack(">BxHHBx", 251, 1920, 1080, screens)
    return head + b"".join(struct.pack(">IHHHHI", i, 0, 0, 1920, 1080, 0) for i in range(screens))


def qemu_key(down: bool = True) -> bytes:
    return struct.pack(">BBHII", 255, 0, int(down), 0x61, 30)


def qemu_audio(operation: int) -> bytes:
    head = struct.pack(">BBH", 255, 1, operation)
    return head + (struct.pack(">BBI", 3, 2, 48000) if operation == 2 else b"")


QUIET = [
    set_pixel_format(),
    set_encodings(7, -223, -224),
    update_request(),
    continuous_updates(),
    fence(),
    xvp(),
    desktop_size(2),
    qemu_audio(0),
    qemu_audio(2),
    extended_clipboard(0x1F000001, struct.pack(">I", 1024)),  # caps (as noVNC sends)
    extended_clipboard(0x08000000 | 1),
]  # notify
INPUT = [
    (key_event(), ClientInput.KEY),
    (key_event(down=False), ClientInput.KEY),
    (qemu_key(), ClientInput.KEY),
    (pointer_event(1, 1) + pointer_event(2, 1), ClientInput.POINTER),  # motion
    (pointer_event(mask=1), ClientInput.POINTER),  # a button
    (cut_text(b"hello"), ClientInput.CLIPBOARD),
    (extended_clipboard(CLIPBOARD_PROVIDE | 1, b"zlib-data"), ClientInput.CLIPBOARD),
]


def fed(stream: RfbClientStream, data: bytes, sizes: list[int]) -> ClientInput:
    """Feed ``data`` in chunks of ``sizes`` (the rest in one), union of the results."""
    seen, at = ClientInput.NONE, 0
    for size in sizes:
        seen |= stream.feed(data[at : at + size])
        at += size
    return seen | stream.feed(data[at:])


def after_handshake(*messages: bytes) -> RfbClientStream:
    stream = RfbClientStream()
    assert stream.feed(HANDSHAKE_38 + b"".join(messages)) is ClientInput.NONE
    return stream


@pytest.mark.parametrize("handshake", [HANDSHAKE_33, HANDSHAKE_37, HANDSHAKE_38])
def test_every_handshake_is_followed_into_the_session(handshake: bytes) -> None:
    stream = RfbClientStream()
    assert stream.feed(handshake) is ClientInput.NONE
    assert stream.feed(key_event()) is ClientInput.KEY
    assert stream.failed is None


@pytest.mark.parametrize("message", QUIET, ids=lambda m: f"type{m[0]}")
def test_messages_that_are_no_input_say_so_and_keep_the_stream_in_step(message: bytes) -> None:
    stream = after_handshake()
    assert stream.feed(message) is ClientInput.NONE
    assert stream.feed(key_event()) is ClientInput.KEY  # the next message is read right
    assert stream.failed is None


@pytest.mark.parametrize(("message", "kind"), INPUT, ids=lambda m: str(m)[:12])
def test_input_messages_are_reported_at_every_split_point(
    message: bytes, kind: ClientInput
) -> None:
    for split in range(len(message) + 1):
        stream = after_handshake()
        assert fed(stream, message, [split]) == kind, split
        assert stream.feed(update_request() + pointer_event(3, 4, 1)) is ClientInput.POINTER
        assert stream.failed is None


def test_a_whole_novnc_session_in_random_chunks_reports_the_same_input() -> None:
    session = HANDSHAKE_38 + b"".join([*QUIET, *(m for m, _ in INPUT), cut_text(b"x" * 70_000)])
    whole = RfbClientStream().feed(session)
    assert whole == ClientInput.KEY | ClientInput.POINTER | ClientInput.CLIPBOARD
    rng = random.Random(22)
    for _ in range(200):
        cuts = [rng.randint(0, 40) for _ in range(rng.randint(1, 60))]
        stream = RfbClientStream()
        assert fed(stream, session, cuts) == whole
        assert stream.failed is None
        assert stream.feed(key_event()) is ClientInput.KEY


def test_a_pointer_that_neither_moves_nor_presses_is_no_input() -> None:
    stream = after_handshake()
    assert stream.feed(pointer_event(5, 5)) is ClientInput.NONE  # where it already was
    assert stream.feed(pointer_event(5, 5)) is ClientInput.NONE  # the same again
    assert stream.feed(pointer_event(6, 5)) is ClientInput.POINTER  # moved
    assert stream.feed(pointer_event(6, 5, mask=4)) is ClientInput.POINTER  # pressed
    assert stream.feed(pointer_event(6, 5)) is ClientInput.POINTER  # released


def test_long_clipboard_text_is_passed_over_without_being_kept() -> None:
    stream = after_handshake()
    text = b"y" * 5_000_000
    message = cut_text(text)
    assert stream.feed(message[:100]) is ClientInput.CLIPBOARD
    for at in range(100, len(message), 65536):
        assert stream.feed(message[at : at + 65536]) is ClientInput.NONE
    assert len(stream._buffer) == 0
    assert stream.feed(key_event()) is ClientInput.KEY


def test_extended_pointer_events_have_seven_bytes_once_announced() -> None:
    stream = after_handshake(set_encodings(7, EXTENDED_MOUSE_BUTTONS))
    assert stream.feed(extended_pointer_event() + key_event()) == (
        ClientInput.POINTER | ClientInput.KEY
    )
    assert stream.failed is None
    plain = after_handshake(set_encodings(7))
    assert plain.feed(pointer_event(mask=0x7F)) is ClientInput.POINTER  # 6 bytes without it
    assert plain.feed(key_event()) is ClientInput.KEY


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (HANDSHAKE_38 + bytes([7, 0, 0, 0]), "unknown client message type 7"),
        (HANDSHAKE_38 + bytes([255, 9, 0, 0]), "unknown QEMU client message 9"),
        (b"RFB 003.008\n\x02", "security type 2"),
        (b"GET / HTTP/1.1\r\n", "not an RFB version"),
    ],
)
def test_a_stream_it_cannot_follow_stops_being_parsed(data: bytes, reason: str) -> None:
    stream = RfbClientStream()
    assert stream.feed(data) is ClientInput.NONE
    assert stream.failed is not None and reason in stream.failed
    assert stream.feed(key_event() * 10) is ClientInput.NONE  # ignored from now on


FUZZ = settings(
    max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@FUZZ
@given(st.lists(st.binary(max_size=64), max_size=20))
def test_random_bytes_never_raise(chunks: list[bytes]) -> None:
    stream = RfbClientStream()
    stream.feed(HANDSHAKE_38)
    for chunk in chunks:
        assert isinstance(stream.feed(chunk), ClientInput)


@FUZZ
@given(st.lists(st.sampled_from([m for m, _ in INPUT] + QUIET), max_size=30), st.randoms())
def test_any_message_sequence_in_any_chunking_matches_the_whole(
    messages: list[bytes], rng: random.Random
) -> None:
    data = HANDSHAKE_38 + b"".join(messages)
    whole = RfbClientStream().feed(data)
    cuts = [rng.randint(0, 12) for _ in range(rng.randint(0, 40))]
    stream = RfbClientStream()
    assert fed(stream, data, cuts) == whole
    assert stream.failed is None
