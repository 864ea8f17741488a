"""Wiring of the screen tool into the app: one :class:`ScreenTool`, the ``screen`` action.

``server.app`` calls :func:`start_screen` after the actions registry exists; the tool lives on
``app.state.screen_tool``.
"""

from __future__ import annotations

from typing import Any

from server.config import Settings
from server.db.store import Store
from server.screen.action import SCREEN_ACTION, HubRequests
from server.screen.revisions import RevisionStore
from server.screen.tool import ScreenTool


class QueuedAudit:
    """The tool's ``AuditWriter``: rows go to the store's background writer (``queue_audit``)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def write_audit(self, **row: Any) -> None:
        await self._store.queue_audit(**row)


def build_tool(state: Any, settings: Settings) -> ScreenTool:
    """A screen tool over the app's relay hub and store, with the configured revision store."""
    revisions = RevisionStore(
        settings.secret_key,
        ttl_s=settings.screen_revision_ttl_s,
        memory_bytes=settings.screen_revision_memory_bytes,
    )
    return ScreenTool(HubRequests(state.hub), revisions, QueuedAudit(state.store))


def start_screen(state: Any, settings: Settings) -> ScreenTool:
    """Create the tool and register the ``screen`` action (needs ``state.actions``)."""
    state.screen_tool = build_tool(state, settings)
    state.actions.register(SCREEN_ACTION)
    tool: ScreenTool = state.screen_tool
    return tool
