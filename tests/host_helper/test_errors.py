"""The helper answers every error with the status of its code, as the server does."""

from __future__ import annotations

import json

import pytest

from host_helper.app import error_response
from wire.errors import HTTP_STATUS, BodyTooLarge, ErrorCode, InvalidInput, OpError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_code_answers_with_its_one_status(code: ErrorCode) -> None:
    assert error_response(OpError(code)).status == HTTP_STATUS.get(code, 500)


def test_a_revision_mismatch_is_a_conflict_not_a_server_error() -> None:
    assert error_response(OpError(ErrorCode.REVISION_MISMATCH)).status == 409


def test_a_refused_body_keeps_its_own_status_and_names_the_field() -> None:
    assert error_response(BodyTooLarge(10)).status == 413
    refused = error_response(InvalidInput("port", "not a number"))
    assert refused.status == 400
    assert refused.text is not None
    assert json.loads(refused.text)["error"]["field"] == "port"
