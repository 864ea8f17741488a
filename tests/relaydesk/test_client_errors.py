"""The typed client's error answers: one ``ApiError`` under the project's ``RelaydeskError``."""

from __future__ import annotations

import httpx
import pytest

from relaydesk.client import ApiError, RelaydeskClient
from wire.errors import ErrorCode, RelaydeskError

pytestmark = pytest.mark.unit


def _client(response: httpx.Response) -> RelaydeskClient:
    transport = httpx.MockTransport(lambda _: response)
    return RelaydeskClient("http://desk", "rdk_x", transport=transport)


def test_an_error_answer_keeps_status_code_message_and_details() -> None:
    body = {"ok": False, "error": {"code": "session_conflict", "message": "taken",
                                   "current_session_id": "s2"}}  # fmt: skip
    with _client(httpx.Response(409, json=body)) as desk, pytest.raises(ApiError) as caught:
        desk.action("desktop_stop_confirm", "c1")
    err = caught.value
    assert isinstance(err, RelaydeskError)
    assert (err.status, err.code, err.message) == (409, ErrorCode.SESSION_CONFLICT, "taken")
    assert err.details == {"current_session_id": "s2"}
    assert str(err) == "409 session_conflict: taken"


def test_an_answer_that_is_not_the_apis_is_a_protocol_error() -> None:
    page = httpx.Response(502, text="<html>Bad Gateway</html>")
    with _client(page) as desk, pytest.raises(ApiError) as caught:
        desk.get("/api/v1/conversations")
    assert (caught.value.status, caught.value.code) == (502, ErrorCode.PROTOCOL_ERROR)
    assert caught.value.message == "<html>Bad Gateway</html>"


def test_a_code_this_client_does_not_know_is_internal() -> None:
    body = {"ok": False, "error": {"code": "from_the_future", "message": "new"}}
    with _client(httpx.Response(500, json=body)) as desk, pytest.raises(ApiError) as caught:
        desk.get("/api/v1/conversations")
    assert (caught.value.code, caught.value.message) == (ErrorCode.INTERNAL, "new")
