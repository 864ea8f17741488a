"""Text messages: exact JSON vectors, malformed input and round-trip properties."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.examples import examples
from wire.errors import CloseCode, ErrorCode, FrameTooLarge, OpError, ProtocolError
from wire.ids import RelayId, RequestId
from wire.messages import (
    DEFAULT_MAX_TEXT,
    DEFAULT_TIMEOUT_MS,
    MAX_ID_LENGTH,
    MAX_TIMEOUT_MS,
    PROTOCOL_VERSION,
    SUBPROTOCOL,
    Cancel,
    Event,
    Hello,
    Message,
    Request,
    Response,
    Welcome,
    encode_message,
    parse_message,
    to_dict,
)

pytestmark = pytest.mark.unit

VECTORS: list[tuple[Message, str]] = [
    (
        Hello(
            protocol=1,
            relay_version="0.1.0",
            capabilities=("session_identity", "virtual_desktop"),
            desktops=({"kind": "virtual", "slot": "main", "desktop_session_id": "ds_1"},),
            max_frame=65536,
            max_text=1048576,
        ),
        '{"type":"hello","protocol":1,"relay_version":"0.1.0",'
        '"capabilities":["session_identity","virtual_desktop"],'
        '"desktops":[{"kind":"virtual","slot":"main","desktop_session_id":"ds_1"}],'
        '"max_frame":65536,"max_text":1048576}',
    ),
    (
        Hello(protocol=1, relay_version="0.1.0"),
        '{"type":"hello","protocol":1,"relay_version":"0.1.0","capabilities":[],"desktops":[],'
        '"max_frame":1048576,"max_text":16777216}',
    ),
    (
        Welcome(relay_id=RelayId("relay_1"), heartbeat_s=10.0, max_frame=1048576, max_text=65536),
        '{"type":"welcome","relay_id":"relay_1","heartbeat_s":10.0,"max_frame":1048576,'
        '"max_text":65536}',
    ),
    (
        Request(
            id=RequestId("s1"),
            op="desktop.start",
            args={"kind": "virtual", "slot": "main"},
            timeout_ms=30000,
        ),
        '{"type":"req","id":"s1","op":"desktop.start",'
        '"args":{"kind":"virtual","slot":"main"},"timeout_ms":30000}',
    ),
    (
        Request(id=RequestId("s2"), op="ping"),
        '{"type":"req","id":"s2","op":"ping","args":{},"timeout_ms":30000}',
    ),
    (
        Response(id=RequestId("s1"), ok=True, result={"stopped": True}),
        '{"type":"res","id":"s1","ok":true,"result":{"stopped":true}}',
    ),
    (
        Response(id=RequestId("s3"), ok=True),
        '{"type":"res","id":"s3","ok":true,"result":null}',
    ),
    (
        Response(
            id=RequestId("s1"),
            ok=False,
            error={
                "code": "session_conflict",
                "message": "another desktop session now holds this slot",
                "details": {"current_session_id": "ds_2"},
            },
        ),
        '{"type":"res","id":"s1","ok":false,"error":{"code":"session_conflict",'
        '"message":"another desktop session now holds this slot",'
        '"details":{"current_session_id":"ds_2"}}}',
    ),
    (Cancel(id=RequestId("s1")), '{"type":"cancel","id":"s1"}'),
    (
        Event(name="desktop.changed", data={"state": "failed", "reason": "x11vnc exited"}),
        '{"type":"event","name":"desktop.changed",'
        '"data":{"state":"failed","reason":"x11vnc exited"}}',
    ),
    (Event(name="relay.ready"), '{"type":"event","name":"relay.ready","data":{}}'),
]


@pytest.mark.parametrize(("message", "text"), VECTORS)
def test_encode_gives_the_exact_json(message, text):
    assert encode_message(message) == text


@pytest.mark.parametrize(("message", "text"), VECTORS)
def test_parse_gives_the_message_back(message, text):
    assert parse_message(text) == message
    assert encode_message(parse_message(text)) == text


def test_constants():
    assert PROTOCOL_VERSION == 1
    assert SUBPROTOCOL == "relaydesk.v1"
    assert DEFAULT_MAX_TEXT == 16 * 1024 * 1024
    assert (DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS, MAX_ID_LENGTH) == (30_000, 3_600_000, 64)


def test_non_ascii_comes_back():
    message = Event("chat", {"text": "grüße ☃ \U0001f600"})
    assert parse_message(encode_message(message)) == message


def test_a_lone_surrogate_still_encodes_and_comes_back():
    message = Event("chat", {"text": "half \ud83d pair"})
    assert parse_message(encode_message(message)) == message


def test_error_response_from_op_error():
    error = OpError(ErrorCode.NOT_RUNNING, "desktop is not running", {"slot": "main"})
    response = parse_message(
        encode_message(Response(RequestId("r1"), False, error=error.to_dict()))
    )
    assert isinstance(response, Response)
    assert response.error == {
        "code": "not_running",
        "message": "desktop is not running",
        "details": {"slot": "main"},
    }
    assert response.error is not None
    back = OpError.from_dict(response.error)
    assert (back.code, back.message, back.details) == (
        ErrorCode.NOT_RUNNING,
        "desktop is not running",
        {"slot": "main"},
    )


# -- defaults and tolerated input -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"type":"hello","protocol":1,"relay_version":"x"}', Hello(1, "x")),
        ('{"type":"req","id":"a","op":"ping"}', Request(RequestId("a"), "ping", {}, 30_000)),
        ('{"type":"res","id":"a","ok":true}', Response(RequestId("a"), True, None)),
        ('{"type":"event","name":"n"}', Event("n", {})),
        # unknown fields are ignored (forward compatibility within v1)
        ('{"type":"cancel","id":"a","extra":[1,2]}', Cancel(RequestId("a"))),
        ('{"id":"a","type":"cancel"}', Cancel(RequestId("a"))),
        (' \n{"type":"cancel","id":"a"}\t', Cancel(RequestId("a"))),
        # boundaries that are still valid
        ('{"type":"req","id":"a","op":"x","timeout_ms":1}', Request(RequestId("a"), "x", {}, 1)),
        (
            '{"type":"req","id":"a","op":"x","timeout_ms":3600000}',
            Request(RequestId("a"), "x", {}, 3_600_000),
        ),
        ('{"type":"cancel","id":"' + "i" * 64 + '"}', Cancel(RequestId("i" * 64))),
    ],
)
def test_defaults_and_tolerated_input(text, expected):
    assert parse_message(text) == expected


def test_error_response_keeps_a_result_out():
    parsed = parse_message('{"type":"res","id":"a","ok":false,"error":{"code":"busy"},"result":1}')
    assert parsed == Response(RequestId("a"), False, 1, {"code": "busy"})
    # the encoder writes only the error for a failed response
    assert json.loads(encode_message(parsed)) == {
        "type": "res",
        "id": "a",
        "ok": False,
        "error": {"code": "busy"},
    }


# -- malformed input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", "{", "not json", '{"type":"req",}', "{'type': 'req'}", '{"type":"req"', "\x00", "[1,]"],
)
def test_malformed_json_is_unsupported_data(text):
    with pytest.raises(ProtocolError, match="not valid JSON") as info:
        parse_message(text)
    assert info.value.close_code is CloseCode.UNSUPPORTED_DATA


@pytest.mark.parametrize("text", ["[]", "1", '"req"', "null", "true", '[{"type":"req"}]', "1.5"])
def test_non_object_json_is_rejected(text):
    with pytest.raises(ProtocolError, match="must be a JSON object") as info:
        parse_message(text)
    assert info.value.close_code is CloseCode.PROTOCOL_ERROR


@pytest.mark.parametrize(
    "text",
    [
        "{}",
        '{"type":"nope"}',
        '{"type":"REQ","id":"a","op":"x"}',
        '{"type":1}',
        '{"type":null}',
        '{"type":["req"]}',
        '{"type":{"req":1}}',
        '{"type":""}',
    ],
)
def test_unknown_type_is_rejected(text):
    with pytest.raises(ProtocolError, match="unknown message type"):
        parse_message(text)


def test_unknown_type_name_is_cut_in_the_message():
    with pytest.raises(ProtocolError) as info:
        parse_message(json.dumps({"type": "x" * 10_000}))
    assert len(str(info.value)) < 100


def _obj(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields})


HELLO = {"protocol": 1, "relay_version": "0.1.0"}
WELCOME = {"relay_id": "r", "heartbeat_s": 10, "max_frame": 1024, "max_text": 4096}
REQ = {"id": "a", "op": "ping"}


@pytest.mark.parametrize(
    "text",
    [
        # hello
        _obj("hello", relay_version="0.1.0"),
        _obj("hello", **{**HELLO, "protocol": "1"}),
        _obj("hello", **{**HELLO, "protocol": True}),
        _obj("hello", **{**HELLO, "protocol": 1.0}),
        _obj("hello", **{**HELLO, "protocol": None}),
        _obj("hello", protocol=1),
        _obj("hello", **{**HELLO, "relay_version": 1}),
        _obj("hello", **{**HELLO, "max_frame": 0}),
        _obj("hello", **{**HELLO, "max_frame": "1024"}),
        _obj("hello", **{**HELLO, "max_text": -5}),
        _obj("hello", **{**HELLO, "max_text": True}),
        _obj("hello", **HELLO, capabilities="audio"),
        _obj("hello", **HELLO, capabilities=["audio", 1]),
        _obj("hello", **HELLO, capabilities=None),
        _obj("hello", **HELLO, capabilities={"audio": True}),
        _obj("hello", **HELLO, desktops=[1]),
        _obj("hello", **HELLO, desktops={}),
        _obj("hello", **HELLO, desktops=[["main"]]),
        # what a hello may announce is bounded
        _obj("hello", **HELLO, desktops=[{"desktop_session_id": f"s{n}"} for n in range(1025)]),
        _obj("hello", **HELLO, capabilities=[f"cap{n}" for n in range(65)]),
        _obj("hello", **HELLO, capabilities=["c" * 65]),
        _obj("hello", **{**HELLO, "relay_version": "v" * 65}),
        # welcome
        _obj("welcome", **{**WELCOME, "relay_id": None}),
        _obj("welcome", **{**WELCOME, "relay_id": 7}),
        _obj("welcome", **{**WELCOME, "heartbeat_s": "10"}),
        _obj("welcome", **{**WELCOME, "heartbeat_s": True}),
        _obj("welcome", **{**WELCOME, "heartbeat_s": None}),
        _obj("welcome", **{**WELCOME, "max_frame": 1.5}),
        _obj("welcome", **{**WELCOME, "max_frame": False}),
        _obj("welcome", **{**WELCOME, "max_text": 0}),
        _obj("welcome", **{**WELCOME, "max_text": "65536"}),
        _obj("welcome", **{**WELCOME, "max_text": None}),
        _obj("welcome", relay_id="r", heartbeat_s=10),
        _obj("welcome", relay_id="r", heartbeat_s=10, max_frame=9),
        # req
        _obj("req", op="ping"),
        _obj("req", id="", op="ping"),
        _obj("req", id="i" * 65, op="ping"),
        _obj("req", id=1, op="ping"),
        _obj("req", id=None, op="ping"),
        _obj("req", id="a"),
        _obj("req", id="a", op=""),
        _obj("req", id="a", op=7),
        _obj("req", **REQ, args=[]),
        _obj("req", **REQ, args=None),
        _obj("req", **REQ, args="x"),
        _obj("req", **REQ, timeout_ms=0),
        _obj("req", **REQ, timeout_ms=-1),
        _obj("req", **REQ, timeout_ms=3_600_001),
        _obj("req", **REQ, timeout_ms=10**30),
        _obj("req", **REQ, timeout_ms=1.5),
        _obj("req", **REQ, timeout_ms=1000.0),
        _obj("req", **REQ, timeout_ms="100"),
        _obj("req", **REQ, timeout_ms=True),
        _obj("req", **REQ, timeout_ms=False),
        _obj("req", **REQ, timeout_ms=None),
        # res
        _obj("res", id="a"),
        _obj("res", id="a", ok="true"),
        _obj("res", id="a", ok=1),
        _obj("res", id="a", ok=None),
        _obj("res", id="a", ok=False),
        _obj("res", id="a", ok=False, error="boom"),
        _obj("res", id="a", ok=False, error={"message": "no code"}),
        _obj("res", id="a", ok=False, error={"code": 1}),
        _obj("res", ok=True, result=1),
        _obj("res", id="", ok=True),
        # cancel
        _obj("cancel"),
        _obj("cancel", id=""),
        _obj("cancel", id=["a"]),
        _obj("cancel", id="i" * 65),
        # event
        _obj("event", data={}),
        _obj("event", name=None),
        _obj("event", name=["desktop.changed"]),
        _obj("event", name="desktop.changed", data=[]),
        _obj("event", name="desktop.changed", data="failed"),
        _obj("event", name="desktop.changed", data=None),
    ],
)
def test_wrong_fields_are_protocol_errors(text):
    with pytest.raises(ProtocolError) as info:
        parse_message(text)
    assert info.value.close_code is CloseCode.PROTOCOL_ERROR
    assert info.value.code is ErrorCode.PROTOCOL_ERROR


@pytest.mark.parametrize(
    "text", [_obj("hello", **{**HELLO, "protocol": True}), _obj("req", **REQ, timeout_ms=True)]
)
def test_bool_is_not_a_number(text):
    with pytest.raises(ProtocolError, match=r"must be (a number|an integer)"):
        parse_message(text)


def test_text_above_the_limit_is_too_large():
    text = _obj("event", name="x", data={"pad": "p" * 100})
    with pytest.raises(FrameTooLarge) as info:
        parse_message(text, max_size=len(text) - 1)
    assert (info.value.size, info.value.limit) == (len(text), len(text) - 1)
    assert info.value.close_code is CloseCode.MESSAGE_TOO_BIG


def test_text_at_the_limit_is_accepted():
    text = _obj("event", name="x", data={"pad": "p" * 100})
    assert parse_message(text, max_size=len(text)) == Event("x", {"pad": "p" * 100})


def test_limit_is_checked_before_parsing():
    with pytest.raises(FrameTooLarge):
        parse_message("{" * 101, max_size=100)


@pytest.mark.parametrize("depth", [50, 900, 5_000, 200_000])
def test_deep_nesting_is_an_error_or_a_message_never_a_crash(depth):
    for inner in ("[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth):
        for text in (inner, '{"type":"event","name":"n","data":{"x":' + inner + "}}"):
            with contextlib.suppress(ProtocolError):
                parse_message(text)


def test_huge_integer_heartbeat_is_a_protocol_error():
    text = '{"type":"welcome","relay_id":"r","heartbeat_s":1' + "0" * 400 + ',"max_frame":1}'
    with pytest.raises(ProtocolError):
        parse_message(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"type":"welcome","relay_id":"r","heartbeat_s":NaN,"max_frame":1}',
        '{"type":"req","id":"a","op":"x","args":{"v":Infinity}}',
        '{"type":"event","name":"n","data":{"v":-Infinity}}',
        '{"type":"event","name":"n","data":{"v":1e400}}',
    ],
)
def test_non_json_constants_are_protocol_errors(text):
    with pytest.raises(ProtocolError):
        parse_message(text)


# -- properties -----------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=4)
request_ids = st.text(min_size=1, max_size=MAX_ID_LENGTH).map(RequestId)
names = st.text(min_size=1, max_size=30)

hellos = st.builds(
    Hello,
    protocol=st.integers(-(2**40), 2**40),
    relay_version=st.text(max_size=20),
    capabilities=st.lists(st.text(max_size=20), max_size=6).map(tuple),
    desktops=st.lists(json_objects, max_size=3).map(tuple),
    max_frame=st.integers(1, 2**40),
    max_text=st.integers(1, 2**40),
)
welcomes = st.builds(
    Welcome,
    relay_id=st.text(max_size=40).map(RelayId),
    heartbeat_s=st.floats(0.001, 1e6),
    max_frame=st.integers(1, 2**40),
    max_text=st.integers(1, 2**40),
)
requests = st.builds(
    Request,
    id=request_ids,
    op=names,
    args=json_objects,
    timeout_ms=st.integers(1, MAX_TIMEOUT_MS),
)
ok_responses = st.builds(Response, id=request_ids, ok=st.just(True), result=json_values)
error_responses = st.builds(
    Response,
    id=request_ids,
    ok=st.just(False),
    error=st.builds(
        lambda code, message, details: {"code": code, "message": message, "details": details},
        st.sampled_from(ErrorCode).map(str) | st.text(max_size=20),
        st.text(max_size=40),
        json_objects,
    ),
)
cancels = st.builds(Cancel, id=request_ids)
events = st.builds(Event, name=st.text(max_size=30), data=json_objects)
messages = hellos | welcomes | requests | ok_responses | error_responses | cancels | events


@settings(deadline=None, max_examples=examples(300))
@given(messages)
def test_any_valid_message_round_trips(message):
    text = encode_message(message)
    assert parse_message(text) == message
    assert json.loads(text) == to_dict(message)
    assert "\n" not in text


@settings(deadline=None)
@given(messages)
def test_type_tag_names_the_message(message):
    tag = json.loads(encode_message(message))["type"]
    expected = {
        Hello: "hello",
        Welcome: "welcome",
        Request: "req",
        Response: "res",
        Cancel: "cancel",
        Event: "event",
    }[type(message)]
    assert tag == expected
