"""Who may open a viewer stream: every check runs before any transport opens.

Order matters: the token is verified first (pure, no I/O), so a forged, expired or
other-session token costs one HMAC and never reaches the database, the inventory or a relay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from server.auth.capability import ViewerDenied, ViewerGrant, verify
from server.db.records import Role, UserRecord, role_allows
from server.db.rows import DesktopDirectory, DesktopRow
from wire.errors import CloseCode, ErrorCode, RelaydeskError
from wire.ids import RelayId

# The one place the page's reasons are worded; the page maps close codes, not these strings.
REASONS: dict[CloseCode, str] = {
    CloseCode.UNKNOWN_SESSION: "unknown desktop session",
    CloseCode.VIEWER_EXPIRED: "viewer access expired",
    CloseCode.VIEWER_FORBIDDEN: "viewer access forbidden",
    CloseCode.RELAY_UNREACHABLE: "relay unreachable",
    CloseCode.DESKTOP_STOPPED: "desktop stopped",
    CloseCode.DESKTOP_PAUSED: "desktop paused",
    CloseCode.AUDIO_UNAVAILABLE: "audio unavailable",
}
# The same refusals as error codes (an HTTP answer, a log line).
ERROR_CODES: dict[CloseCode, ErrorCode] = {
    CloseCode.UNKNOWN_SESSION: ErrorCode.NOT_FOUND,
    CloseCode.VIEWER_EXPIRED: ErrorCode.UNAUTHORIZED,
    CloseCode.VIEWER_FORBIDDEN: ErrorCode.FORBIDDEN,
    CloseCode.RELAY_UNREACHABLE: ErrorCode.RELAY_UNREACHABLE,
    CloseCode.DESKTOP_STOPPED: ErrorCode.NOT_RUNNING,
    CloseCode.DESKTOP_PAUSED: ErrorCode.PAUSED,
    CloseCode.AUDIO_UNAVAILABLE: ErrorCode.UNAVAILABLE,
    CloseCode.INTERNAL_ERROR: ErrorCode.INTERNAL,
}
VIEWABLE_STATES = frozenset({"starting", "running"})
VIEWER_ROLE: Role = "write"


class ViewerRefused(RelaydeskError):
    """The viewer stream may not open (or must close); carries its close code and reason."""

    def __init__(self, close_code: CloseCode, detail: str | None = None) -> None:
        self.close_code = close_code
        self.code = ERROR_CODES.get(close_code, ErrorCode.UNAVAILABLE)
        base = REASONS.get(close_code)
        if base and detail:
            self.reason = f"{base}: {detail}"
        else:
            self.reason = base or detail or close_code.name.lower().replace("_", " ")
        super().__init__(self.reason)


class MembershipStore(Protocol):
    """What the checks need of the ``Store``."""

    async def get_role(self, conversation_id: str, user_id: str) -> Role | None: ...

    async def is_relay_visible(self, relay_id: str, conversation_id: str) -> bool: ...

    async def get_user(self, user_id: str) -> UserRecord | None: ...


class RelayPresence(Protocol):
    def is_connected(self, relay_id: RelayId) -> bool: ...


@dataclass(frozen=True)
class ViewerTarget:
    """A checked viewer request: the grant and the desktop row it names."""

    grant: ViewerGrant
    row: DesktopRow

    @property
    def relay_id(self) -> RelayId:
        return RelayId(self.row.relay_id)


def refusal_for_state(state: str) -> ViewerRefused | None:
    """Why a row in ``state`` cannot be viewed (None: it can)."""
    if state in VIEWABLE_STATES:
        return None
    if state == "unknown":
        return ViewerRefused(CloseCode.RELAY_UNREACHABLE)
    if state == "paused":  # its streams close; the page waits for the resume
        return ViewerRefused(CloseCode.DESKTOP_PAUSED)
    return ViewerRefused(CloseCode.DESKTOP_STOPPED)


async def check_viewer(
    *,
    secret_key: str,
    token: str,
    desktop_session_id: str,
    directory: DesktopDirectory | None,
    store: MembershipStore,
    relays: RelayPresence,
) -> ViewerTarget:
    """The checked target, or :class:`ViewerRefused` naming the first failed check."""
    try:
        grant = verify(secret_key, token, desktop_session_id)
    except ViewerDenied as err:
        raise ViewerRefused(err.denial.close_code) from None
    # Keyed by the grant's relay: another relay claiming the same session id is never found.
    row = await directory.row(grant.relay_id, desktop_session_id) if directory else None
    if row is None:
        raise ViewerRefused(CloseCode.UNKNOWN_SESSION)
    role = await store.get_role(grant.conversation_id, grant.user_id)
    if not role_allows(role, VIEWER_ROLE):
        raise ViewerRefused(CloseCode.VIEWER_FORBIDDEN)
    if not await store.is_relay_visible(grant.relay_id, grant.conversation_id):
        raise ViewerRefused(CloseCode.VIEWER_FORBIDDEN)
    if (refused := refusal_for_state(row.state)) is not None:
        raise refused
    if not relays.is_connected(RelayId(row.relay_id)):
        raise ViewerRefused(CloseCode.RELAY_UNREACHABLE)
    return ViewerTarget(grant, row)
