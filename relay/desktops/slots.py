"""``Slots``: one kind's desktops by slot, its starts in progress, the lifecycle lock that
serialises every change of them, and the files that record them (the state file and the
kind's entries in the relay's X authority file).

Every method that changes the table expects the caller to hold :attr:`Slots.lock`
(docs/desktops.md, "Lifecycle lock and compare-and-stop"). The lifecycle
(``relay/desktops/lifecycle.py``) owns it; its launcher reads it and records its starts in it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

from relay.desktops.credentials import DesktopCredentials, RelayAuthority
from relay.desktops.state import StateFile
from wire.ids import DesktopSessionId
from wire.ops import DesktopState, RelayRow

logger = logging.getLogger(__name__)


class LiveDesktop(Protocol):
    """What the lifecycle reads and changes of a live desktop of any kind."""

    desktop_session_id: DesktopSessionId
    slot: str
    display: int
    audio: bool
    audio_reason: str | None
    failed_programs: list[str]
    state: DesktopState

    @property
    def credentials(self) -> DesktopCredentials | None: ...

    def to_row(self) -> RelayRow: ...

    def to_record(self) -> dict[str, Any]: ...


class Leftover(Protocol):
    """A start in progress, or what a start or an earlier relay left to stop."""

    @property
    def desktop_session_id(self) -> DesktopSessionId: ...

    @property
    def slot(self) -> str: ...

    def to_record(self) -> dict[str, Any]: ...


D = TypeVar("D", bound=LiveDesktop)
S = TypeVar("S", bound=Leftover)


def now_iso() -> str:
    """The current UTC time as rows carry it (milliseconds, ``Z``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def failed_event(desktop: LiveDesktop, reason: str) -> RelayRow:
    """The event that tells the server a desktop failed."""
    return {**desktop.to_row(), "state": "failed", "reason": reason, "updated_at": now_iso()}


class Slots(Generic[D, S]):
    """The desktops of one kind, the lock over them and their state and authority files."""

    def __init__(
        self,
        state: StateFile,
        authority: RelayAuthority,
        source: str,
        *,
        read: bool,
        saving: Callable[[bool], Awaitable[None]],
    ) -> None:
        self.desktops: dict[str, D] = {}
        # Starts in progress, recorded in the state file before they make anything.
        self.starting: dict[DesktopSessionId, S] = {}
        self.lock = asyncio.Lock()
        self.state = state
        self.authority = authority
        self._source = source
        # Whether the state file may be written: a kind whose records wait for an adoption
        # (containers, while no daemon answers) writes nothing before one has read them.
        self.read = read
        self._saving = saving

    def sorted(self) -> list[D]:
        """The live desktops in slot order."""
        return [self.desktops[slot] for slot in sorted(self.desktops)]

    def by_session(self, desktop_session_id: str) -> D | None:
        """The live desktop of ``desktop_session_id`` (None: no such desktop)."""
        return next(
            (d for d in self.desktops.values() if d.desktop_session_id == desktop_session_id), None
        )

    def others(self, leaving: DesktopSessionId | None = None) -> bool:
        """Whether a desktop runs, or a start other than ``leaving`` is in progress."""
        return bool(self.desktops) or any(s != leaving for s in self.starting)

    def write_now(self) -> None:
        """Write the state file at once (blocking, on purpose: a relay killed in the next
        instant must still find what a start just spawned)."""
        if not self.read:
            return
        try:
            self.state.save(self.sorted(), list(self.starting.values()))
        except OSError as err:
            logger.error("cannot write desktop state file: %s", type(err).__name__)

    async def save(self) -> None:
        """The state file and the kind's authority entries, after every change of desktops."""
        await self._saving(bool(self.desktops or self.starting))
        if not self.read:
            return
        desktops, starting = self.sorted(), list(self.starting.values())
        cookies = [(d.display, c.x_cookie) for d in desktops if (c := d.credentials) is not None]
        try:
            # A relay that never ran a desktop of this kind writes no state file.
            recorded = await asyncio.to_thread(self.state.path.exists)
            if desktops or starting or recorded:
                await asyncio.to_thread(self.state.save, desktops, starting)
        except OSError as err:
            # Desktops keep running; only re-adoption after a restart is at risk.
            logger.error("cannot write desktop state file: %s", type(err).__name__)
        try:
            await asyncio.to_thread(self.authority.write, cookies, self._source)
        except OSError as err:
            # The desktops run; the relay's own screen actions on a new one would be refused.
            logger.error("cannot write the relay's X authority file: %s", type(err).__name__)
