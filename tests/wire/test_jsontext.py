"""The fast JSON writer: the standard library's output, parsed back, for everything it wrote."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire import jsontext

pytestmark = pytest.mark.unit

_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(_values)
def test_reads_back_as_the_standard_library_would(value):
    assert json.loads(jsontext.dumps(value)) == json.loads(json.dumps(value))
    assert json.loads(jsontext.dumps_text(value)) == value


def test_output_is_compact_utf8():
    assert jsontext.dumps({"a": [1, "ü"]}) == '{"a":[1,"ü"]}'.encode()


def test_integer_keys_become_strings_like_json():
    assert json.loads(jsontext.dumps({1: "x"})) == {"1": "x"}


@pytest.mark.parametrize("value", ["lone \ud800 surrogate", 2**70, -(2**90)])
def test_what_orjson_refuses_falls_back_to_the_standard_library(value):
    assert json.loads(jsontext.dumps_text({"v": value})) == {"v": value}


def test_non_finite_floats_are_written_as_null():
    assert json.loads(jsontext.dumps([math.nan, math.inf])) == [None, None]


def test_what_nothing_can_encode_is_a_type_error():
    with pytest.raises(TypeError):
        jsontext.dumps({"v": object()})
