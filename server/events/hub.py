"""``ConversationEvents``: what the server publishes per conversation, and the feeds to read it.

Every topic is one conversation (``conversation:<id>``), so visibility is decided once, when a
subscriber is admitted (member with at least ``read``; re-checked while it listens), and the
inventory payloads are built for exactly the relays shared with that conversation.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final, Protocol

from server.events.bus import Bus, Feed
from server.inventory.rows import DesktopRow
from wire.ids import RelayId

log = logging.getLogger(__name__)

INVENTORY_CHANGED: Final = "desktop_inventory_changed"
MESSAGE_CREATED: Final = "message_created"
STREAM_RESET: Final = "stream_reset"


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

    def __init__(self, bus: Bus, store: VisibleRows, *, ping_s: float = 15.0) -> None:
        self.bus = bus
        self._store = store
        self.ping_s = ping_s

    async def publish_conversation(
        self, conversation_id: str, event: str, data: dict[str, Any]
    ) -> str:
        """Publish ``event`` to the conversation's subscribers; returns the event id."""
        return await self.bus.publish(topic_for(conversation_id), event, data)

    async def inventory_changed(self, relay_id: RelayId, changed: list[DesktopRow]) -> None:
        """Inventory batch listener: one event per conversation that sees the relay."""
        for conversation_id in await self._store.conversations_sharing(relay_id):
            await self.publish_conversation(
                conversation_id, INVENTORY_CHANGED, await self.snapshot(conversation_id, changed)
            )

    async def snapshot(
        self, conversation_id: str, changed: Sequence[DesktopRow] = ()
    ) -> dict[str, Any]:
        """``{desktops: [live visible rows], changed: [rows that just changed]}``."""
        rows = await self._store.visible_desktops(conversation_id)
        return {
            "conversation_id": conversation_id,
            "desktops": [row.to_dict() for row in rows],
            "changed": [row.to_dict() for row in changed],
        }

    async def open(self, conversation_id: str, last_event_id: str | None) -> Feed:
        return await self.bus.open_feed(topic_for(conversation_id), last_event_id)

    async def close(self, feed: Feed) -> None:
        await self.bus.close_feed(feed)


async def publish_conversation(
    app_state: Any, conversation_id: str, event: str, data: dict[str, Any]
) -> str:
    """Publish on ``app.state.events`` (chat: ``message_created``)."""
    events: ConversationEvents = app_state.events
    return await events.publish_conversation(conversation_id, event, data)
