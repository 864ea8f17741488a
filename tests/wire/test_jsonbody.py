"""The input boundary's pure rules: every malformed body is ``InvalidInput`` naming its field."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire.errors import InvalidInput
from wire.jsonbody import MAX_DEPTH, check_text, is_json_media_type, parse_json, parse_json_object

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"text": "\\ud800"}', "text"),
        (b'{"a": {"b": ["ok", "\\udfff"]}}', "a.b[1]"),
        (b'{"\\ud800": 1}', "body"),
        (b'{"n": 1' + b"0" * 5000 + b"}", "n"),
        (b'{"n": -12345678901234567890}', "n"),
        (b'{"f": 1e999}', "f"),
        (b'{"f": NaN}', "f"),
        (b'{"s": "a\\u0000b"}', "s"),
        (b"[" * 100_000 + b"]" * 100_000, "body"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "body" + "[0]" * MAX_DEPTH),
        (b"\xff\xfe{}", "body"),
        (b"{nope", "body"),
    ],
)
def test_malformed_bodies_name_their_field(raw: bytes, field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_json(raw)
    assert refused.value.details["field"] == field
    assert refused.value.status == 400


def test_sane_bodies_pass_unchanged() -> None:
    raw = b'{"text": "h\\u00e9 \\ud83d\\ude00", "n": 1234567890123456789, "f": 1.5, "l": [[1]]}'
    assert parse_json_object(raw) == {
        "text": "hé 😀",
        "n": 1234567890123456789,
        "f": 1.5,
        "l": [[1]],
    }
    assert parse_json_object(b"  ", empty_ok=True) == {}
    with pytest.raises(InvalidInput):
        parse_json_object(b"[1]")


def test_texts_and_media_types() -> None:
    assert check_text("id", "abc", 8) == "abc"
    for bad in ("a" * 9, "a\x00", "\ud800"):
        with pytest.raises(InvalidInput):
            check_text("id", bad, 8)
    assert is_json_media_type("Application/JSON; charset=utf-8")
    assert not is_json_media_type("text/plain") and not is_json_media_type(None)


@given(st.binary(max_size=400))
def test_any_bytes_parse_or_are_refused_cleanly(raw: bytes) -> None:
    with contextlib.suppress(InvalidInput):  # anything else (a crash) fails the property
        parse_json(raw)
