"""The client's error answers: one ``ApiError`` with the server's status, code, message and the
error's other fields."""

from __future__ import annotations

import httpx
import pytest

import relaydesk.client
import relaydesk_client
from relaydesk_client import ApiError, RelaydeskClient
from wire.errors import ErrorCode

pytestmark = pytest.mark.unit


def _client(response: httpx.Response) -> RelaydeskClient:
    transport = httpx.MockTransport(lambda _: response)
    return RelaydeskClient("http://desk", "rdk_x", transport=transport)


def test_an_error_answer_keeps_status_code_message_and_details() -> None:
    body = {
        "ok": False,
        "error": {"code": "session_conflict", "message": "taken", "current_session_id": "s2"},
    }
    with _client(httpx.Response(409, json=body)) as desk, pytest.raises(ApiError) as caught:
        desk.action("desktop_stop_confirm", "c1")
    err = caught.value
    # The server's codes (wire.errors.ErrorCode, a StrEnum) compare equal to the client's.
    assert (err.status, err.code, err.message) == (409, ErrorCode.SESSION_CONFLICT, "taken")
    assert err.details == {"current_session_id": "s2"}
    assert str(err) == "409 session_conflict: taken"


def test_an_answer_that_is_not_the_apis_is_a_protocol_error() -> None:
    page = httpx.Response(502, text="<html>Bad Gateway</html>")
    with _client(page) as desk, pytest.raises(ApiError) as caught:
        desk.get("/api/v1/conversations")
    assert (caught.value.status, caught.value.code) == (502, ErrorCode.PROTOCOL_ERROR)
    assert caught.value.message == "<html>Bad Gateway</html>"


def test_a_code_this_client_does_not_know_reaches_the_caller_as_sent() -> None:
    """The client carries no list of codes: a newer server's code is not turned into another."""
    body = {"ok": False, "error": {"code": "from_the_future", "message": "new"}}
    with _client(httpx.Response(409, json=body)) as desk, pytest.raises(ApiError) as caught:
        desk.get("/api/v1/conversations")
    assert (caught.value.status, caught.value.code, caught.value.message) == (
        409,
        "from_the_future",
        "new",
    )


def test_an_error_answer_without_a_code_is_internal() -> None:
    with (
        _client(httpx.Response(500, json={"ok": False})) as desk,
        pytest.raises(ApiError) as caught,
    ):
        desk.get("/api/v1/conversations")
    assert (caught.value.status, caught.value.code) == (500, ErrorCode.INTERNAL)


def test_the_cli_package_name_is_the_same_client() -> None:
    """``relaydesk.client`` (the server distribution's old home of the client) re-exports it."""
    assert relaydesk.client.RelaydeskClient is relaydesk_client.RelaydeskClient
    assert relaydesk.client.ApiError is relaydesk_client.ApiError
    assert relaydesk.client.Desktop is relaydesk_client.Desktop
