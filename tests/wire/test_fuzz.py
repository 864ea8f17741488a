"""Fuzzing every wire parser: events or a ``ProtocolError``, never another exception or a hang.

Two kinds of input: hypothesis strategies (raw bytes and text, frames with a plausible header,
JSON objects shaped like messages, mutations of valid messages), and a deterministic loop of
seeded random mutations that runs the same inputs on every machine.
"""

from __future__ import annotations

import contextlib
import json
import random
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.examples import examples
from tests.support.processes import scaled
from wire.connection import (
    CancelReceived,
    ChannelClosed,
    ChannelCredit,
    ChannelData,
    Connection,
    EventReceived,
    HelloReceived,
    Notice,
    RequestReceived,
    ResponseReceived,
    Role,
    WelcomeReceived,
)
from wire.errors import ChannelCloseCode, ErrorCode, OpError, ProtocolError
from wire.frames import CloseFrame, CreditFrame, DataFrame, decode_frame, encode_frame
from wire.ids import ChannelId, RelayId, RequestId
from wire.messages import (
    Cancel,
    Event,
    Hello,
    Request,
    Response,
    Welcome,
    encode_message,
    parse_message,
)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(scaled(60))]

# Parsers get 2,000 examples each; every connection example feeds several frames to a
# connection in one of six states, so 600 of those cover more ground for the same time.
FUZZ = settings(
    max_examples=examples(2000), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
FUZZ_CONNECTION = settings(FUZZ, max_examples=examples(600))
WIRE_EVENTS = (
    HelloReceived,
    WelcomeReceived,
    RequestReceived,
    ResponseReceived,
    CancelReceived,
    EventReceived,
    ChannelData,
    ChannelCredit,
    ChannelClosed,
    Notice,
)
OPEN_CHANNELS = (ChannelId(0), ChannelId(1), ChannelId(7))
SMALL_LIMITS = {"max_text": 4096, "max_payload": 64, "window": 128}

HELLO = Hello(1, "0.1.0", ("session_identity", "screen"), ({"kind": "virtual", "slot": "main"},))
WELCOME = Welcome(RelayId("relay_1"), 10.0, 1 << 20, 16 << 20)
VALID_TEXTS = [
    encode_message(message)
    for message in (
        HELLO,
        WELCOME,
        Request(RequestId("s1"), "desktop.start", {"kind": "virtual", "slot": "main"}, 5000),
        Request(RequestId("r1"), "ping"),
        Response(RequestId("s1"), True, {"desktop_session_id": "ds_1"}),
        Response(RequestId("r1"), False, error=OpError(ErrorCode.BUSY).to_dict()),
        Cancel(RequestId("s1")),
        Event("desktop.changed", {"state": "failed", "reason": "xvfb exited"}),
    )
]
VALID_FRAMES = [
    encode_frame(frame)
    for frame in (
        DataFrame(ChannelId(7), b"RFB 003.008\n"),
        DataFrame(ChannelId(1), bytes(64)),
        CreditFrame(ChannelId(7), 4096),
        CloseFrame(ChannelId(1), ChannelCloseCode.TARGET_CLOSED, "x11vnc exited"),
    )
]


# -- connections in every phase and role ----------------------------------------------------


def _open_pair(**options: Any) -> tuple[Connection, Connection]:
    server, relay = Connection(Role.SERVER, **options), Connection(Role.RELAY, **options)
    relay.send_hello(HELLO)
    for out in relay.data_to_send():
        assert isinstance(out, str)
        server.receive_text(out)
    server.accept(WELCOME)
    for out in server.data_to_send():
        assert isinstance(out, str)
        relay.receive_text(out)
    for connection in (server, relay):
        for channel_id in OPEN_CHANNELS:
            connection.open_channel(channel_id)
        connection.send_request("desktop.status")  # s1 / r1 awaiting an answer
    # one request in each direction is being worked on
    server.receive_text(encode_message(Request(RequestId("r7"), "ping")))
    relay.receive_text(encode_message(Request(RequestId("s7"), "ping")))
    server.data_to_send()
    relay.data_to_send()
    return server, relay


def _server_fresh() -> Connection:
    return Connection(Role.SERVER, **SMALL_LIMITS)


def _server_hello_seen() -> Connection:
    server = _server_fresh()
    server.receive_text(encode_message(HELLO))
    return server


def _server_open() -> Connection:
    return _open_pair(**SMALL_LIMITS)[0]


def _relay_fresh() -> Connection:
    return Connection(Role.RELAY, **SMALL_LIMITS)


def _relay_hello_sent() -> Connection:
    relay = _relay_fresh()
    relay.send_hello(HELLO)
    relay.data_to_send()
    return relay


def _relay_open() -> Connection:
    return _open_pair(**SMALL_LIMITS)[1]


STATES: dict[str, Callable[[], Connection]] = {
    "server-fresh": _server_fresh,
    "server-hello-seen": _server_hello_seen,
    "server-open": _server_open,
    "relay-fresh": _relay_fresh,
    "relay-hello-sent": _relay_hello_sent,
    "relay-open": _relay_open,
}


def feed(connection: Connection, inputs: list[str | bytes]) -> int:
    """Feed frames until the peer would be disconnected; return how many were accepted."""
    for count, item in enumerate(inputs):
        try:
            if isinstance(item, str):
                events = connection.receive_text(item)
            else:
                events = connection.receive_bytes(item)
        except ProtocolError:
            return count
        assert isinstance(events, list)
        assert all(isinstance(event, WIRE_EVENTS) for event in events)
        check_output(connection)
    return len(inputs)


def check_output(connection: Connection) -> None:
    """Whatever the connection queues in answer must itself be valid for the peer."""
    for out in connection.data_to_send():
        if isinstance(out, str):
            parse_message(out, connection.max_text)
        else:
            decode_frame(out, connection.max_payload)


def parse_or_protocol_error(text: str) -> None:
    with contextlib.suppress(ProtocolError):
        parse_message(text, 4096)


def decode_or_protocol_error(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_frame(data, 64)


# -- seeded mutators -----------------------------------------------------------------------

SEED = 20_250_601
ROUNDS = 20_000
JSON_PIECES = [*list('{}[]":,-.0123456789eE \\'), "true", "null", "1e999", '"type"', '"id"']


def _random_bytes(rng: random.Random) -> bytes:
    if rng.random() < 0.3:
        return rng.randbytes(rng.randrange(0, 24))
    kind = rng.choice([0, 1, 1, 2, 2, 3, 3, 4, 255])
    channel_id = rng.choice([*OPEN_CHANNELS, rng.getrandbits(32)])
    body_size = rng.choice([0, 1, 2, 3, 4, 5, rng.randrange(0, 70)])
    return struct.pack("!BI", kind, channel_id) + rng.randbytes(body_size)


def _random_text(rng: random.Random) -> str:
    text = rng.choice(VALID_TEXTS)
    for _ in range(rng.randrange(1, 4)):
        at = rng.randrange(0, len(text) + 1)
        roll = rng.random()
        if roll < 0.4:
            piece = (
                rng.choice(JSON_PIECES) if rng.random() < 0.8 else chr(rng.randrange(0, 0x110000))
            )
            text = text[:at] + piece + text[at:]
        elif roll < 0.7:
            text = text[:at] + text[at + 1 :]
        elif roll < 0.85:
            text = text[:at] + rng.choice(JSON_PIECES) + text[at + 1 :]
        else:
            text = text[:at]
    return text


# -- strategies -----------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=4,
)
FIELDS = [
    "protocol",
    "relay_version",
    "capabilities",
    "desktops",
    "relay_id",
    "heartbeat_s",
    "max_frame",
    "id",
    "op",
    "args",
    "timeout_ms",
    "ok",
    "result",
    "error",
    "name",
    "data",
]
field_values = (
    json_values
    | st.sampled_from(["s1", "r1", "s7", "r7", "ping", "desktop.start", "", "x" * 65])
    | st.sampled_from([0, 1, 2, -1, 3_600_000, 3_600_001, True, False])
    | st.builds(lambda code: {"code": code, "message": "m"}, st.text(max_size=12))
)
message_shaped = st.builds(
    lambda kind, fields: json.dumps({"type": kind, **fields}),
    st.sampled_from(["hello", "welcome", "req", "res", "cancel", "event"]) | json_values,
    st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), field_values, max_size=4),
)


