"""The sans-I/O connection: handshake, requests, events, limits and channel flow control.

A server and a relay :class:`Connection` are wired back to back in memory: whatever one
queues is fed to the other.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.examples import examples
from wire.connection import (
    DEFAULT_WINDOW,
    MAX_CREDIT,
    MAX_FRAMES_PER_SEND,
    CancelReceived,
    ChannelClosed,
    ChannelCredit,
    ChannelData,
    Connection,
    EventReceived,
    HelloReceived,
    Notice,
    Phase,
    RequestReceived,
    ResponseReceived,
    Role,
    WelcomeReceived,
    WireEvent,
)
from wire.errors import (
    ChannelCloseCode,
    CloseCode,
    ErrorCode,
    FrameTooLarge,
    OpError,
    ProtocolError,
)
from wire.frames import (
    HEADER,
    CloseFrame,
    CreditFrame,
    DataFrame,
    decode_frame,
    encode_frame,
)
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

pytestmark = pytest.mark.unit

HELLO = Hello(1, "0.1.0", ("session_identity", "virtual_desktop"), ())
WELCOME = Welcome(RelayId("relay_1"), 10.0, 1024 * 1024, 16 * 1024 * 1024)
CH = ChannelId(7)


def deliver(source: Connection, target: Connection) -> list[WireEvent]:
    """Feed everything ``source`` queued into ``target``; return the events in order."""
    events: list[WireEvent] = []
    for frame in source.data_to_send():
        if isinstance(frame, str):
            events.extend(target.receive_text(frame))
        else:
            events.extend(target.receive_bytes(frame))
    return events


def connected(**options: Any) -> tuple[Connection, Connection]:
    """A server and a relay with the handshake done."""
    server = Connection(Role.SERVER, **options)
    relay = Connection(Role.RELAY, **options)
    # Each end announces the limits it reads with, as the real ones do.
    hello = dataclasses.replace(HELLO, max_frame=relay.max_payload, max_text=relay.max_text)
    relay.send_hello(hello)
    assert deliver(relay, server) == [HelloReceived(hello)]
    welcome = Welcome(WELCOME.relay_id, WELCOME.heartbeat_s, server.max_payload, server.max_text)
    server.accept(welcome)
    assert deliver(server, relay) == [WelcomeReceived(welcome)]
    return server, relay


def with_channel(**options: Any) -> tuple[Connection, Connection]:
    server, relay = connected(**options)
    server.open_channel(CH)
    relay.open_channel(CH)
    return server, relay


def frames(connection: Connection) -> list[Any]:
    """Decode what ``connection`` queued (text → message, bytes → channel frame)."""
    return [
        parse_message(out) if isinstance(out, str) else decode_frame(out, 1 << 30)
        for out in connection.data_to_send()
    ]


def data(channel_id: int, payload: bytes) -> bytes:
    return encode_frame(DataFrame(ChannelId(channel_id), payload))


def phase(connection: Connection) -> Phase:
    """The phase, read afresh (an earlier assert must not narrow it for the type checker)."""
    return connection.phase


def text(message: Any) -> str:
    return encode_message(message)


# -- handshake ------------------------------------------------------------------------------


def test_handshake():
    server = Connection(Role.SERVER)
    relay = Connection(Role.RELAY)
    assert (server.phase, relay.phase) == (Phase.HANDSHAKE, Phase.HANDSHAKE)

    relay.send_hello(HELLO)
    [hello_text] = relay.data_to_send()
    assert isinstance(hello_text, str)
    assert json.loads(hello_text)["type"] == "hello"
    assert server.receive_text(hello_text) == [HelloReceived(HELLO)]
    # the server admits the relay only once the adapter accepts it
    assert server.phase is Phase.HANDSHAKE
    assert server.data_to_send() == []

    server.accept(WELCOME)
    assert phase(server) is Phase.OPEN
    [welcome_text] = server.data_to_send()
    assert isinstance(welcome_text, str)
    assert parse_message(welcome_text) == WELCOME
    assert relay.receive_text(welcome_text) == [WelcomeReceived(WELCOME)]
    assert relay.phase is Phase.OPEN


def test_data_to_send_empties_the_buffer():
    relay = Connection(Role.RELAY)
    relay.send_hello(HELLO)
    assert len(relay.data_to_send()) == 1
    assert relay.data_to_send() == []


@pytest.mark.parametrize(
    "message",
    [
        Request(RequestId("r1"), "desktop.status"),
        Response(RequestId("r1"), True, {}),
        Cancel(RequestId("r1")),
        Event("desktop.changed", {"state": "failed"}),
        WELCOME,
    ],
)
def test_server_needs_hello_first(message):
    server = Connection(Role.SERVER)
    with pytest.raises(ProtocolError, match="expected hello first") as info:
        server.receive_text(text(message))
    assert info.value.close_code is CloseCode.HELLO_EXPECTED
    assert server.phase is Phase.HANDSHAKE


@pytest.mark.parametrize(
    "message",
    [
        Request(RequestId("s1"), "desktop.status"),
        Response(RequestId("s1"), True, {}),
        Cancel(RequestId("s1")),
        Event("x", {}),
        HELLO,
    ],
)
def test_relay_needs_welcome_first(message):
    relay = Connection(Role.RELAY)
    relay.send_hello(HELLO)
    with pytest.raises(ProtocolError, match="expected welcome") as info:
        relay.receive_text(text(message))
    assert info.value.close_code is CloseCode.HELLO_EXPECTED
    assert relay.phase is Phase.HANDSHAKE


def test_server_rejects_requests_between_hello_and_accept():
    server = Connection(Role.SERVER)
    server.receive_text(text(HELLO))
    with pytest.raises(ProtocolError) as info:
        server.receive_text(text(Request(RequestId("r1"), "ping")))
    assert info.value.close_code is CloseCode.HELLO_EXPECTED


@pytest.mark.parametrize("role", list(Role))
@pytest.mark.parametrize(
    "payload", [data(7, b"hi"), b"\x02\x00\x00\x00\x07\x00\x00\x00\x01", b"", b"\xff"]
)
def test_binary_before_handshake(role, payload):
    connection = Connection(role)
    with pytest.raises(ProtocolError, match="before the handshake") as info:
        connection.receive_bytes(payload)
    assert info.value.close_code is CloseCode.HELLO_EXPECTED


def test_binary_between_hello_and_accept():
    server = Connection(Role.SERVER)
    server.receive_text(text(HELLO))
    with pytest.raises(ProtocolError) as info:
        server.receive_bytes(data(7, b"hi"))
    assert info.value.close_code is CloseCode.HELLO_EXPECTED


@pytest.mark.parametrize("version", [0, 2, -1, 10**12])
def test_unsupported_protocol_version(version):
    server = Connection(Role.SERVER)
    with pytest.raises(ProtocolError, match=f"unsupported protocol {version}") as info:
        server.receive_text(text(Hello(version, "9.9.9")))
    assert info.value.close_code is CloseCode.UNSUPPORTED_PROTOCOL
    # the hello did not count: accepting now is still refused
    with pytest.raises(ProtocolError, match="welcome before hello"):
        server.accept(WELCOME)


def test_welcome_before_hello_raises():
    server = Connection(Role.SERVER)
    with pytest.raises(ProtocolError, match="welcome before hello"):
        server.accept(WELCOME)
    assert server.phase is Phase.HANDSHAKE
    assert server.data_to_send() == []


def test_hello_twice_during_handshake():
    server = Connection(Role.SERVER)
    server.receive_text(text(HELLO))
    with pytest.raises(ProtocolError) as info:
        server.receive_text(text(HELLO))
    assert info.value.close_code is CloseCode.HELLO_EXPECTED


def test_hello_after_the_handshake():
    server, _ = connected()
    with pytest.raises(ProtocolError, match="handshake message after the handshake"):
        server.receive_text(text(HELLO))


def test_welcome_twice():
    _, relay = connected()
    with pytest.raises(ProtocolError, match="handshake message after the handshake"):
        relay.receive_text(text(WELCOME))


def test_each_role_sends_only_its_own_handshake_message():
    with pytest.raises(ProtocolError, match="only the relay sends hello"):
        Connection(Role.SERVER).send_hello(HELLO)
    with pytest.raises(ProtocolError, match="only the server sends welcome"):
        Connection(Role.RELAY).accept(WELCOME)


@pytest.mark.parametrize("role", list(Role))
def test_nothing_is_sent_before_the_handshake(role):
    connection = Connection(role)
    with pytest.raises(ProtocolError, match="not open"):
        connection.send_request("ping")
    assert connection.data_to_send() == []


def test_relay_cannot_send_events_before_welcome():
    relay = Connection(Role.RELAY)
    with pytest.raises(ProtocolError, match="not open"):
        relay.send_event("desktop.changed", {})


# -- requests -------------------------------------------------------------------------------


def test_server_request_and_relay_result():
    server, relay = connected()
    request_id = server.send_request("desktop.status", {"kind": "virtual"}, timeout_ms=5000)
    assert request_id == "s1"
    assert server.pending_requests == 1
    [event] = deliver(server, relay)
    assert event == RequestReceived(
        Request(RequestId("s1"), "desktop.status", {"kind": "virtual"}, 5000)
    )
    relay.send_result(request_id, {"desktops": []})
    assert deliver(relay, server) == [
        ResponseReceived(Response(RequestId("s1"), True, {"desktops": []}))
    ]
    assert server.pending_requests == 0


def test_relay_request_and_server_error():
    server, relay = connected()
    request_id = relay.send_request("screen.keyboard_state")
    assert request_id == "r1"
    [event] = deliver(relay, server)
    assert isinstance(event, RequestReceived)
    assert (event.request.op, event.request.args, event.request.timeout_ms) == (
        "screen.keyboard_state",
        {},
        30_000,
    )
    server.send_error(request_id, OpError(ErrorCode.NOT_FOUND, "no such desktop", {"slot": "x"}))
    [answer] = deliver(server, relay)
    assert answer == ResponseReceived(
        Response(
            RequestId("r1"),
            False,
            error={"code": "not_found", "message": "no such desktop", "details": {"slot": "x"}},
        )
    )
    assert relay.pending_requests == 0


def test_request_ids_are_unique_per_connection():
    server, relay = connected()
    ids = [server.send_request("ping") for _ in range(3)] + [relay.send_request("ping")]
    assert ids == ["s1", "s2", "s3", "r1"]


def test_responses_are_matched_by_id_in_any_order():
    server, relay = connected()
    first = server.send_request("desktop.start", {"slot": "a"})
    second = server.send_request("desktop.start", {"slot": "b"})
    received = deliver(server, relay)
    assert [e.request.id for e in received if isinstance(e, RequestReceived)] == [first, second]
    relay.send_result(second, "B")
    relay.send_result(first, "A")
    answers = deliver(relay, server)
    assert [
        (e.response.id, e.response.result) for e in answers if isinstance(e, ResponseReceived)
    ] == [
        (second, "B"),
        (first, "A"),
    ]
    assert server.pending_requests == 0


def test_response_for_unknown_id_is_a_notice():
    server, _relay = connected()
    events = server.receive_text(text(Response(RequestId("s99"), True, 1)))
    assert len(events) == 1
    assert isinstance(events[0], Notice)
    assert "s99" in events[0].message
    assert server.data_to_send() == []


def test_second_response_for_the_same_id_is_a_notice():
    server, relay = connected()
    request_id = server.send_request("ping")
    deliver(server, relay)
    answer = text(Response(request_id, True, {}))
    assert server.receive_text(answer) == [ResponseReceived(Response(request_id, True, {}))]
    [notice] = server.receive_text(answer)
    assert isinstance(notice, Notice)


def test_duplicate_in_flight_request_id_gets_an_error_response():
    _server, relay = connected()
    request = text(Request(RequestId("s1"), "desktop.start"))
    assert relay.receive_text(request) == [
        RequestReceived(Request(RequestId("s1"), "desktop.start"))
    ]
    [notice] = relay.receive_text(request)
    assert isinstance(notice, Notice)
    assert "duplicate" in notice.message
    [queued] = frames(relay)
    assert isinstance(queued, Response)
    assert (queued.id, queued.ok) == ("s1", False)
    assert queued.error is not None
    assert queued.error["code"] == ErrorCode.DUPLICATE_REQUEST.value == "duplicate_request"
    # the first request is still answered, exactly once
    relay.send_result(RequestId("s1"), "done")
    relay.send_result(RequestId("s1"), "again")
    assert frames(relay) == [Response(RequestId("s1"), True, "done")]
    # once answered, the id is free again
    assert relay.receive_text(request) == [
        RequestReceived(Request(RequestId("s1"), "desktop.start"))
    ]


def test_same_id_in_both_directions_is_not_a_duplicate():
    server, relay = connected()
    server.send_request("ping")  # s1 outgoing from the server
    deliver(server, relay)
    [event] = server.receive_text(text(Request(RequestId("s1"), "ping")))
    assert isinstance(event, RequestReceived)


def test_cancel_drops_the_answer():
    server, relay = connected()
    request_id = server.send_request("desktop.start", timeout_ms=100)
    deliver(server, relay)
    server.cancel(request_id)
    assert server.pending_requests == 0
    assert deliver(server, relay) == [CancelReceived(request_id)]
    relay.send_result(request_id, {"desktop_session_id": "ds_1"})
    relay.send_error(request_id, OpError(ErrorCode.CANCELLED))
    assert relay.data_to_send() == []


def test_late_answer_after_cancel_is_a_notice():
    server, relay = connected()
    request_id = server.send_request("desktop.start")
    deliver(server, relay)
    relay.send_result(request_id, "late")  # already on the wire when the server gives up
    server.cancel(request_id)
    [cancel] = server.data_to_send()
    assert isinstance(cancel, str)
    [notice] = deliver(relay, server)
    assert isinstance(notice, Notice)
    # the cancel then reaches a relay that already answered: nothing more is sent
    assert relay.receive_text(cancel) == [CancelReceived(request_id)]
    assert relay.data_to_send() == []


def test_cancel_of_unknown_or_answered_request_sends_nothing():
    server, relay = connected()
    server.cancel(RequestId("s42"))
    request_id = server.send_request("ping")
    deliver(server, relay)
    relay.send_result(request_id, None)
    deliver(relay, server)
    server.cancel(request_id)
    assert server.data_to_send() == []


def test_cancel_for_unknown_request_is_reported():
    _, relay = connected()
    assert relay.receive_text(text(Cancel(RequestId("s9")))) == [CancelReceived(RequestId("s9"))]
    assert relay.data_to_send() == []


def test_answer_for_a_request_never_received_sends_nothing():
    _server, relay = connected()
    relay.send_result(RequestId("s1"), 1)
    relay.send_error(RequestId("s1"), OpError(ErrorCode.INTERNAL))
    assert relay.data_to_send() == []


def test_request_args_default_to_an_empty_object():
    server, _ = connected()
    server.send_request("desktop.status")
    [request] = frames(server)
    assert request == Request(RequestId("s1"), "desktop.status", {}, 30_000)


# -- events ---------------------------------------------------------------------------------


def test_events_flow_from_relay_to_server():
    server, relay = connected()
    relay.send_event("desktop.changed", {"state": "failed", "reason": "xvfb exited"})
    assert deliver(relay, server) == [
        EventReceived(Event("desktop.changed", {"state": "failed", "reason": "xvfb exited"}))
    ]


def test_server_cannot_send_events():
    server, _ = connected()
    with pytest.raises(ProtocolError, match="only the relay sends events"):
        server.send_event("desktop.changed", {})


def test_relay_rejects_events():
    _, relay = connected()
    with pytest.raises(ProtocolError, match="relay to server only"):
        relay.receive_text(text(Event("desktop.changed", {})))


# -- bad input once open --------------------------------------------------------------------


@pytest.mark.parametrize("role", list(Role))
@pytest.mark.parametrize(
    ("bad", "close_code"),
    [
        ("{nope", CloseCode.UNSUPPORTED_DATA),
        ("[]", CloseCode.PROTOCOL_ERROR),
        ('"req"', CloseCode.PROTOCOL_ERROR),
        ('{"type":"rpc","id":"a"}', CloseCode.PROTOCOL_ERROR),
        ('{"type":"req","id":"a","op":7}', CloseCode.PROTOCOL_ERROR),
        ('{"type":"req","id":"a","op":"x","timeout_ms":0}', CloseCode.PROTOCOL_ERROR),
        ('{"type":"req","id":"a","op":"x","timeout_ms":3600001}', CloseCode.PROTOCOL_ERROR),
        ('{"type":"req","id":"a","op":"x","timeout_ms":true}', CloseCode.PROTOCOL_ERROR),
        ('{"type":"res","id":"a","ok":1}', CloseCode.PROTOCOL_ERROR),
        ('{"type":"cancel","id":5}', CloseCode.PROTOCOL_ERROR),
    ],
)
def test_malformed_text_when_open(role, bad, close_code):
    server, relay = connected()
    connection = server if role is Role.SERVER else relay
    with pytest.raises(ProtocolError) as info:
        connection.receive_text(bad)
    assert info.value.close_code is close_code


@pytest.mark.parametrize(
    "bad",
    [
        b"\x01\x00\x00",
        b"\x09\x00\x00\x00\x07",
        b"\x02\x00\x00\x00\x07\x00",
        b"\x02\x00\x00\x00\x07\x00\x00\x00\x00",
        b"\x03\x00\x00\x00\x07",
    ],
)
def test_malformed_binary_when_open(bad):
    server, _ = with_channel()
    with pytest.raises(ProtocolError):
        server.receive_bytes(bad)


def test_oversized_text():
    server, _relay = connected(max_text=200)
    message = text(Event("x", {"pad": ""}))
    padded = text(Event("x", {"pad": "p" * (200 - len(message))}))
    assert len(padded) == 200
    [event] = server.receive_text(padded)
    assert isinstance(event, EventReceived)
    with pytest.raises(FrameTooLarge) as info:
        server.receive_text(padded + " ")  # 201 characters
    assert info.value.close_code is CloseCode.MESSAGE_TOO_BIG
    assert (info.value.size, info.value.limit) == (201, 200)


def test_oversized_text_during_handshake():
    server = Connection(Role.SERVER, max_text=10)
    with pytest.raises(FrameTooLarge):
        server.receive_text(text(HELLO))


def test_oversized_binary():
    server, _relay = with_channel(max_payload=16)
    assert server.receive_bytes(data(7, b"x" * 16)) == [ChannelData(CH, b"x" * 16)]
    with pytest.raises(FrameTooLarge) as info:
        server.receive_bytes(data(7, b"x" * 17))
    assert info.value.close_code is CloseCode.MESSAGE_TOO_BIG
    with pytest.raises(FrameTooLarge):
        server.receive_bytes(data(99, b"x" * 17))  # the limit applies before channel lookup


# -- channels -------------------------------------------------------------------------------


def test_data_flows_both_ways():
    server, relay = with_channel()
    assert server.send_data(CH, b"RFB 003.008\n") == 12
    assert relay.send_data(CH, b"RFB 003.008\n\x01") == 13
    assert deliver(server, relay) == [ChannelData(CH, b"RFB 003.008\n")]
    assert deliver(relay, server) == [ChannelData(CH, b"RFB 003.008\n\x01")]


def test_open_channel_twice_is_refused():
    server, _ = connected()
    server.open_channel(CH)
    with pytest.raises(ProtocolError, match="already open"):
        server.open_channel(CH)


def test_channel_bookkeeping():
    server, _ = connected(window=4096)
    assert server.channel_ids == []
    assert server.send_window(CH) == 0
    server.open_channel(CH)
    server.open_channel(ChannelId(8))
    assert server.channel_ids == [CH, ChannelId(8)]
    assert server.has_channel(CH)
    assert not server.has_channel(ChannelId(9))
    assert server.send_window(CH) == 4096


def test_default_window_is_one_mebibyte():
    assert DEFAULT_WINDOW == 1024 * 1024
    server, _ = with_channel()
    assert server.send_window(CH) == DEFAULT_WINDOW


def test_data_on_unknown_channel_is_answered_with_close():
    _server, relay = connected()
    [notice] = relay.receive_bytes(data(42, b"hello"))
    assert isinstance(notice, Notice)
    assert frames(relay) == [
        CloseFrame(ChannelId(42), ChannelCloseCode.UNKNOWN_CHANNEL, "unknown channel")
    ]


def test_credit_or_close_on_unknown_channel_is_ignored():
    server, _ = connected()
    assert server.receive_bytes(encode_frame(CreditFrame(ChannelId(3), 10))) == []
    assert (
        server.receive_bytes(encode_frame(CloseFrame(ChannelId(3), ChannelCloseCode.NORMAL))) == []
    )
    assert server.data_to_send() == []


def test_send_data_splits_into_max_payload_frames_within_credit():
    server, _relay = with_channel(max_payload=4, window=10)
    assert server.send_data(CH, b"abcdefghijklmnopqrstuvwxy") == 10
    assert frames(server) == [
        DataFrame(CH, b"abcd"),
        DataFrame(CH, b"efgh"),
        DataFrame(CH, b"ij"),
    ]
    assert server.send_window(CH) == 0
    assert server.send_data(CH, b"klm") == 0
    assert server.data_to_send() == []


def test_send_data_on_unknown_channel_takes_nothing():
    server, _ = connected()
    assert server.send_data(ChannelId(3), b"abc") == 0
    assert server.data_to_send() == []


def test_send_data_of_nothing_sends_nothing():
    server, _ = with_channel()
    assert server.send_data(CH, b"") == 0
    assert server.data_to_send() == []


def test_data_in_place_is_the_same_frame_and_takes_the_credit_whole_or_not_at_all():
    server, relay = with_channel(window=100)
    room = HEADER.size + 3
    buffer = bytearray(room) + b"RFB 003.008\n"
    assert server.data_in_place(CH, buffer, room)
    assert server.data_to_send() == []  # nothing queued: the caller writes the frame
    assert bytes(buffer[3:]) == data(CH, b"RFB 003.008\n")
    assert relay.receive_bytes(bytes(buffer[3:])) == [ChannelData(CH, b"RFB 003.008\n")]
    assert server.send_window(CH) == 88
    too_big = bytearray(room) + bytes(89)
    assert not server.data_in_place(CH, too_big, room)  # 89 > 88: nothing taken
    assert too_big == bytearray(room) + bytes(89) and server.send_window(CH) == 88
    assert not server.data_in_place(ChannelId(3), bytearray(room) + b"x", room)
    with pytest.raises(ValueError, match="no room"):
        server.data_in_place(CH, bytearray(b"abc"), 2)


def test_data_in_place_respects_the_frame_size_limit():
    server, _ = with_channel(max_payload=4, window=100)
    assert not server.data_in_place(CH, bytearray(HEADER.size) + b"abcde", HEADER.size)
    assert server.data_in_place(CH, bytearray(HEADER.size) + b"abcd", HEADER.size)


def test_a_relay_sends_no_payload_over_the_servers_welcome_max_frame():
    server = Connection(Role.SERVER, max_payload=4)
    relay = Connection(Role.RELAY)  # reads frames of up to 1 MiB itself
    relay.send_hello(HELLO)
    deliver(relay, server)
    server.accept(Welcome(RelayId("relay_1"), 10.0, 4, 16 * 1024 * 1024))
    deliver(server, relay)
    server.open_channel(CH)
    relay.open_channel(CH)
    assert relay.send_data(CH, b"abcdefghij") == 10
    assert [len(f.payload) for f in frames(relay)] == [4, 4, 2]
    assert not relay.data_in_place(CH, bytearray(HEADER.size) + b"abcde", HEADER.size)
    assert not relay.whole_frame_possible(5) and relay.whole_frame_possible(4)
    assert relay.max_payload == 1024 * 1024  # what it accepts is still its own limit


def test_an_answer_over_the_servers_text_limit_is_an_error_and_the_link_stays_up():
    server = Connection(Role.SERVER, max_text=300)
    relay = Connection(Role.RELAY)  # its own limit is larger
    relay.send_hello(HELLO)
    deliver(relay, server)
    server.accept(Welcome(RelayId("relay_1"), 10.0, 1024, max_text=300))
    deliver(server, relay)
    big, small = server.send_request("screen.screenshot"), server.send_request("screen.size")
    [_, _] = deliver(server, relay)
    relay.send_result(big, {"image": "A" * 400})
    relay.send_result(small, {"width": 1280, "height": 800})
    too_big, fine = deliver(relay, server)  # the server never sees more than it reads
    assert isinstance(too_big, ResponseReceived) and not too_big.response.ok
    error = too_big.response.error or {}
    assert error["code"] == "limit_reached"
    assert "over the 300-byte message limit" in error["message"]
    assert isinstance(fine, ResponseReceived) and fine.response.result == {
        "width": 1280,
        "height": 800,
    }
    assert phase(server) is Phase.OPEN and phase(relay) is Phase.OPEN
    # Non-ASCII text is measured in the bytes it takes on the wire.
    wide = server.send_request("clipboard.get")
    deliver(server, relay)
    relay.send_result(wide, {"text": "☃" * 90})  # 90 characters, 270 bytes of snowmen
    [answer] = deliver(relay, server)
    assert isinstance(answer, ResponseReceived) and not answer.response.ok


def test_a_server_sends_a_relay_no_more_than_its_hello_says_it_reads():
    server = Connection(Role.SERVER)  # reads frames of up to 1 MiB itself
    relay = Connection(Role.RELAY, max_payload=4, max_text=300)
    relay.send_hello(dataclasses.replace(HELLO, max_frame=4, max_text=300))
    deliver(relay, server)
    server.accept(WELCOME)
    deliver(server, relay)
    server.open_channel(CH)
    relay.open_channel(CH)
    assert server.send_data(CH, b"abcdefghij") == 10
    assert [len(f.payload) for f in frames(server)] == [4, 4, 2]
    asked = relay.send_request("session.identity")
    deliver(relay, server)
    server.send_result(asked, {"pad": "x" * 400})
    [answer] = deliver(server, relay)  # an error the relay reads, not a frame it would refuse
    assert isinstance(answer, ResponseReceived) and not answer.response.ok
    assert (answer.response.error or {})["code"] == "limit_reached"


def test_a_peer_announcing_a_tiny_frame_limit_gets_bounded_work_per_send():
    server = Connection(Role.SERVER)
    relay = Connection(Role.RELAY)
    relay.send_hello(dataclasses.replace(HELLO, max_frame=1))  # allowed, if unwise
    deliver(relay, server)
    server.accept(WELCOME)
    deliver(server, relay)
    server.open_channel(CH)
    relay.open_channel(CH)
    assert server.send_data(CH, bytes(100_000)) == MAX_FRAMES_PER_SEND
    assert len(server.data_to_send()) == MAX_FRAMES_PER_SEND
    assert server.send_data(CH, bytes(10)) == 10  # the rest goes in the next calls


def test_a_whole_frame_is_possible_up_to_three_quarters_of_the_window():
    assert with_channel(window=1024)[0].whole_frame_possible(768)
    assert not with_channel(window=1024)[0].whole_frame_possible(769)
    # What a receiver that took everything still holds back (less than a quarter) leaves a
    # waiting sender at least three quarters of the window.
    for pieces in ([1024], [769, 255], [512, 500, 12], [1] * 1024):
        server, relay = with_channel(window=1024)
        assert server.send_data(CH, bytes(1024)) == 1024
        deliver(server, relay)
        for piece in pieces:
            relay.consumed(CH, piece)
        deliver(relay, server)
        assert server.send_window(CH) >= 768, pieces


def test_consumed_grants_credit_in_quarter_window_batches():
    server, relay = with_channel(window=1024)
    assert server.send_data(CH, bytes(1024)) == 1024
    deliver(server, relay)
    relay.consumed(CH, 100)
    relay.consumed(CH, 100)
    assert relay.data_to_send() == []
    relay.consumed(CH, 56)  # 256 = a quarter of 1024
    assert frames(relay) == [CreditFrame(CH, 256)]
    relay.consumed(CH, 300)
    assert frames(relay) == [CreditFrame(CH, 300)]
    relay.consumed(CH, 255)
    assert relay.data_to_send() == []


def test_send_data_takes_a_memoryview_and_frames_exactly_its_bytes():
    server, relay = with_channel(max_payload=4, window=10)
    buffer = bytearray(b"..abcdefgh")
    assert server.send_data(CH, memoryview(buffer)[2:]) == 8
    assert deliver(server, relay) == [ChannelData(CH, b"abcd"), ChannelData(CH, b"efgh")]
    assert server.send_window(CH) == 2


def test_grow_window_grants_the_step_at_once_and_widens_the_batch():
    server, relay = with_channel(window=1024)
    assert relay.recv_window(CH) == 1024
    assert relay.grow_window(CH, 1024) == 2048
    assert frames(relay) == [CreditFrame(CH, 1024)]
    server.receive_bytes(encode_frame(CreditFrame(CH, 1024)))
    assert server.send_data(CH, bytes(2048)) == 2048
    deliver(server, relay)  # the grown allowance admits the whole window
    relay.consumed(CH, 256)  # a quarter of the old window: no longer a batch
    assert relay.data_to_send() == []
    relay.consumed(CH, 256)  # 512 = a quarter of 2048
    assert frames(relay) == [CreditFrame(CH, 512)]


def test_grow_window_on_unknown_channel_or_by_nothing_is_ignored():
    server, _ = with_channel()
    assert server.grow_window(ChannelId(9), 1024) == 0
    assert server.grow_window(CH, 0) == 0
    assert server.data_to_send() == []
    assert server.recv_window(ChannelId(9)) == 0


def test_credit_reaches_the_sender():
    server, relay = with_channel(window=1024)
    server.send_data(CH, bytes(1024))
    deliver(server, relay)
    relay.consumed(CH, 512)
    assert deliver(relay, server) == [ChannelCredit(CH, 512)]
    assert server.send_window(CH) == 512
    assert server.send_data(CH, bytes(600)) == 512


def test_consumed_on_unknown_channel_is_ignored():
    server, _ = connected()
    server.consumed(ChannelId(5), 1 << 20)
    assert server.data_to_send() == []


def test_credit_is_capped():
    server, _ = with_channel()
    assert server.receive_bytes(encode_frame(CreditFrame(CH, 0xFFFFFFFF))) == [
        ChannelCredit(CH, MAX_CREDIT)
    ]
    assert server.send_window(CH) == MAX_CREDIT


def test_sender_exceeding_credit_gets_the_channel_closed():
    _server, relay = with_channel(window=8)
    assert relay.receive_bytes(data(7, b"12345")) == [ChannelData(CH, b"12345")]
    reason = "sender exceeded its credit window"
    assert relay.receive_bytes(data(7, b"6789")) == [
        ChannelClosed(CH, ChannelCloseCode.CREDIT_EXCEEDED, reason, by_peer=False)
    ]
    assert not relay.has_channel(CH)
    assert frames(relay) == [CloseFrame(CH, ChannelCloseCode.CREDIT_EXCEEDED, reason)]


def test_a_frame_larger_than_the_whole_window_is_a_violation():
    _server, relay = with_channel(window=8)
    [closed] = relay.receive_bytes(data(7, b"123456789"))
    assert isinstance(closed, ChannelClosed)
    assert closed.code is ChannelCloseCode.CREDIT_EXCEEDED


def test_credit_returned_makes_room_again():
    _server, relay = with_channel(window=8)
    relay.receive_bytes(data(7, b"12345678"))
    relay.consumed(CH, 8)
    [grant] = frames(relay)
    assert grant == CreditFrame(CH, 8)
    assert relay.receive_bytes(data(7, b"abcdefgh")) == [ChannelData(CH, b"abcdefgh")]


def test_close_channel_from_either_side():
    for closer_is_server in (True, False):
        server, relay = with_channel()
        closer, peer = (server, relay) if closer_is_server else (relay, server)
        assert closer.close_channel(CH, ChannelCloseCode.DESKTOP_STOPPED, "desktop stopped")
        assert not closer.has_channel(CH)
        assert closer.send_window(CH) == 0
        assert deliver(closer, peer) == [
            ChannelClosed(CH, ChannelCloseCode.DESKTOP_STOPPED, "desktop stopped", by_peer=True)
        ]
        assert not peer.has_channel(CH)
        assert peer.send_data(CH, b"x") == 0
        # closing again is a no-op
        assert not closer.close_channel(CH)
        assert closer.data_to_send() == []


def test_close_channel_defaults_to_normal():
    server, _relay = with_channel()
    server.close_channel(CH)
    assert frames(server) == [CloseFrame(CH, ChannelCloseCode.NORMAL, "")]


def test_simultaneous_close_settles_quietly():
    server, relay = with_channel()
    server.close_channel(CH, ChannelCloseCode.VIEWER_GONE)
    relay.close_channel(CH, ChannelCloseCode.TARGET_CLOSED)
    assert deliver(server, relay) == []
    assert deliver(relay, server) == []
    assert server.data_to_send() == relay.data_to_send() == []


def test_data_in_flight_when_the_peer_closes():
    server, relay = with_channel()
    relay.send_data(CH, b"framebuffer update")
    server.close_channel(CH, ChannelCloseCode.VIEWER_GONE, "viewer left")
    # the relay's data reaches a server that has already closed the channel
    [notice] = deliver(relay, server)
    assert isinstance(notice, Notice)
    # the server's CLOSE and its UNKNOWN_CHANNEL answer reach the relay: one close, no echo
    events = deliver(server, relay)
    assert events == [ChannelClosed(CH, ChannelCloseCode.VIEWER_GONE, "viewer left", True)]
    assert relay.data_to_send() == []


def test_channels_are_independent():
    server, relay = with_channel(window=8)
    other = ChannelId(8)
    server.open_channel(other)
    relay.open_channel(other)
    assert server.send_data(CH, bytes(100)) == 8
    assert server.send_data(other, b"input") == 5
    events = deliver(server, relay)
    assert events[-1] == ChannelData(other, b"input")
    relay.close_channel(CH)
    assert server.send_data(other, b"abc") == 3


def test_channel_traffic_interleaves_with_requests_in_wire_order():
    server, relay = with_channel()
    server.send_data(CH, b"a")
    request_id = server.send_request("ping")
    server.send_data(CH, b"b")
    events = deliver(server, relay)
    assert events == [
        ChannelData(CH, b"a"),
        RequestReceived(Request(request_id, "ping")),
        ChannelData(CH, b"b"),
    ]


# -- the credit invariant, property-tested ---------------------------------------------------


class _Link:
    """Both ends plus the two in-order wires between them, with byte bookkeeping."""

    def __init__(self, window: int, max_payload: int) -> None:
        self.window = window
        self.server, self.relay = with_channel(window=window, max_payload=max_payload)
        self.ends = {"s": self.server, "r": self.relay}
        self.wires: dict[str, list[bytes]] = {"s": [], "r": []}  # frames sent by that end
        self.sent = {"s": 0, "r": 0}  # stream bytes each end sent
        self.granted = {"s": 0, "r": 0}  # credit each end has received
        self.received = {"s": bytearray(), "r": bytearray()}  # bytes each end received
        self.consumed = {"s": 0, "r": 0}

    @staticmethod
    def other(end: str) -> str:
        return "r" if end == "s" else "s"

    @staticmethod
    def stream(start: int, size: int) -> bytes:
        return bytes((start + i) % 251 for i in range(size))

    def collect(self, end: str) -> None:
        for out in self.ends[end].data_to_send():
            assert isinstance(out, bytes)
            self.wires[end].append(out)

    def send(self, end: str, size: int) -> None:
        taken = self.ends[end].send_data(CH, self.stream(self.sent[end], size))
        assert taken <= size
        self.sent[end] += taken
        self.collect(end)

    def deliver(self, end: str, count: int) -> None:
        """Deliver up to ``count`` frames sent by ``end`` to its peer."""
        peer = self.other(end)
        for out in self.wires[end][:count]:
            frame = decode_frame(out)
            if isinstance(frame, CreditFrame):
                self.granted[peer] += frame.credit
            for event in self.ends[peer].receive_bytes(out):
                assert not isinstance(event, ChannelClosed), event
                if isinstance(event, ChannelData):
                    self.received[peer] += event.payload
        del self.wires[end][:count]
        self.collect(peer)

    def consume(self, end: str, size: int) -> None:
        size = min(size, len(self.received[end]) - self.consumed[end])
        self.consumed[end] += size
        self.ends[end].consumed(CH, size)
        self.collect(end)

    def check(self) -> None:
        for end in "sr":
            in_flight = self.sent[end] - self.granted[end]
            assert 0 <= in_flight <= self.window
            assert self.ends[end].send_window(CH) == self.window - in_flight
            got = bytes(self.received[self.other(end)])
            assert got == self.stream(0, len(got))
            assert len(got) <= self.sent[end]

    def drain(self) -> None:
        for _ in range(4):
            for end in "sr":
                self.deliver(end, len(self.wires[end]))
                self.consume(end, 1 << 62)
            self.check()
        assert self.wires == {"s": [], "r": []}


actions = st.lists(
    st.tuples(
        st.sampled_from(["send", "deliver", "consume"]),
        st.sampled_from("sr"),
        st.integers(0, 300),
    ),
    max_size=60,
)


@settings(deadline=None, max_examples=examples(200))
@given(
    window=st.sampled_from([4, 16, 100, 257]),
    max_payload=st.sampled_from([4, 7, 64, 1024]),
    steps=actions,
)
def test_credit_invariant_under_any_interleaving(window, max_payload, steps):
    link = _Link(window, max_payload)
    for action, end, amount in steps:
        if action == "send":
            link.send(end, amount)
        elif action == "deliver":
            link.deliver(end, amount % 5 + 1)
        else:
            link.consume(end, amount)
        link.check()
    link.drain()
    for end in "sr":
        # every byte sent arrived, in order
        assert len(link.received[link.other(end)]) == link.sent[end]
        # and, all consumed, the sender keeps more than three quarters of its window
        assert link.ends[end].send_window(CH) > window - window // 4
