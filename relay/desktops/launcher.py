"""``Launcher``: what one kind of desktop gives the lifecycle (``relay/desktops/lifecycle.py``).

The lifecycle owns the slots, the state file, the events, the adoption and orphan rules; a
launcher knows how a desktop of its kind starts, how it is checked, how it is removed, and how
its records read. A new kind of desktop is one more launcher (docs/desktops.md, "Kinds").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from relay.desktops.config import DesktopSettings
from relay.desktops.credentials import RelayAuthority
from relay.desktops.probe import ProbeResult
from relay.desktops.slots import D, S, Slots
from relay.desktops.user import DesktopUser
from relay.desktops.validation import StartRequest
from wire.ids import DesktopSessionId
from wire.ops import DesktopKind

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class StartOptions:
    """A start as the op names it, before its kind's launcher checks it."""

    kind: str | None = None
    slot: str = "main"
    geometry: str = "1280x800"
    depth: int = 24
    audio: bool | None = None
    started_by: str | None = None
    apps: list[str] | None = None
    profile: str | None = None
    persist_home: bool = False


@dataclass
class Records(Generic[D, S]):
    """What an earlier relay recorded: its desktops and its starts that did not finish.
    ``keep`` False: none of the desktops may be kept, whatever its probe answers."""

    desktops: list[D] = field(default_factory=list)
    interrupted: list[S] = field(default_factory=list)
    keep: bool = True


def rebuilt(
    records: Iterable[dict[str, Any]], from_record: Callable[[dict[str, Any]], T], what: str
) -> list[T]:
    """The state file's records of ``what`` rebuilt by ``from_record``; a malformed one
    (``KeyError``, ``TypeError``, ``ValueError``) is skipped with a warning."""
    rebuilt: list[T] = []
    for record in records:
        try:
            rebuilt.append(from_record(record))
        except (KeyError, TypeError, ValueError) as err:
            logger.warning("skipping a malformed record of %s: %s", what, type(err).__name__)
    return rebuilt


class Launcher(Protocol[D, S]):
    """One kind's part of the desktop lifecycle. The lifecycle holds the lock around every
    call that starts, removes or discards; a launcher changes the slots only where it says."""

    kind: DesktopKind
    config: DesktopSettings
    # How logs and refusals name this kind's desktops ("desktops", "docker desktops").
    noun: str
    state_file: Path
    authority: RelayAuthority
    # This kind's entries in the relay's X authority file.
    authority_source: str
    # True: the records are read (adopted) before a first start, and none is written before.
    adopt_first: bool

    def attach(self, slots: Slots[D, S]) -> None:
        """Receive the lifecycle's slots (once, when the lifecycle is made)."""

    def check_kind(self, kind: str) -> None:
        """Refuse a ``kind`` this launcher does not start (``invalid_args``/``unavailable``)."""

    def request(self, options: StartOptions) -> StartRequest:
        """Check a start's options (4xx naming the field)."""

    async def ready(self, req: StartRequest) -> None:
        """Refuse a start that cannot run here (``unavailable``), before anything is made."""

    async def launch(self, req: StartRequest, session_id: DesktopSessionId) -> D:
        """Start one desktop. Records its start in ``slots.starting`` under ``session_id``
        before it makes anything; removes what it made when it fails or is cancelled."""

    def dead(self, desktop: D) -> str | None:
        """Why the desktop is gone (its essential processes exited), or None: it runs."""

    async def health(self, desktop: D, retry: bool = False) -> ProbeResult:
        """Probe the desktop end to end."""

    async def freeze(self, desktop: D, frozen: bool) -> None:
        """Freeze (``frozen``) or thaw every process of the desktop; ``unavailable`` where
        this kind or host cannot (docs/desktops.md, "Pause and resume")."""

    async def frozen(self, desktop: D) -> bool:
        """Whether a recorded desktop was left frozen (a restarted relay re-adopts it paused)."""

    async def remove(self, desktop: D) -> bool:
        """Stop the desktop and remove what it made (it is no longer in the slots); whether
        nothing of it remains."""

    async def recorded(self) -> Records[D, S] | None:
        """Parse the state file's records (malformed ones skipped); None: they cannot be
        checked now and wait for a later adoption."""

    async def adoptable(self, desktop: D) -> bool:
        """Whether a recorded desktop is still this relay's (made ready for its probe)."""

    def leftover(self, desktop: D) -> S:
        """A recorded desktop that is not kept, as a start to discard."""

    async def discard(self, leftover: S) -> bool:
        """Stop and remove what an interrupted start or a desktop not kept left; whether
        nothing of it remains."""

    async def sweep(self, kept: set[DesktopSessionId], left_any: bool) -> None:
        """After an adoption: remove what no kept desktop owns (directories, strays)."""

    async def saving(self, busy: bool) -> None:
        """Before every save: whether a desktop of this kind runs or starts."""

    async def beat(self, desktops: Sequence[D]) -> None:
        """Tell the desktops' orphan guards the relay is alive (every watchdog round)."""

    def sound_lost(self, desktop: D) -> bool:
        """Whether a desktop with sound has visibly lost its sound server (cheap, no I/O)."""

    def failed_programs(self, desktop: D) -> list[str]:
        """The desktop's session programs that failed, in the order they did (cheap, no I/O)."""

    async def silent(self, desktops: Sequence[D]) -> list[D]:
        """Of desktops with sound, those whose sound server no longer answers (watchdog)."""

    async def review(self, desktops: Sequence[D]) -> list[tuple[D, str]]:
        """The watchdog's own checks of this kind: the desktops to fail, with the reason."""

    async def desktop_user(self) -> DesktopUser | None:
        """Who the desktops run as (None: as the relay)."""

    async def close(self, left: bool) -> None:
        """The relay closes: release what the kind holds (``left``: desktops stay running)."""