# A seed is one cheap draw; the seeded mutator (also used by the loop below) does the rest.
mutated_texts = st.integers(0, 2**32 - 1).map(lambda seed: _random_text(random.Random(seed)))
texts = st.text(max_size=200) | message_shaped | mutated_texts
framed_bytes = st.builds(
    lambda kind, channel_id, body: struct.pack("!BI", kind, channel_id) + body,
    st.sampled_from([0, 1, 2, 3, 4, 255]) | st.integers(0, 255),
    st.sampled_from(OPEN_CHANNELS) | st.integers(0, 2**32 - 1),
    st.binary(max_size=80) | st.sampled_from([b"\x00\x00\x00\x01", b"\x00\x00", b"\x00\x03ok"]),
)
binaries = st.binary(max_size=80) | framed_bytes | st.sampled_from(VALID_FRAMES)


# -- hypothesis fuzzers ---------------------------------------------------------------------


@FUZZ
@given(binaries)
def test_decode_frame_fuzz(data):
    decode_or_protocol_error(data)


@FUZZ
@given(texts)
def test_parse_message_fuzz(text):
    parse_or_protocol_error(text)


@FUZZ_CONNECTION
@given(st.binary(max_size=300))
def test_parse_message_fuzz_on_decoded_bytes(raw):
    parse_or_protocol_error(raw.decode("utf-8", errors="surrogateescape"))


