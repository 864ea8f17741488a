"""Wiring of the screen tool into the app: one :class:`ScreenTool`, the ``screen`` action.

The composition root (``server.app``) calls :func:`start_screen` after the actions registry
exists, and hands the tool to the routes that use it. With several replicas it is given the other
replicas (``server.cluster.build``): its revisions name this replica, and calls on another
replica's revisions run there.
"""

from __future__ import annotations

from server.actions.registry import ActionRegistry
from server.config import Settings
from server.db.audit import AuditRow
from server.db.store import Store
from server.relays.router import RelayRouter
from server.screen.action import RouterRequests, screen_action
from server.screen.revisions import RevisionStore
from server.screen.tool import RevisionIssuers, ScreenTool


class QueuedAudit:
    """The tool's ``AuditWriter``: rows go to the store's background writer (``queue_audit``)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def write_audit(self, row: AuditRow) -> None:
        await self._store.queue_audit(row)


def build_tool(
    relays: RelayRouter,
    store: Store,
    settings: Settings,
    issuers: RevisionIssuers | None = None,
) -> ScreenTool:
    """A screen tool over the relays and the store, with the configured revision store."""
    revisions = RevisionStore(
        settings.secret_key,
        ttl_s=settings.screen_revision_ttl_s,
        memory_bytes=settings.screen_revision_memory_bytes,
        issuer=issuers.replica_id if issuers is not None else "",
    )
    return ScreenTool(RouterRequests(relays), revisions, QueuedAudit(store), issuers)


def start_screen(
    relays: RelayRouter,
    store: Store,
    settings: Settings,
    actions: ActionRegistry,
    issuers: RevisionIssuers | None = None,
) -> ScreenTool:
    """Create the tool and register the ``screen`` action it runs."""
    tool = build_tool(relays, store, settings, issuers)
    actions.register(screen_action(tool))
    return tool
