"""Inventory rows (with who is in control of each desktop) and the read-side interface other
server parts depend on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal, Protocol, TypedDict

from wire.ops import DesktopKind, DesktopState

ControlState = Literal["idle", "agent", "person"]


class ControlInfo(TypedDict):
    """The control state as the inventory row, the events and the actions show it."""

    state: ControlState
    name: str | None
    held: bool
    until: str | None
    agent: str | None


LIVE_STATES: frozenset[DesktopState] = frozenset(
    {"starting", "running", "paused", "stopping", "unknown"}
)


@dataclass(frozen=True)
class DesktopRow:
    """One desktop incarnation, keyed by ``(relay_id, desktop_session_id)``."""

    relay_id: str
    desktop_session_id: str
    kind: DesktopKind
    slot: str
    state: DesktopState
    started_at: str | None
    started_by: str | None
    updated_at: str
    reason: str | None = None
    geometry: str | None = None
    display: str | None = None
    relay_name: str | None = None
    # Who is in control (docs/control.md); filled where rows are listed, else absent.
    control: ControlInfo | None = None
    # True while the desktop is recorded (docs/recording.md); filled where rows are listed.
    recording: bool | None = None

    def with_recording(self) -> DesktopRow:
        """This row marked as recorded (a copy, like :meth:`with_control`)."""
        row = object.__new__(DesktopRow)
        row.__dict__.update(self.__dict__)
        row.__dict__["recording"] = True
        return row

    def with_control(self, control: ControlInfo) -> DesktopRow:
        """This row with who is in control: a copy made without ``__init__`` (``replace``
        cost ~20 µs a row where thousands are listed at once)."""
        row = object.__new__(DesktopRow)
        row.__dict__.update(self.__dict__)
        row.__dict__["control"] = control
        return row

    @property
    def can_stop(self) -> bool:
        return self.state in {"starting", "running", "paused", "unknown"}

    def to_dict(self) -> dict[str, Any]:
        # Plain attribute reads: ``asdict`` deep-copies and dominated listing 1,000 rows.
        values = {name: getattr(self, name) for name in _FIELD_NAMES}
        values["can_stop"] = self.can_stop
        if self.control is None:
            del values["control"]
        if self.recording is None:
            del values["recording"]
        return values


_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(DesktopRow))


RowListener = Callable[[DesktopRow], Awaitable[None]]
# Adds who is in control to listed rows (``ControlService.annotate``).
RowAnnotator = Callable[[Sequence[DesktopRow]], Awaitable[list[DesktopRow]]]


class DesktopDirectory(Protocol):
    """What viewers, chat and the screen tool need to know of the inventory."""

    async def row(self, relay_id: str, desktop_session_id: str) -> DesktopRow | None:
        """The row of this relay's desktop session, whatever its state, or None.

        Always keyed by the relay too: a session id is the relay's claim, and one relay's
        claims never reach another relay's rows.
        """
        ...

    def add_listener(self, listener: RowListener) -> None:
        """Call ``listener`` with the new row after every change of any row."""
        ...
