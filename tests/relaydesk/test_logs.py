"""Log lines never carry secrets, whoever logs them."""

from __future__ import annotations

import json
import logging

import pytest

from relaydesk.logs import JsonFormatter, TextFormatter, redact

pytestmark = pytest.mark.unit

SECRETS = [
    ('"WebSocket /vnc/abc123/eyJ1IjoiYSJ9.c2ln/websockify" [accepted]', "eyJ1IjoiYSJ9.c2ln"),
    ("GET /login/rdl_Zm9vYmFyYmF6cXV4 HTTP/1.1", "Zm9vYmFyYmF6cXV4"),
    ("token rdk_8Hq2-secret_value in text", "8Hq2-secret_value"),
    ("relay rdr_TOPSECRET refused", "TOPSECRET"),
    ("Authorization: Bearer abc.def.ghi", "abc.def.ghi"),
    # the web session cookie, as the websockets library's DEBUG handshake lines print it
    ("< Cookie: rds_S3SS10N-value; theme=dark", "S3SS10N-value"),
    ("< cookie: relaydesk_session=opaque-value", "opaque-value"),
    ("> Set-Cookie: relaydesk_session=opaque-value; HttpOnly", "opaque-value"),
    ("headers=[(b'cookie', b'relaydesk_session=opaque-value'), (b'host', b'x')]", "opaque-value"),
    ("< Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
    ("any rdx_FUTUREPREFIX secret", "FUTUREPREFIX"),
]


@pytest.mark.parametrize(("line", "secret"), SECRETS)
def test_redact_masks_every_kind_of_secret(line: str, secret: str) -> None:
    assert secret not in redact(line)
    assert "[redacted]" in redact(line)


def test_ordinary_text_is_left_alone() -> None:
    line = "relay 9290d7 connected (version 0.1.0) /relay/v1/connect"
    assert redact(line) == line


@pytest.mark.parametrize("formatter", [TextFormatter("server"), JsonFormatter("server")])
def test_formatters_redact_messages_and_extras(formatter: logging.Formatter) -> None:
    record = logging.LogRecord(
        "uvicorn.error",
        logging.INFO,
        __file__,
        1,
        '%s - "WebSocket %s" [accepted]',
        ("127.0.0.1:5", "/vnc/sid/TOKENVALUE/websockify"),
        None,
    )
    record.path = "/login/rdl_LINKTOKEN"
    line = formatter.format(record)
    assert "TOKENVALUE" not in line
    assert "LINKTOKEN" not in line
    if isinstance(formatter, JsonFormatter):
        assert json.loads(line)["logger"] == "uvicorn.error"
