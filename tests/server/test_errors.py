"""One error body for every refusal: actions, chat, auth, the input boundary, viewer refusals."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from server.auth.capability import Denial, ViewerDenied
from server.auth.errors import Forbidden, RateLimited, Unauthorized
from server.auth.errors import error_response as auth_error_response
from server.errors import error_body, error_response, status_of
from server.viewer.access import ViewerRefused
from wire.errors import (
    BodyTooLarge,
    CloseCode,
    ErrorCode,
    InvalidInput,
    OpError,
    RelaydeskError,
    SessionConflict,
)

pytestmark = pytest.mark.unit

REFUSALS: list[tuple[RelaydeskError, int, str]] = [
    (Unauthorized(), 401, "unauthorized"),
    (Forbidden("no CSRF token"), 403, "forbidden"),
    (RateLimited(3.2), 429, "limit_reached"),
    (ViewerDenied(Denial.EXPIRED), 401, "forbidden"),
    (ViewerDenied(Denial.FORGED), 403, "forbidden"),
    (ViewerRefused(CloseCode.VIEWER_FORBIDDEN), 403, "forbidden"),
    (ViewerRefused(CloseCode.DESKTOP_STOPPED), 409, "not_running"),
    (InvalidInput("text", "must be a string"), 400, "invalid_args"),
    (BodyTooLarge(1024), 413, "limit_reached"),
    (OpError(ErrorCode.NOT_FOUND, "conversation not found"), 404, "not_found"),
    (OpError(ErrorCode.LIMIT_REACHED, "message too long", status=413), 413, "limit_reached"),
    (SessionConflict("b" * 32), 409, "session_conflict"),
]


def _shape(body: dict[str, Any]) -> None:
    assert body["ok"] is False
    assert set(body) == {"ok", "error"}
    assert isinstance(body["error"]["code"], str)
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


@pytest.mark.parametrize(("error", "status", "code"), REFUSALS)
def test_every_refusal_has_the_one_body_and_its_status(
    error: RelaydeskError, status: int, code: str
) -> None:
    response = error_response(error)
    body = orjson.loads(response.body)
    _shape(body)
    assert (response.status_code, body["error"]["code"]) == (status, code)
    assert status_of(error) == status
    assert response.headers["cache-control"] == "no-store"


def test_details_are_public_fields_only() -> None:
    leaky = OpError(ErrorCode.START_FAILED, "no", {"field": "slot", "log_path": "/var/x"})
    assert error_body(leaky)["error"] == {"code": "start_failed", "message": "no", "field": "slot"}
    conflict = error_body(SessionConflict("c" * 32))["error"]
    assert conflict["current_session_id"] == "c" * 32


def test_auth_refusals_keep_their_headers() -> None:
    assert "WWW-Authenticate" in auth_error_response(Unauthorized()).headers
    assert auth_error_response(RateLimited(2.5)).headers["Retry-After"] == "3"


def test_route_specific_keys_sit_beside_the_error() -> None:
    response = error_response(ViewerDenied(Denial.EXPIRED), known=False, num_lock=None)
    body = orjson.loads(response.body)
    assert body["known"] is False and body["num_lock"] is None
    assert body["error"]["code"] == "forbidden"
