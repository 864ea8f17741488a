"""The recordings' pure parts: the timeline built from audit rows, the export's and the video
route's parameters, the manifest on disk (docs/recording.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from server.actions.audit import MAX_NAME, act_details
from server.db.records import AuditRecord
from server.recordings.export import export_params
from server.recordings.files import Recording, RecordingFiles, Segment
from server.recordings.routes import _range_start
from server.recordings.timeline import timeline
from wire.errors import OpError
from wire.ids import DesktopSessionId, RelayId

pytestmark = pytest.mark.unit

START_MS = 1_764_000_000_000
RECORDING_ID = "rec_" + "ab" * 12


def recording(**overrides: Any) -> Recording:
    values: dict[str, Any] = {
        "recording_id": RECORDING_ID,
        "conversation_id": "c1",
        "relay_id": "r1",
        "desktop_session_id": "s1",
        "kind": "virtual",
        "slot": "main",
        "started_by": "alice",
        "start_ms": START_MS,
        "end_ms": START_MS + 60_000,
    }
    return Recording(**{**values, **overrides})


def row(audit_id: int, after_ms: int, op: str, outcome: str = "ok", **extra: Any) -> AuditRecord:
    at = datetime.fromtimestamp((START_MS + after_ms) / 1000, UTC)
    return AuditRecord(
        audit_id=audit_id,
        at=at,
        op=op,
        actor=extra.pop("actor", "bot"),
        outcome=outcome,
        conversation_id=None,
        relay_id=RelayId("r1"),
        desktop_session_id=DesktopSessionId("s1"),
        reason=extra.pop("reason", None),
        source=extra.pop("source", "mcp"),
        request_id=extra.pop("request_id", None),
        details=extra or None,
    )


def test_events_carry_the_point_the_guard_and_the_door_but_never_text() -> None:
    rows = [
        row(1, 1000, "screen.click", x=40, y=50, guarded=True, action="click"),
        row(
            2,
            2000,
            "screen.click",
            "refused",
            reason="stale_screen",
            x=40,
            y=50,
            guarded=True,
            error="stale_screen",
            difference=0.4,
        ),
        row(3, 3000, "screen.type", action="type", text_length=12, text="secret"),
    ]
    events = timeline(recording(), rows, START_MS + 60_000)
    assert [e["kind"] for e in events] == ["agent_action", "refused", "agent_action"]
    assert events[0]["point"] == {"x": 40, "y": 50} and events[0]["guard"] == "passed"
    assert events[1]["guard"] == "stale" and events[1]["difference"] == 0.4
    assert events[0]["door"] == "MCP" and events[0]["t_ms"] == 1000
    assert events[2]["summary"] == {"action": "type", "text_length": 12}
    assert "secret" not in repr(events)


def test_an_act_names_its_element_but_never_a_password_or_the_text_typed() -> None:
    secret = "hunter2 correct horse"
    # A password field whose accessible name an app computed from its content, then one
    # labelled properly, a button with a long name over two lines, an answer without a role.
    leaky = {"role": "password_text", "name": f"Password {secret}", "value": secret}
    labelled = {"role": "password_text", "name": "Password", "value": "•" * 21}
    long_name = {"role": "push_button", "name": "Save\n" + "x" * 200}
    fill = act_details("fill", leaky, {"ref": "@b1a2b3c4:e7", "text": secret})
    typed = act_details("type", labelled, {"ref": "@s1a2b3c4:e3", "text": secret})
    click = act_details("click", long_name, {"ref": "@s1a2b3c4:e4"})
    assert fill == {
        "action": "fill",
        "text_length": 21,
        "element": {"role": "password_text", "name": ""},
    }
    assert typed["element"] == {"role": "password_text", "name": "Password"}
    assert click["element"]["name"] == ("Save " + "x" * 200)[:MAX_NAME]
    assert act_details("click", {"method": "native"}, {}) == {"action": "click"}
    rows = [
        row(1, 1000, "desktop.browser.fill", **fill),
        row(2, 2000, "desktop.a11y.type", **typed),
        row(3, 3000, "desktop.a11y.click", **click),
    ]
    events = timeline(recording(), rows, START_MS + 60_000)
    assert [e["element"]["name"] for e in events] == ["", "Password", click["element"]["name"]]
    assert events[0]["summary"] == {"action": "fill", "text_length": 21}
    assert "hunter2" not in repr(events) and "horse" not in repr(events)


def test_each_event_once_a_change_of_control_an_act_caused_is_that_act() -> None:
    rows = [
        row(1, 1000, "desktop.take_control", actor="alice", source="web"),
        row(2, 1100, "control.changed", "person", actor="alice"),
        row(3, 9000, "control.changed", "person", actor="bob"),  # bob's input in a viewer
        row(4, 9500, "screen", request_id="q"),
        row(5, 9500, "screen.click", request_id="q", x=1, y=2),
    ]
    events = timeline(recording(), rows, START_MS + 60_000)
    assert [(e["name"], e["kind"]) for e in events] == [
        ("desktop.take_control", "takeover"),
        ("control.changed", "takeover"),
        ("screen.click", "agent_action"),
    ]


def test_the_timeline_counts_from_the_videos_own_start() -> None:
    events = timeline(recording(video_start_ms=START_MS + 40), [row(1, 1000, "agent.stop")], 0)
    assert events[0]["t_ms"] == 960 and events[0]["kind"] == "stop"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"images": "gif"}, "images"),
        ({"steps": "x"}, "steps"),
        ({"max_steps": "0"}, "max_steps"),
        ({"max_steps": "ten"}, "max_steps"),
        ({"colour": "1"}, "colour"),
    ],
)
def test_bad_export_parameters_name_the_field(query: dict[str, str], field: str) -> None:
    with pytest.raises(OpError) as refused:
        export_params(query)
    assert refused.value.details["field"] == field


@pytest.mark.parametrize("header", ["pages=1-2", "bytes=-", "bytes=9-3", "bytes=0-1,5-9"])
def test_a_bad_range_is_refused_naming_it(header: str) -> None:
    with pytest.raises(OpError) as refused:
        _range_start(header)
    assert refused.value.details["field"] == "Range" and refused.value.status == 416


def test_ranges_a_player_sends_are_taken() -> None:
    assert _range_start(None) is None
    assert _range_start("bytes=0-") == 0
    assert _range_start("bytes=100-199") == 100
    assert _range_start("bytes=-500") is None


def test_the_manifest_round_trips_and_refuses_ids_that_are_not_recordings(tmp_path: Path) -> None:
    files = RecordingFiles(tmp_path)
    kept = recording(segments=[Segment(0, START_MS, START_MS + 60_000, 1234, 90)])
    files.save(kept)
    assert files.load(RECORDING_ID) == kept
    assert [r.recording_id for r in files.all()] == [RECORDING_ID]
    with pytest.raises(ValueError, match="not a recording id"):
        files.folder("../etc")
    assert not files.records_by_default("c1")
    files.set_records_by_default("c1", True)
    assert files.records_by_default("c1")
    files.delete(RECORDING_ID)
    assert files.load(RECORDING_ID) is None
