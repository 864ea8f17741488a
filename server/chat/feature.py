"""The chat feature's wiring: its service over the typed actions and the event stream."""

from __future__ import annotations

from typing import Any

from server.actions.invoke import ActionRunner
from server.auth.dependencies import Authenticator
from server.auth.principal import Principal
from server.chat.ports import ChatService, ChatStore, DesktopRows
from server.events.conversations import ConversationEvents


def build_chat(
    auth: Authenticator,
    store: ChatStore,
    inventory: DesktopRows,
    actions: ActionRunner,
    events: ConversationEvents,
) -> ChatService:
    """Chat over ``actions`` (audited with ``source=chat``) and ``events``."""

    async def invoke(
        principal: Principal, name: str, body: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        return await actions.invoke(principal, name, body, source="chat")

    return ChatService(auth, store, inventory, invoke, events.publish_conversation)
