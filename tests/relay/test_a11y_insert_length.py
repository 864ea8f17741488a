"""``relay.a11y.toolkits.insert_length``: the length ``EditableText.InsertText`` is given, in the
unit each toolkit's bridge counts (appending end to end: tests/integration/test_a11y_qt.py and
tests/integration/test_a11y.py)."""

from __future__ import annotations

import pytest

from relay.a11y.toolkits import insert_length

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "qt", "atk"),
    [
        ("", 0, 0),
        ("abc", 3, 3),
        ("é", 1, 2),
        ("日本", 2, 6),
        ("😀x", 3, 5),  # an emoji is two UTF-16 code units and four bytes
        ("Zoë 日本 ☃", 8, 15),
    ],
)
def test_qt_counts_utf16_code_units_and_atk_counts_bytes(text: str, qt: int, atk: int) -> None:
    assert insert_length(text, "qt") == qt
    assert insert_length(text, "gtk") == atk
    assert insert_length(text, "") == atk  # an app that does not say its toolkit