@FUZZ_CONNECTION
@given(st.sampled_from(sorted(STATES)), st.lists(binaries, min_size=1, max_size=4))
def test_connection_receive_bytes_fuzz(state, inputs):
    feed(STATES[state](), inputs)


@FUZZ_CONNECTION
@given(st.sampled_from(sorted(STATES)), st.lists(texts, min_size=1, max_size=3))
def test_connection_receive_text_fuzz(state, inputs):
    feed(STATES[state](), inputs)


@settings(FUZZ, max_examples=examples(200))
@given(
    st.sampled_from(sorted(STATES)),
    st.lists(texts | binaries | st.sampled_from(VALID_TEXTS + VALID_FRAMES), max_size=8),
)
def test_connection_mixed_fuzz(state, inputs):
    feed(STATES[state](), inputs)


# -- deterministic seeded loop --------------------------------------------------------------


def test_seeded_random_inputs():
    rng = random.Random(SEED)
    names = sorted(STATES)
    connection = STATES["server-open"]()
    accepted = 0
    for round_number in range(ROUNDS):
        item: str | bytes
        if round_number % 2:
            item = _random_bytes(rng)
            decode_or_protocol_error(item)
        else:
            item = _random_text(rng)
            parse_or_protocol_error(item)
        if feed(connection, [item]) == 1:
            accepted += 1
        else:
            # the adapter would close this connection; carry on with a fresh one
            connection = STATES[rng.choice(names)]()
    # the mutations are close enough to valid input to reach past the parsers
    assert accepted > ROUNDS // 20


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        '{"type":' * 50_000,
        '{"type":"req","id":"a","op":"x","args":' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"type":"event","name":"n","data":{"x":' + '{"a":' * 3000 + "1" + "}" * 3000 + "}}",
        '{"type":"req","id":"a","op":"x","timeout_ms":1' + "0" * 5000 + "}",
        '{"type":"hello","protocol":1' + "0" * 5000 + ',"relay_version":"x"}',
        '{"type":"hello","protocol":1e999,"relay_version":"x"}',
        '{"type":"welcome","relay_id":"r","heartbeat_s":1e999,"max_frame":1}',
        '{"type":"\ud800"}',
        '{"type":"req","id":"\\ud800","op":"\\udfff"}',
        "\ufeff" + VALID_TEXTS[0],
        "\x00" * 100,
        pytest.param(
            '{"type":"welcome","relay_id":"r","heartbeat_s":1' + "0" * 400 + ',"max_frame":1}',
            id="huge-integer-heartbeat",
        ),
    ],
)
def test_pathological_text(text):
    parse_or_protocol_error(text)
    for state in STATES.values():
        feed(state(), [text])
