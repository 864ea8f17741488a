"""``ConversationEvents``: what the server publishes per conversation, and the feeds to read it.

Every topic is one conversation (``conversation:<id>``), so visibility is decided once, when a
subscriber is admitted (member with at least ``read``; re-checked while it listens), and the
inventory payloads are built for exactly the relays shared with that conversation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Final, Protocol

from server.db.rows import DesktopRow, RowAnnotator
from server.events.bus import EventBus, Feed
from wire.ids import RelayId

log = logging.getLogger(__name__)

INVENTORY_CHANGED: Final = "desktop_inventory_changed"
MESSAGE_CREATED: Final = "message_created"
STREAM_RESET: Final = "stream_reset"
# The last event of every stream when the server stops; the client reconnects (``retry``).
SERVER_STOPPING: Final = "server_stopping"


def topic_for(conversation_id: str) -> str:
    return f"conversation:{conversation_id}"


class VisibleRows(Protocol):
    """The ``Store`` reads the publisher needs (``server.db.inventory``)."""

    async def conversations_sharing(self, relay_id: str) -> list[str]: ...

    async def visible_desktops(
        self, conversation_id: str, states: Sequence[str] = ...
    ) -> list[DesktopRow]: ...


class ConversationEvents:
    """Publishes inventory changes and chat messages on each conversation's topic."""

    def __init__(self, bus: EventBus, store: VisibleRows, *, ping_s: float = 15.0) -> None:
        self.bus = bus
        self._store = store
        self.ping_s = ping_s
        self._pending: dict[str, list[DesktopRow]] = {}
        self._publishers: dict[str, asyncio.Task[None]] = {}
        self._annotate: RowAnnotator | None = None

    def use_control(self, annotate: RowAnnotator) -> None:
        """Snapshots carry who is in control of each desktop."""
        self._annotate = annotate

    async def publish_conversation(
        self, conversation_id: str, event: str, data: dict[str, Any]
    ) -> str:
        """Publish ``event`` to the conversation's subscribers; returns the event id."""
        return await self.bus.publish(topic_for(conversation_id), event, data)

    async def inventory_changed(self, relay_id: RelayId, changed: list[DesktopRow]) -> None:
        """Inventory batch listener: an event for each conversation that sees the relay.

        Changes that arrive while a conversation's event is being built are coalesced into the
        next one (``changed`` lists them all), so a burst of reconnecting relays costs one
        snapshot per conversation per round instead of one per relay.
        """
        for conversation_id in await self._store.conversations_sharing(relay_id):
            self._pending.setdefault(conversation_id, []).extend(changed)
            if conversation_id not in self._publishers:
                task = asyncio.create_task(self._publish_pending(conversation_id))
                self._publishers[conversation_id] = task

    async def _publish_pending(self, conversation_id: str) -> None:
        try:
            while changed := self._pending.pop(conversation_id, None):
                snapshot = await self.snapshot(conversation_id, changed)
                await self.publish_conversation(conversation_id, INVENTORY_CHANGED, snapshot)
        except Exception:
            log.exception("publishing the inventory of %s failed", conversation_id)
        finally:
            self._publishers.pop(conversation_id, None)

    async def settled(self) -> None:
        """Wait until every pending inventory event is published."""
        while self._publishers:
            await asyncio.wait(list(self._publishers.values()))

    async def aclose(self) -> None:
        """Finish pending inventory events (bounded), then stop."""
        tasks = list(self._publishers.values())
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=5.0)
            for task in pending:
                task.cancel()

    async def snapshot(
        self, conversation_id: str, changed: Sequence[DesktopRow] = ()
    ) -> dict[str, Any]:
        """``{desktops: [live visible rows], changed: [rows that just changed]}``."""
        rows = await self._store.visible_desktops(conversation_id)
        if self._annotate is not None:
            rows = await self._annotate(rows)
        return {
            "conversation_id": conversation_id,
            "desktops": [row.to_dict() for row in rows],
            "changed": [row.to_dict() for row in changed],
        }

    async def open(self, conversation_id: str, last_event_id: str | None) -> Feed:
        return await self.bus.open_feed(topic_for(conversation_id), last_event_id)

    async def close(self, feed: Feed) -> None:
        await self.bus.close_feed(feed)
