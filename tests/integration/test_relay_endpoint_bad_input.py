"""Bad input on ``/relay/v1/connect``: each case closes cleanly with a code from one enum,
logs no secret, and never disturbs the server's other relays."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import websockets
from websockets.asyncio.client import ClientConnection, connect

from tests.support.processes import ProcessTracker, scaled
from tests.support.stack import (
    Seed,
    add_relay,
    inprocess_server,
    seed_database,
    start_relay,
    wait_until,
)
from wire.errors import ChannelCloseCode, CloseCode
from wire.frames import CloseFrame, DataFrame, decode_frame, encode_frame
from wire.ids import ChannelId, RelayId

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

HELLO = json.dumps({"type": "hello", "protocol": 1, "relay_version": "test", "capabilities": []})
MAX_TEXT = 64 * 1024
MAX_FRAME = 16 * 1024


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[Any, str, Seed, dict[str, Any]]]:
    tmp_path = tmp_path_factory.mktemp("bad-input")
    tracker = ProcessTracker(tmp_path / "processes")
    seed = await seed_database(tmp_path / "data")
    raw = await add_relay(seed, "raw-client")
    async with inprocess_server(seed, max_text_frame=MAX_TEXT, max_channel_frame=MAX_FRAME) as (
        app,
        url,
    ):
        start_relay(tracker.start, seed, url)
        bystander = RelayId(seed.relay["relay_id"])
        try:
            await wait_until(
                lambda: app.state.parts.relays.is_connected(bystander), 20, "the real relay"
            )
            yield app, url, seed, raw
            assert app.state.parts.relays.is_connected(bystander), (
                "bad input disturbed another relay"
            )
            assert await app.state.parts.relays.request(bystander, "ping", {"echo": 1}) == {
                "echo": 1
            }
        finally:
            tracker.cleanup()


def _ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/relay/v1/connect"


async def _open(url: str, token: str | None, subprotocol: bool = True) -> ClientConnection:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return await connect(
        _ws_url(url),
        additional_headers=headers,
        subprotocols=[websockets.Subprotocol("relaydesk.v1")] if subprotocol else None,
        max_size=None,
        open_timeout=scaled(10),
    )


async def _drain(ws: ClientConnection) -> None:
    for _ in range(10):
        await ws.recv()


async def _closed_with(ws: ClientConnection) -> tuple[int | None, str]:
    with pytest.raises(websockets.ConnectionClosed):
        await _drain(ws)
    assert ws.close_code is not None
    return ws.close_code, ws.close_reason or ""


async def _welcomed(url: str, token: str) -> ClientConnection:
    ws = await _open(url, token)
    await ws.send(HELLO)
    welcome = json.loads(await ws.recv())
    assert welcome["type"] == "welcome"
    assert welcome["max_frame"] == MAX_FRAME
    return ws


@pytest.mark.parametrize("token", [None, "rdr_not-a-real-token", "rdk_an-api-token-is-not-a-relay"])
async def test_missing_or_wrong_token_closes_with_unauthorized(stack, token, caplog) -> None:
    _, url, _, _ = stack
    ws = await _open(url, token)
    code, reason = await _closed_with(ws)
    assert code == CloseCode.UNAUTHORIZED
    assert "token" in reason
    if token:
        assert token not in caplog.text


async def test_a_revoked_relay_token_is_refused(stack) -> None:
    app, url, seed, _ = stack
    doomed = await add_relay(seed, "to-be-revoked")
    await app.state.parts.store.revoke_relay(doomed["relay_id"])
    code, _ = await _closed_with(await _open(url, doomed["token"]))
    assert code == CloseCode.UNAUTHORIZED


async def test_without_the_subprotocol_the_handshake_is_refused(stack) -> None:
    _, url, _, raw = stack
    with pytest.raises(websockets.InvalidStatus):
        await _open(url, raw["token"], subprotocol=False)


@pytest.mark.parametrize(
    ("first_frame", "expected"),
    [
        ('{"type":"req","id":"1","op":"ping","args":{}}', CloseCode.HELLO_EXPECTED),
        (b"\x01\x00\x00\x00\x01data", CloseCode.HELLO_EXPECTED),
        ("{not json", CloseCode.UNSUPPORTED_DATA),
        ('{"type":"hello","protocol":2,"relay_version":"x"}', CloseCode.UNSUPPORTED_PROTOCOL),
        ('{"type":"hello","protocol":"1","relay_version":"x"}', CloseCode.PROTOCOL_ERROR),
    ],
)
async def test_a_bad_first_frame_closes_with_its_code(stack, first_frame, expected) -> None:
    _, url, _, raw = stack
    ws = await _open(url, raw["token"])
    await ws.send(first_frame)
    code, reason = await _closed_with(ws)
    assert code == expected
    assert reason


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        ('{"type":"nonsense"}', CloseCode.PROTOCOL_ERROR),
        ("[1,2,3]", CloseCode.PROTOCOL_ERROR),
        ('{"type":"hello","protocol":1,"relay_version":"again"}', CloseCode.PROTOCOL_ERROR),
        ("x" * (MAX_TEXT + 1), CloseCode.MESSAGE_TOO_BIG),
        (b"\x01\x00\x00\x00\x01" + b"\0" * (MAX_FRAME + 1), CloseCode.MESSAGE_TOO_BIG),
        (b"\x09\x00\x00\x00\x01", CloseCode.PROTOCOL_ERROR),
        (b"\x01\x00", CloseCode.PROTOCOL_ERROR),
    ],
)
async def test_bad_frames_after_the_handshake_close_with_their_code(stack, frame, expected) -> None:
    _, url, _, raw = stack
    ws = await _welcomed(url, raw["token"])
    await ws.send(frame)
    code, _ = await _closed_with(ws)
    assert code == expected


async def test_data_for_an_unknown_channel_is_answered_with_a_channel_close(stack) -> None:
    _, url, _, raw = stack
    ws = await _welcomed(url, raw["token"])
    await ws.send(encode_frame(DataFrame(ChannelId(77), b"hello")))
    answer = await ws.recv()
    assert isinstance(answer, bytes)
    frame = decode_frame(answer)
    assert frame == CloseFrame(ChannelId(77), ChannelCloseCode.UNKNOWN_CHANNEL, "unknown channel")
    await ws.send('{"type":"req","id":"p1","op":"ping","args":{}}')
    assert json.loads(await ws.recv()) == {"type": "res", "id": "p1", "ok": True, "result": {}}
    await ws.close()


async def test_unknown_ops_and_stray_responses_get_structured_answers(stack) -> None:
    _, url, _, raw = stack
    ws = await _welcomed(url, raw["token"])
    await ws.send('{"type":"res","id":"never-asked","ok":true,"result":null}')
    await ws.send('{"type":"req","id":"q1","op":"no.such.op","args":{}}')
    answer = json.loads(await ws.recv())
    assert answer["id"] == "q1"
    assert answer["ok"] is False
    assert answer["error"]["code"] == "unknown_op"
    await ws.close()


async def test_a_relay_that_never_says_hello_is_closed_with_a_code(stack, monkeypatch) -> None:
    _, url, _, raw = stack
    monkeypatch.setattr("server.relays.endpoint.HELLO_TIMEOUT_S", 0.3)
    ws = await _open(url, raw["token"])
    code, reason = await _closed_with(ws)
    assert code == CloseCode.HELLO_EXPECTED
    assert "no hello" in reason


@pytest.mark.parametrize("change", ["rotate", "revoke"])
async def test_a_live_connection_ends_when_its_token_is_rotated_or_revoked(stack, change) -> None:
    app, url, seed, _ = stack
    relay = await add_relay(seed, f"live-then-{change}")
    ws = await _welcomed(url, relay["token"])
    relay_id = RelayId(relay["relay_id"])
    await wait_until(lambda: app.state.parts.relays.is_connected(relay_id), 5, "the raw relay")
    if change == "rotate":
        await app.state.parts.store.rotate_relay_token(relay_id)
    else:
        await app.state.parts.store.revoke_relay(relay_id)
    await app.state.parts.relays.recheck_tokens()  # what every presence interval does
    code, _ = await _closed_with(ws)
    assert code == CloseCode.RELAY_REVOKED
    await wait_until(
        lambda: not app.state.parts.relays.is_connected(relay_id), 5, "the relay to be gone"
    )
    code, _ = await _closed_with(await _open(url, relay["token"]))
    assert code == CloseCode.UNAUTHORIZED
