"""The live viewer streams of this server, by desktop session.

Viewers are a consequence of desktops, never a cause: the registry listens to the inventory and
closes every stream of a desktop that stopped, failed, was replaced in its slot or lost its
relay. Nothing here ever stops a desktop.
"""

from __future__ import annotations

import logging

from server.db.rows import DesktopRow
from server.viewer.access import ViewerRefused, refusal_for_state
from server.viewer.tunnel import ViewerSession
from wire.errors import CloseCode

log = logging.getLogger(__name__)

# (relay_id, desktop_session_id)
DesktopKey = tuple[str, str]


def desktop_key(row: DesktopRow) -> DesktopKey:
    """Streams are grouped by relay and session: a session id alone is one relay's claim."""
    return (row.relay_id, row.desktop_session_id)


class ViewerRegistry:
    """Viewer sessions grouped by ``(relay_id, desktop_session_id)``."""

    def __init__(self) -> None:
        self._sessions: dict[DesktopKey, set[ViewerSession]] = {}
        # bytes of the streams that ended (to the viewer, from it), for /metrics
        self._ended_bytes = (0, 0)

    def add(self, session: ViewerSession) -> None:
        self._sessions.setdefault(desktop_key(session.target.row), set()).add(session)

    def discard(self, session: ViewerSession) -> None:
        key = desktop_key(session.target.row)
        sessions = self._sessions.get(key)
        if sessions is not None and session in sessions:
            sessions.discard(session)
            down, up = self._ended_bytes
            self._ended_bytes = (down + session.bytes_down, up + session.bytes_up)
            if not sessions:
                del self._sessions[key]

    def count(self, desktop_session_id: str | None = None) -> int:
        """Open viewer streams (of one desktop session, or all)."""
        groups = self._sessions.items()
        return sum(
            len(group)
            for (_, session_id), group in groups
            if desktop_session_id is None or session_id == desktop_session_id
        )

    def bytes_relayed(self) -> tuple[int, int]:
        """VNC bytes sent to viewers and received from them since start (open streams too)."""
        down, up = self._ended_bytes
        for group in self._sessions.values():
            for session in group:
                down, up = down + session.bytes_down, up + session.bytes_up
        return down, up

    async def row_changed(self, row: DesktopRow) -> None:
        """Inventory listener: end the streams this change makes unviewable. A paused
        desktop's streams stay open (idle while it is frozen): its picture comes back with the
        resume, and its pages take no input meanwhile (``desktop_state`` on their feed)."""
        if row.state == "paused":
            return
        refusal = refusal_for_state(row.state)
        if refusal is not None:
            self._end_session(desktop_key(row), refusal)
        else:
            self._end_replaced(row)

    def _end_replaced(self, row: DesktopRow) -> None:
        """A new session in a slot replaces whatever session was viewed there before."""
        for key, group in list(self._sessions.items()):
            old = next(iter(group)).target.row
            same_slot = (old.relay_id, old.kind, old.slot) == (row.relay_id, row.kind, row.slot)
            if same_slot and key != desktop_key(row):
                self._end_session(key, ViewerRefused(CloseCode.DESKTOP_STOPPED, "replaced"))

    def _end_session(self, key: DesktopKey, refusal: ViewerRefused) -> None:
        group = self._sessions.get(key, set())
        if group:
            log.info("closing %d viewer(s): %s", len(group), refusal.reason)
        for session in list(group):
            session.end(refusal.close_code, refusal.reason)

    def end_all(self, reason: str) -> None:
        """Shutdown: end every stream with ``going away``."""
        for group in list(self._sessions.values()):
            for session in list(group):
                session.end(CloseCode.GOING_AWAY, reason)
