"""A relay's desktop rows checked field by field before the server keeps them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.examples import examples
from wire.desktop_rows import MAX_REASON, ReportedDesktop, check_row
from wire.errors import InvalidArgs

pytestmark = pytest.mark.unit

ROW: dict[str, Any] = {
    "desktop_session_id": "Zq3-x_9",
    "kind": "virtual",
    "slot": "agent-2",
    "state": "running",
    "started_at": "2026-12-01T10:00:00.123Z",
    "started_by": "alice",
    "geometry": "1280x800",
    "display": ":12",
    "vnc_port": 5901,
}


def test_a_good_row_keeps_its_fields_and_never_its_started_by() -> None:
    assert check_row(ROW) == ReportedDesktop(
        desktop_session_id="Zq3-x_9",
        kind="virtual",
        slot="agent-2",
        started_at="2026-12-01T10:00:00.123000+00:00",
        reason=None,
        geometry="1280x800",
        display=":12",
    )
    assert not hasattr(check_row(ROW), "started_by")


def test_defaults_for_a_minimal_row() -> None:
    row = check_row({"desktop_session_id": "s1"})
    assert (row.kind, row.slot, row.started_at) == ("virtual", "main", None)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("desktop_session_id", None),
        ("desktop_session_id", ""),
        ("desktop_session_id", "s" * 65),
        ("desktop_session_id", "../etc"),
        ("desktop_session_id", 7),
        ("kind", "physical"),
        ("kind", None),
        ("slot", "Main"),
        ("slot", "../x"),
        ("slot", "a" * 33),
        ("slot", ""),
        ("slot", 1),
        ("started_at", "yesterday"),
        ("started_at", "2026-13-01T00:00:00Z"),
        ("started_at", 1733040000),
        ("started_at", "2026-12-01T10:00:00Z" + " " * 40),
        ("geometry", "x" * 33),
        ("geometry", 1280),
        ("display", ":" + "9" * 40),
        ("reason", ["failed"]),
    ],
)
def test_a_bad_field_refuses_the_row_naming_it(field: str, value: Any) -> None:
    with pytest.raises(InvalidArgs) as caught:
        check_row({**ROW, field: value})
    assert caught.value.details["field"] == field


def test_a_long_reason_is_cut_and_a_time_without_offset_is_utc() -> None:
    row = check_row({**ROW, "reason": "r" * 10_000, "started_at": "2026-12-01T10:00:00"})
    assert row.reason == "r" * MAX_REASON
    assert row.started_at == "2026-12-01T10:00:00+00:00"


def _outcome(data: dict[str, Any]) -> ReportedDesktop | str:
    """The kept row, or the field that refused it."""
    try:
        return check_row(data)
    except InvalidArgs as err:
        return str(err.details["field"])


# A loaded machine makes the first draws slow; the property is what matters, not their speed.
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(sorted(ROW)), st.none() | st.text() | st.integers()))
def test_any_row_is_either_kept_within_bounds_or_refused_by_field(data: dict[str, Any]) -> None:
    row = _outcome(data)
    if isinstance(row, str):
        assert row in ROW
        return
    assert len(row.desktop_session_id) <= 64 and len(row.slot) <= 32
    assert len(row.reason or "") <= MAX_REASON and len(row.display or "") <= 32
