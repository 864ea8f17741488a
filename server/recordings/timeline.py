"""A recording's timeline: what happened on its desktop while it was recorded, on the
video's clock, built from the audit rows of the desktop session (docs/recording.md).

Each audit row becomes one event: its moment (wall-clock UTC ms, and ``t_ms`` on the video),
its kind (for the player's markers), the door it came through, a short summary of its
arguments and its outcome. Summaries are built from the audit rows' details, which hold
shapes and never typed text, keys or secrets; the click point, the guard's verdict and the
element an accessibility or browser act was on (its role and accessible name) are kept where
the row has them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final, Literal

from server.db.records import AuditRecord
from server.recordings.files import Recording

EventKind = Literal[
    "agent_action",
    "refused",
    "takeover",
    "hand_back",
    "grant",
    "stop",
    "chat",
    "lifecycle",
    "viewer",
]
DOORS: Final = {
    "api": "HTTP",
    "web": "HTTP",
    "mcp": "MCP",
    "cua": "Cua",
    "cdp": "CDP",
    "computer_use": "computer-use",
    "chat": "chat",
}
LIFECYCLE_OPS: Final = frozenset(
    {"desktop.start", "desktop.stop", "desktop.stop_confirm", "desktop.record", "desktop.reset"}
)
# Detail fields a summary may show: shapes and figures, never content.
SUMMARY_FIELDS: Final = (
    "action",
    "button",
    "direction",
    "amount",
    "text_length",
    "key_count",
    "guarded",
    "width",
    "height",
    "scope",
    "budget",
    "state",
)
REFUSED: Final = frozenset({"refused", "denied", "error", "failed"})
CONTROL_CHANGED: Final = "control.changed"
# Explicit acts whose change of control is their own event, and how soon the change follows.
CONTROL_ACTS: Final = frozenset(
    {"desktop.take_control", "desktop.hand_back", "agent.stop", "agent.grant"}
)
CAUSE_MS: Final = 2_000
# Rows a moment after the recording's last covered moment still belong to it (its stop).
GRACE_MS: Final = 5_000


def at_ms(moment: datetime) -> int:
    """Wall-clock UTC milliseconds of an audit row's time (stored naive as UTC)."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return int(aware.timestamp() * 1000)


def _kind(row: AuditRecord) -> EventKind:
    if row.op == CONTROL_CHANGED:
        return "takeover" if row.outcome == "person" else "hand_back"
    if row.op == "desktop.take_control":
        return "takeover"
    if row.op == "desktop.hand_back":
        return "hand_back"
    if row.op.startswith("viewer.") or row.op == "desktop.attach":
        return "viewer"
    if row.op == "agent.grant":
        return "grant"
    if row.op == "agent.stop":
        return "stop"
    if row.source == "chat" or row.op.startswith("chat"):
        return "chat"
    if row.op in LIFECYCLE_OPS:
        return "lifecycle"
    refused = row.outcome in REFUSED or (row.reason is not None and row.outcome != "ok")
    return "refused" if refused else "agent_action"


def _summary(details: dict[str, Any]) -> dict[str, Any]:
    return {name: details[name] for name in SUMMARY_FIELDS if name in details}


def _point(details: dict[str, Any]) -> dict[str, int] | None:
    x, y = details.get("x"), details.get("y")
    if type(x) is int and type(y) is int:
        return {"x": x, "y": y}
    return None


def _element(details: dict[str, Any]) -> dict[str, str] | None:
    element = details.get("element")
    if not isinstance(element, dict) or not isinstance(element.get("role"), str):
        return None
    name = element.get("name")
    return {"role": element["role"], "name": name if isinstance(name, str) else ""}


def _guard(row: AuditRecord, details: dict[str, Any]) -> str | None:
    if not details.get("guarded"):
        return None
    return "stale" if details.get("error") == "stale_screen" else "passed"


def event_of(row: AuditRecord, recording: Recording) -> dict[str, Any]:
    """One timeline event."""
    details = row.details or {}
    moment = at_ms(row.at)
    event: dict[str, Any] = {
        "id": row.audit_id,
        "at_ms": moment,
        "t_ms": max(0, moment - recording.origin_ms),
        "kind": _kind(row),
        "name": row.op,
        "door": DOORS.get(row.source or "", row.source),
        "actor": row.actor,
        "outcome": row.outcome,
        "reason": row.reason,
        "summary": _summary(details),
    }
    if (point := _point(details)) is not None:
        event["point"] = point
    if (element := _element(details)) is not None:
        event["element"] = element
    if (guard := _guard(row, details)) is not None:
        event["guard"] = guard
        if isinstance(details.get("difference"), int | float):
            event["difference"] = details["difference"]
    return event


def _duplicate(row: AuditRecord, rows: Sequence[AuditRecord]) -> bool:
    """A row that repeats another: the action runner's row of a screen call whose tool wrote
    its own, fuller row; a change of control an explicit act (take control, hand back, Stop,
    a grant) just caused."""
    if row.op == "screen":
        return any(
            other.op.startswith("screen.") and other.request_id == row.request_id
            for other in rows
            if other.request_id
        )
    if row.op == CONTROL_CHANGED:
        moment = at_ms(row.at)
        return any(
            other.op in CONTROL_ACTS and 0 <= moment - at_ms(other.at) <= CAUSE_MS for other in rows
        )
    return False


def _until(recording: Recording, now_ms: int) -> int:
    return (recording.end_ms if recording.end_ms is not None else now_ms) + GRACE_MS


def timeline(
    recording: Recording, rows: Sequence[AuditRecord], now_ms: int
) -> list[dict[str, Any]]:
    """The recording's events, in order, each once."""
    end = _until(recording, now_ms)
    return [
        event_of(row, recording)
        for row in rows
        if recording.start_ms - GRACE_MS <= at_ms(row.at) <= end and not _duplicate(row, rows)
    ]


def window(recording: Recording, now_ms: int) -> tuple[datetime, datetime]:
    """The audit rows' time range a recording's timeline reads."""

    def moment(ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, UTC)

    return moment(recording.start_ms - GRACE_MS), moment(_until(recording, now_ms))
