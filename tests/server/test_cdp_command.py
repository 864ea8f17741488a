"""The CDP endpoint's reading of a client's message: a CDP command, or a close with a code and
a reason (server.cdp.session)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.cdp.session import Closing, Command
from wire import cdp_methods

pytestmark = pytest.mark.unit


def test_a_command_is_read() -> None:
    command = Command.parse('{"id": 3, "method": "Page.enable", "sessionId": "S", "params": {}}')
    assert (command.id, command.method, command.session_id) == (3, "Page.enable", "S")


@pytest.mark.parametrize(
    ("text", "code", "reason"),
    [
        ("not json", 1007, "must be JSON"),
        ("[1]", 1007, "JSON object"),
        ('{"method": "Page.enable"}', 1007, "integer 'id'"),
        ('{"id": true, "method": "Page.enable"}', 1007, "integer 'id'"),
        ('{"id": 1}', 1007, "'method'"),
        ('{"id": 1, "method": ""}', 1007, "'method'"),
        ("x" * (cdp_methods.MAX_CLIENT_MESSAGE + 1), 1009, "over"),
    ],
)
def test_a_bad_message_is_a_close_with_a_reason(text: str, code: int, reason: str) -> None:
    with pytest.raises(Closing) as closing:
        Command.parse(text)
    assert closing.value.close_code == code and reason in closing.value.reason


@given(st.text(max_size=200))
def test_any_text_is_a_command_or_a_close(text: str) -> None:
    codes = set()
    try:
        Command.parse(text)
    except Closing as closing:
        codes.add(closing.close_code)
    assert codes <= {1007, 1009}
