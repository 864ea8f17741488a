"""Host and Origin rules (DNS rebinding, cross-site posts), whole-string schema patterns, and
every id a schema allows fitting its audit column."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.actions.desktop import SESSION_ID, SLOT
from server.actions.registry import CONVERSATION_ID
from server.actions.schema import validate
from server.boundary.hosts import HostPolicy
from server.db.models import ID_LEN, NAME_LEN
from server.screen.action import SCREEN_ACTION
from server.viewer.service import origin_allowed
from wire.errors import InvalidArgs

pytestmark = pytest.mark.unit


def test_without_a_public_url_only_loopback_names_and_addresses_are_answered() -> None:
    policy = HostPolicy.build("")
    for host in ("127.0.0.1:8400", "localhost:8400", "[::1]:8400", "10.0.0.5", "app.localhost"):
        assert policy.host_allowed(host), host
    for host in ("evil.example:8400", "evil.example", "127.0.0.1.nip.io", "a b", "x:99999999"):
        assert not policy.host_allowed(host), host


def test_with_a_public_url_its_host_and_the_extras_are_answered() -> None:
    policy = HostPolicy.build("https://desk.example.org", ["server"])
    assert policy.host_allowed("desk.example.org") and policy.host_allowed("server:8400")
    assert policy.host_allowed("127.0.0.1:8400")
    assert not policy.host_allowed("other.example.org")
    assert policy.origin_allowed("https://desk.example.org", "server:8400")
    assert policy.origin_allowed("https://desk.example.org:443", "desk.example.org")
    assert not policy.origin_allowed("http://desk.example.org:8080", "desk.example.org")


def test_a_rebound_origin_is_refused_even_when_it_matches_its_host() -> None:
    """A DNS-rebinding page is same-origin with the Host it makes the browser send."""
    rebinding = {"origin": "http://evil.example:8400", "host": "evil.example:8400"}
    assert not origin_allowed(rebinding, "")
    assert not origin_allowed(rebinding, "https://desk.example.org")
    assert origin_allowed({"origin": "http://127.0.0.1:8400", "host": "127.0.0.1:8400"}, "")
    assert not origin_allowed({"origin": "http://127.0.0.1:3000", "host": "127.0.0.1:8400"}, "")
    assert not origin_allowed({"origin": "null", "host": "127.0.0.1:8400"}, "")
    assert origin_allowed({"host": "127.0.0.1:8400"}, "")


@pytest.mark.parametrize("value", ["main\n", "\nmain", "main\nx", "Main"])
def test_patterns_match_whole_strings(value: str) -> None:
    with pytest.raises(InvalidArgs):
        validate(SLOT, value, "slot")


def _screen_session_schema() -> dict[str, Any]:
    schema: dict[str, Any] = SCREEN_ACTION.json_schema["properties"]["desktop_session_id"]
    return schema


@pytest.mark.parametrize(
    ("schema", "column"),
    [(CONVERSATION_ID, ID_LEN), (SESSION_ID, NAME_LEN), (_screen_session_schema(), NAME_LEN)],
)
def test_every_id_a_schema_allows_fits_its_audit_column(
    schema: dict[str, Any], column: int
) -> None:
    @given(st.from_regex(re.compile(schema["pattern"]), fullmatch=True))
    def fits(value: str) -> None:
        validate(schema, value, "id")
        assert len(value) <= column

    fits()
    with pytest.raises(InvalidArgs):
        validate(schema, "a" * (column + 1), "id")
