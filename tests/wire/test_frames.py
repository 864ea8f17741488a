"""Binary channel frames: byte vectors, decoding errors and round-trip properties."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.errors import ChannelCloseCode, CloseCode, FrameTooLarge, ProtocolError
from wire.frames import (
    DEFAULT_MAX_PAYLOAD,
    MAX_CHANNEL_ID,
    MAX_REASON_BYTES,
    ChannelFrame,
    CloseFrame,
    CreditFrame,
    DataFrame,
    FrameKind,
    decode_frame,
    encode_frame,
)
from wire.ids import ChannelId

pytestmark = pytest.mark.unit

VECTORS: list[tuple[ChannelFrame, bytes]] = [
    (DataFrame(ChannelId(7), b"hi"), b"\x01\x00\x00\x00\x07hi"),
    (DataFrame(ChannelId(0), b""), b"\x01\x00\x00\x00\x00"),
    (DataFrame(ChannelId(MAX_CHANNEL_ID), b"\x00\xff"), b"\x01\xff\xff\xff\xff\x00\xff"),
    (DataFrame(ChannelId(0x01020304), b"RFB 003.008\n"), b"\x01\x01\x02\x03\x04RFB 003.008\n"),
    (CreditFrame(ChannelId(7), 65536), b"\x02\x00\x00\x00\x07\x00\x01\x00\x00"),
    (CreditFrame(ChannelId(1), 262144), b"\x02\x00\x00\x00\x01\x00\x04\x00\x00"),
    (CreditFrame(ChannelId(2), 0xFFFFFFFF), b"\x02\x00\x00\x00\x02\xff\xff\xff\xff"),
    (CloseFrame(ChannelId(7), ChannelCloseCode.NORMAL), b"\x03\x00\x00\x00\x07\x00\x00"),
    (
        CloseFrame(ChannelId(7), ChannelCloseCode.CREDIT_EXCEEDED, "too much"),
        b"\x03\x00\x00\x00\x07\x00\x03too much",
    ),
    (
        CloseFrame(ChannelId(258), ChannelCloseCode.DESKTOP_STOPPED, "é"),
        b"\x03\x00\x00\x01\x02\x00\x06\xc3\xa9",
    ),
    (
        CloseFrame(ChannelId(9), ChannelCloseCode.VIEWER_GONE, "bye"),
        b"\x03\x00\x00\x00\x09\x00\x08bye",
    ),
]


@pytest.mark.parametrize(("frame", "data"), VECTORS)
def test_encode_gives_the_exact_bytes(frame, data):
    assert encode_frame(frame) == data


@pytest.mark.parametrize(("frame", "data"), VECTORS)
def test_decode_gives_the_frame_back(frame, data):
    assert decode_frame(data) == frame
    assert encode_frame(decode_frame(data)) == data


def test_kind_byte_values_are_fixed():
    assert [(kind.name, int(kind)) for kind in FrameKind] == [
        ("DATA", 1),
        ("CREDIT", 2),
        ("CLOSE", 3),
    ]


def test_channel_close_code_values_are_fixed():
    assert {code.name: int(code) for code in ChannelCloseCode} == {
        "NORMAL": 0,
        "ERROR": 1,
        "UNKNOWN_CHANNEL": 2,
        "CREDIT_EXCEEDED": 3,
        "TARGET_UNAVAILABLE": 4,
        "TARGET_CLOSED": 5,
        "DESKTOP_STOPPED": 6,
        "RELAY_GONE": 7,
        "VIEWER_GONE": 8,
    }


@pytest.mark.parametrize(
    "data",
    [bytearray(b"\x01\x00\x00\x00\x07hi"), memoryview(bytearray(b"\x01\x00\x00\x00\x07hi"))],
)
def test_decode_accepts_buffers_and_returns_bytes(data):
    frame = decode_frame(data)
    assert frame == DataFrame(ChannelId(7), b"hi")
    assert isinstance(frame, DataFrame)
    assert type(frame.payload) is bytes
    data[5:7] = b"!!"
    assert frame.payload == b"hi"  # a mutable buffer changing later does not change the payload


def test_decode_of_bytes_gives_a_read_only_view_without_copying():
    data = b"\x01\x00\x00\x00\x07" + b"x" * 100_000
    frame = decode_frame(data)
    assert isinstance(frame, DataFrame)
    assert isinstance(frame.payload, memoryview)
    assert frame.payload.obj is data  # the received frame itself, not a copy
    assert frame.payload.readonly
    assert frame.payload == b"x" * 100_000


def test_decode_of_a_read_only_view_keeps_viewing_the_same_buffer():
    buffer = bytearray(b"\x01\x00\x00\x00\x07" + b"y" * 100_000)
    frame = decode_frame(memoryview(buffer).toreadonly())
    assert isinstance(frame, DataFrame)
    assert isinstance(frame.payload, memoryview)
    assert frame.payload.readonly
    buffer[5] = ord("z")  # the same memory: no copy was made
    assert bytes(frame.payload[:2]) == b"zy"


# -- malformed frames -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "shorter than its 5-byte header"),
        (b"\x01", "shorter than its 5-byte header"),
        (b"\x01\x00\x00\x00", "shorter than its 5-byte header"),
        (b"\x00\x00\x00\x00\x07", "unknown binary frame kind 0"),
        (b"\x04\x00\x00\x00\x07abc", "unknown binary frame kind 4"),
        (b"\xff\x00\x00\x00\x07", "unknown binary frame kind 255"),
        (b"\x02\x00\x00\x00\x07", "4-byte body"),
        (b"\x02\x00\x00\x00\x07\x00\x00\x01", "4-byte body"),
        (b"\x02\x00\x00\x00\x07\x00\x00\x00\x01\x00", "4-byte body"),
        (b"\x02\x00\x00\x00\x07\x00\x00\x00\x00", "grants nothing"),
        (b"\x03\x00\x00\x00\x07", "2-byte code"),
        (b"\x03\x00\x00\x00\x07\x00", "2-byte code"),
    ],
)
def test_malformed_frames_raise_protocol_error(data, problem):
    with pytest.raises(ProtocolError, match=problem) as info:
        decode_frame(data)
    assert info.value.close_code is CloseCode.PROTOCOL_ERROR


def test_payload_above_the_limit_is_too_large():
    with pytest.raises(FrameTooLarge) as info:
        decode_frame(b"\x01\x00\x00\x00\x07" + b"x" * 17, max_payload=16)
    assert (info.value.size, info.value.limit) == (17, 16)
    assert info.value.close_code is CloseCode.MESSAGE_TOO_BIG


def test_payload_at_the_limit_is_accepted():
    assert decode_frame(b"\x01\x00\x00\x00\x07" + b"x" * 16, max_payload=16) == DataFrame(
        ChannelId(7), b"x" * 16
    )


def test_default_limit_is_one_mebibyte():
    assert DEFAULT_MAX_PAYLOAD == 1024 * 1024
    header = b"\x01\x00\x00\x00\x01"
    assert decode_frame(header + bytes(DEFAULT_MAX_PAYLOAD)) == DataFrame(
        ChannelId(1), bytes(DEFAULT_MAX_PAYLOAD)
    )
    with pytest.raises(FrameTooLarge):
        decode_frame(header + bytes(DEFAULT_MAX_PAYLOAD + 1))


def test_limit_applies_to_every_kind():
    with pytest.raises(FrameTooLarge):
        decode_frame(b"\x03\x00\x00\x00\x07\x00\x00" + b"r" * 10, max_payload=8)


def test_close_with_an_unknown_code_reads_as_error():
    frame = decode_frame(b"\x03\x00\x00\x00\x07\x10\x00why")
    assert frame == CloseFrame(ChannelId(7), ChannelCloseCode.ERROR, "why")


def test_close_with_invalid_utf8_reason_is_replaced_not_rejected():
    frame = decode_frame(b"\x03\x00\x00\x00\x07\x00\x01\xff\xfeok")
    assert frame == CloseFrame(ChannelId(7), ChannelCloseCode.ERROR, "\ufffd\ufffdok")


def test_close_reason_is_cut_to_123_bytes():
    data = encode_frame(CloseFrame(ChannelId(1), ChannelCloseCode.ERROR, "r" * 500))
    assert len(data) == 5 + 2 + MAX_REASON_BYTES
    frame = decode_frame(data)
    assert isinstance(frame, CloseFrame)
    assert frame.reason == "r" * MAX_REASON_BYTES


def test_close_reason_cut_keeps_whole_characters():
    data = encode_frame(CloseFrame(ChannelId(1), ChannelCloseCode.ERROR, "é" * 100))
    reason = data[7:]
    assert len(reason) <= MAX_REASON_BYTES
    assert reason.decode("utf-8") == "é" * (MAX_REASON_BYTES // 2)


# -- properties -----------------------------------------------------------------------------

channel_ids = st.integers(0, MAX_CHANNEL_ID).map(ChannelId)
data_frames = st.builds(DataFrame, channel_ids, st.binary(max_size=2048))
credit_frames = st.builds(CreditFrame, channel_ids, st.integers(1, 0xFFFFFFFF))
short_reasons = st.text(max_size=60).filter(lambda r: len(r.encode("utf-8")) <= MAX_REASON_BYTES)
close_frames = st.builds(CloseFrame, channel_ids, st.sampled_from(ChannelCloseCode), short_reasons)


@settings(deadline=None)
@given(data_frames)
def test_any_data_frame_round_trips(frame):
    data = encode_frame(frame)
    assert data[:5] == struct.pack("!BI", FrameKind.DATA, frame.channel_id)
    assert len(data) == 5 + len(frame.payload)
    assert decode_frame(data) == frame


@settings(deadline=None)
@given(credit_frames)
def test_any_credit_frame_round_trips(frame):
    data = encode_frame(frame)
    assert len(data) == 9
    assert decode_frame(data) == frame


@settings(deadline=None)
@given(close_frames)
def test_any_close_frame_round_trips(frame):
    data = encode_frame(frame)
    assert data[5:7] == struct.pack("!H", frame.code)
    assert decode_frame(data) == frame


@settings(deadline=None)
@given(st.sampled_from([FrameKind.DATA, FrameKind.CREDIT]), channel_ids, st.binary(max_size=64))
def test_every_decodable_data_or_credit_frame_re_encodes_to_its_bytes(kind, channel_id, body):
    data = struct.pack("!BI", kind, channel_id) + body
    try:
        frame = decode_frame(data)
    except ProtocolError:
        return
    assert encode_frame(frame) == data
