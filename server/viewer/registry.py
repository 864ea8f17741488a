"""The live viewer streams of this server, by desktop session.

Viewers are a consequence of desktops, never a cause: the registry listens to the inventory and
closes every stream of a desktop that stopped, failed, was replaced in its slot or lost its
relay. Nothing here ever stops a desktop.
"""

from __future__ import annotations

import logging

from server.inventory.rows import DesktopRow
from server.viewer.access import ViewerRefused, refusal_for_state
from server.viewer.tunnel import ViewerSession
from wire.errors import CloseCode

log = logging.getLogger(__name__)


class ViewerRegistry:
    """Viewer sessions grouped by ``desktop_session_id``."""

    def __init__(self) -> None:
        self._sessions: dict[str, set[ViewerSession]] = {}

    def add(self, session: ViewerSession) -> None:
        self._sessions.setdefault(session.desktop_session_id, set()).add(session)

    def discard(self, session: ViewerSession) -> None:
        sessions = self._sessions.get(session.desktop_session_id)
        if sessions is not None:
            sessions.discard(session)
            if not sessions:
                del self._sessions[session.desktop_session_id]

    def count(self, desktop_session_id: str | None = None) -> int:
        """Open viewer streams (of one desktop session, or all)."""
        if desktop_session_id is not None:
            return len(self._sessions.get(desktop_session_id, ()))
        return sum(len(group) for group in self._sessions.values())

    async def row_changed(self, row: DesktopRow) -> None:
        """Inventory listener: end the streams this change makes unviewable."""
        refusal = refusal_for_state(row.state)
        if refusal is not None:
            self._end_session(row.desktop_session_id, refusal)
        else:
            self._end_replaced(row)

    def _end_replaced(self, row: DesktopRow) -> None:
        """A new session in a slot replaces whatever session was viewed there before."""
        for session_id, group in list(self._sessions.items()):
            old = next(iter(group)).target.row
            same_slot = (old.relay_id, old.kind, old.slot) == (row.relay_id, row.kind, row.slot)
            if same_slot and session_id != row.desktop_session_id:
                self._end_session(session_id, ViewerRefused(CloseCode.DESKTOP_STOPPED, "replaced"))

    def _end_session(self, desktop_session_id: str, refusal: ViewerRefused) -> None:
        group = self._sessions.get(desktop_session_id, set())
        if group:
            log.info("closing %d viewer(s): %s", len(group), refusal.reason)
        for session in list(group):
            session.end(refusal.code, refusal.reason)

    def end_all(self, reason: str) -> None:
        """Shutdown: end every stream with ``going away``."""
        for group in list(self._sessions.values()):
            for session in list(group):
                session.end(CloseCode.GOING_AWAY, reason)
