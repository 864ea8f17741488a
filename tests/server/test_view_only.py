"""A view-only viewer's stream: what asks to see goes on, every input is dropped.

Byte vectors of every client message noVNC sends (tests/wire/test_rfb_client.py), fed whole,
split at every byte and in random chunks: the forwarded bytes are exactly the handshake and
the messages that only ask to see, in order; a stream the server cannot measure ends.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.viewer.view_only import ViewOnlyBroken, ViewOnlyFilter
from tests.wire.test_rfb_client import (
    HANDSHAKE_33,
    HANDSHAKE_37,
    HANDSHAKE_38,
    continuous_updates,
    cut_text,
    desktop_size,
    extended_clipboard,
    extended_pointer_event,
    fence,
    key_event,
    pointer_event,
    qemu_audio,
    qemu_key,
    set_encodings,
    set_pixel_format,
    update_request,
    xvp,
)
from wire.rfb_client import CLIPBOARD_PROVIDE, EXTENDED_MOUSE_BUTTONS

pytestmark = pytest.mark.unit

SEEING = [
    set_pixel_format(),
    set_encodings(7, -223, EXTENDED_MOUSE_BUTTONS),
    update_request(),
    continuous_updates(),
    fence(),
    qemu_audio(0),
    qemu_audio(2),
]
INPUT = [
    key_event(),
    key_event(down=False),
    qemu_key(),
    pointer_event(1, 1),
    pointer_event(2, 1, mask=1),
    extended_pointer_event(),
    cut_text(b"rm -rf ~\n"),
    extended_clipboard(CLIPBOARD_PROVIDE | 1, b"zlib-data"),
    cut_text(b"x" * 70_000),
    xvp(),
    desktop_size(2),
]


def filtered(data: bytes, sizes: list[int]) -> bytes:
    stream, out, at = ViewOnlyFilter(), bytearray(), 0
    for size in sizes:
        out += stream.filter(data[at : at + size])
        at += size
    return bytes(out + stream.filter(data[at:]))


def session(handshake: bytes = HANDSHAKE_38) -> tuple[bytes, bytes]:
    """A viewer's whole stream, interleaving input and sight, and what may go on of it."""
    sent, kept = bytearray(handshake), bytearray(handshake)
    for seeing, message in zip(SEEING * 2, INPUT, strict=False):
        sent += message + seeing
        kept += seeing
    return bytes(sent), bytes(kept)


@pytest.mark.parametrize("handshake", [HANDSHAKE_33, HANDSHAKE_37, HANDSHAKE_38])
def test_input_is_dropped_and_what_asks_to_see_goes_on_in_order(handshake: bytes) -> None:
    sent, kept = session(handshake)
    stream = ViewOnlyFilter()
    assert stream.filter(sent) == kept
    assert stream.dropped == len(INPUT)


@pytest.mark.parametrize("message", INPUT, ids=lambda m: f"type{m[0]}-{len(m)}")
def test_an_input_message_split_anywhere_is_dropped_whole(message: bytes) -> None:
    head = HANDSHAKE_38 + set_encodings(EXTENDED_MOUSE_BUTTONS)  # 7-byte pointer events
    tail = update_request()
    for split in range(0, len(message) + 1, max(1, len(message) // 300)):
        assert filtered(head + message + tail, [len(head) + split]) == head + tail, split


@pytest.mark.parametrize("message", SEEING, ids=lambda m: f"type{m[0]}")
def test_a_message_that_asks_to_see_split_anywhere_goes_on_whole(message: bytes) -> None:
    for split in range(len(message) + 1):
        data = HANDSHAKE_38 + key_event() + message
        assert filtered(data, [len(HANDSHAKE_38) + 8 + split]) == HANDSHAKE_38 + message


@given(st.randoms(use_true_random=False))
def test_any_chunking_forwards_the_same_bytes(rng: random.Random) -> None:
    sent, kept = session()
    sizes = [rng.randint(0, 40_000) for _ in range(rng.randint(0, 12))]
    assert filtered(sent, sizes) == kept


def test_a_message_the_server_cannot_measure_ends_the_stream() -> None:
    stream = ViewOnlyFilter()
    assert stream.filter(HANDSHAKE_38 + update_request()) == HANDSHAKE_38 + update_request()
    with pytest.raises(ViewOnlyBroken):
        stream.filter(bytes([99, 0, 0, 0]) + key_event())
    with pytest.raises(ViewOnlyBroken):
        stream.filter(update_request())


def test_a_security_type_other_than_none_ends_the_stream() -> None:
    with pytest.raises(ViewOnlyBroken):
        ViewOnlyFilter().filter(b"RFB 003.008\n\x02")
