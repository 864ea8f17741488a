"""``DesktopBackend``: one kind of desktop, as the relay's ops see it.

Each kind has one implementation, chosen in one place (``relay/service.py``): ``virtual``
(``relay/desktops/backend.py``: desktops the relay runs as processes) and ``local``
(``relay/local_desktop.py``: the host's real screen, through the host helper). A further kind
(``docker``) is a further implementation. The op handlers (``relay/handlers.py``) pick a
backend by the kind an op names, or by the one that holds the op's ``desktop_session_id``, and
never branch on the kind.

Every backend answers every method; what a kind does not have (profiles, kept homes, the
direct path) it refuses with ``unavailable`` or answers empty.
"""

from __future__ import annotations

from typing import Any, Protocol

from relay.a11y.client import A11yCaller
from relay.channels import ByteStream
from wire.errors import ErrorCode, OpError
from wire.ops import (
    DesktopAppsResult,
    DesktopKind,
    DesktopLaunchResult,
    DesktopPauseArgs,
    DesktopResetHomeResult,
    DesktopStartArgs,
    DesktopStartResult,
    DesktopStopArgs,
    DesktopStopResult,
    KeyboardState,
    ProfileInfo,
    RelayRow,
    RevisionTarget,
    ScreenResult,
    VncDirectResult,
)
from wire.screen_actions import ScreenAction

DEFAULT_SLOT = "main"


class DesktopBackend(Protocol):
    """What the op handlers need of one kind of desktop."""

    @property
    def kind(self) -> DesktopKind: ...

    def capabilities(self) -> list[str]:
        """What this backend adds to ``hello``'s capabilities (e.g. ``virtual_desktop``)."""
        ...

    async def start(self, args: DesktopStartArgs) -> DesktopStartResult:
        """Start a desktop in the slot, or return the one running there."""
        ...

    async def stop(self, args: DesktopStopArgs) -> DesktopStopResult:
        """Compare-and-stop (``docs/protocol.md``)."""
        ...

    async def pause(self, args: DesktopPauseArgs, paused: bool) -> RelayRow:
        """Freeze (``paused``) or thaw the exact desktop (docs/desktops.md, "Pause and
        resume"); ``unavailable`` where the kind has no pause."""
        ...

    async def rows(self) -> list[RelayRow]:
        """Status rows of this kind's desktops."""
        ...

    async def holds(self, desktop_session_id: str) -> bool:
        """Whether this backend runs the session, without waiting for a start or stop."""
        ...

    async def find(self, desktop_session_id: str | None, slot: str) -> RelayRow | None:
        """The row of one desktop: ``desktop_session_id``'s, else the one in ``slot``."""
        ...

    async def open_stream(self, row: RelayRow) -> ByteStream:
        """The desktop's VNC byte stream (RFB, no authentication left to the viewer)."""
        ...

    async def screen(
        self, row: RelayRow, action: ScreenAction, args: dict[str, Any]
    ) -> ScreenResult:
        """One screen action on the desktop's display (its revision target already checked)."""
        ...

    async def keyboard_state(self, row: RelayRow) -> KeyboardState:
        """Lock-key LEDs of the desktop's display."""
        ...

    async def release_held(self, row: RelayRow) -> bool:
        """Release the buttons and keys an agent left held (``mouse_down``, ``key_down``) on
        the desktop's display; whether this backend tracks held input at all."""
        ...

    def profiles(self) -> list[ProfileInfo]: ...

    async def apps(self, desktop_session_id: str | None, slot: str) -> DesktopAppsResult: ...

    async def launch(
        self, desktop_session_id: str | None, slot: str, app: str
    ) -> DesktopLaunchResult: ...

    async def reset_home(self, slot: str) -> DesktopResetHomeResult: ...

    def direct(self, desktop_session_id: str) -> VncDirectResult | None:
        """Port and VNC secret of the session's x11vnc on this host (None: not offered)."""
        ...

    async def a11y_worker(self, row: RelayRow) -> A11yCaller:
        """The accessibility worker of the desktop (``a11y_unavailable`` when it has none)."""
        ...

    async def aclose(self) -> None: ...


def not_offered(kind: str, what: str) -> OpError:
    """What a backend answers for a feature its kind does not have."""
    return OpError(ErrorCode.UNAVAILABLE, f"{kind} desktops have no {what}")


def check_revision_target(target: RevisionTarget | None, row: RelayRow) -> None:
    """A screenshot's desktop session and display must be the target's: a revision of one
    session never guards input on another (a restarted slot, another desktop)."""
    if target is None:
        return
    expected = (target.get("desktop_session_id"), target.get("display"))
    if expected != (row["desktop_session_id"], row.get("display")):
        raise OpError(
            ErrorCode.REVISION_MISMATCH,
            "the screen revision belongs to another desktop than the one this action targets",
        )


def unpaused(row: RelayRow) -> RelayRow:
    """``row``, unless its desktop is paused: nothing may wait on its frozen processes (its X
    server, its accessibility bus), so every action on it answers ``paused`` at once."""
    if row["state"] == "paused":
        raise OpError(
            ErrorCode.PAUSED,
            "this desktop is paused; resume it first (desktop_resume)",
            {"desktop_session_id": row["desktop_session_id"]},
        )
    return row


def require_row(row: RelayRow | None, desktop_session_id: str | None, kind: str) -> RelayRow:
    """``row`` if there is one and it is not paused, else ``not_running`` saying which desktop
    is not (or ``paused``)."""
    if row is not None:
        return unpaused(row)
    if desktop_session_id is None:
        raise OpError(
            ErrorCode.NOT_RUNNING,
            f"no {kind} desktop is running in slot {DEFAULT_SLOT!r} on this relay",
        )
    raise OpError(ErrorCode.NOT_RUNNING, "this desktop session is not running")
