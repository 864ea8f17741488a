"""What a relay may say about one of its desktops: a reported row, checked field by field.

A relay's rows (in its ``hello``, ``desktop.status`` answers, ``desktop.start`` results and
``desktop.changed`` events) are claims the server stores and shows to people. Each passes
:func:`check_row` before it reaches the inventory: identifiers by the rules the API itself uses
for them, the short descriptive fields bounded by what the inventory keeps, ``started_at``
parsed as ISO 8601, a ``reason`` cut to a bound. A row that does not fit is refused
(``InvalidArgs`` naming the field); the rest of the relay's report is unaffected.

``started_by`` is never read from a relay: who started a desktop is the server's own record.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from wire.errors import InvalidArgs
from wire.ops import DESKTOP_KINDS, DesktopKind

# The API's own rules for these names (``server.actions.desktop``: ``SESSION_ID``, ``SLOT``).
SESSION_ID_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
SLOT_RE: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
DEFAULT_SLOT: Final = "main"
# As long as the inventory's columns for them.
MAX_GEOMETRY: Final = 32
MAX_DISPLAY: Final = 32
MAX_STARTED_AT: Final = 40
# A reason is free text from the relay: kept, but no longer than this.
MAX_REASON: Final = 200


@dataclass(frozen=True)
class ReportedDesktop:
    """The fields of a relay's row the server keeps, each checked."""

    desktop_session_id: str
    kind: DesktopKind
    slot: str
    started_at: str | None
    reason: str | None
    geometry: str | None
    display: str | None


def check_row(data: Mapping[str, Any]) -> ReportedDesktop:
    """The row ``data`` as the server may keep it; ``InvalidArgs`` naming the first bad field."""
    return ReportedDesktop(
        desktop_session_id=_session_id(data.get("desktop_session_id")),
        kind=_kind(data.get("kind", "virtual")),
        slot=_slot(data.get("slot", DEFAULT_SLOT)),
        started_at=_started_at(data.get("started_at")),
        reason=_reason(data.get("reason")),
        geometry=_short(data, "geometry", MAX_GEOMETRY),
        display=_short(data, "display", MAX_DISPLAY),
    )


def _session_id(value: object) -> str:
    if not isinstance(value, str) or not SESSION_ID_RE.fullmatch(value):
        raise InvalidArgs("desktop_session_id", "must be 1-64 of A-Z a-z 0-9 _ -")
    return value


def _kind(value: object) -> DesktopKind:
    for kind in DESKTOP_KINDS:
        if value == kind:
            return kind
    raise InvalidArgs("kind", f"must be one of {', '.join(DESKTOP_KINDS)}")


def _slot(value: object) -> str:
    if value is None:
        return DEFAULT_SLOT
    if not isinstance(value, str) or not SLOT_RE.fullmatch(value):
        raise InvalidArgs("slot", f"must match ^{SLOT_RE.pattern}$")
    return value


def _started_at(value: object) -> str | None:
    """An ISO 8601 time, as the inventory writes it (UTC when the relay gave no offset)."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_STARTED_AT:
        raise InvalidArgs("started_at", f"must be an ISO 8601 time (at most {MAX_STARTED_AT})")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgs("started_at", "must be an ISO 8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.isoformat()


def _reason(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgs("reason", "must be a string")
    return value[:MAX_REASON]


def _short(data: Mapping[str, Any], field: str, limit: int) -> str | None:
    value = data.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise InvalidArgs(field, f"must be a string of at most {limit} characters")
    return value
