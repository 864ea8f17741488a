"""What chat needs from the rest of the server, as small interfaces.

The typed actions and the event stream belong to other modules; chat reaches them only
through these seams, so its tests run with fakes and any front end gets identical behaviour.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from server.auth.dependencies import Authenticator
from server.auth.principal import Principal
from server.db.audit import AuditWriter
from server.db.records import MemberRecord, MembershipRecord, MessageRecord, RelayRecord, Role
from server.db.rows import DesktopRow

ActionResult = tuple[int, dict[str, Any]]
# invoke(principal, name, body) -> (HTTP status, JSON body): the typed actions.
InvokeAction = Callable[[Principal, str, dict[str, Any]], Awaitable[ActionResult]]
# publish(conversation_id, event name, data): one event on the conversation stream.
PublishEvent = Callable[[str, str, dict[str, Any]], Awaitable[object]]


class ChatStore(AuditWriter, Protocol):
    """The parts of ``Store`` chat uses."""

    async def get_role(self, conversation_id: str, user_id: str) -> Role | None: ...

    async def list_conversations_for(self, user_id: str) -> list[MembershipRecord]: ...

    async def list_members(self, conversation_id: str) -> list[MemberRecord]: ...

    async def relays_visible_in(self, conversation_id: str) -> list[RelayRecord]: ...

    async def add_message(
        self,
        conversation_id: str,
        author_id: str | None,
        text: str,
        *,
        kind: str = "user",
        payload: dict[str, Any] | None = None,
    ) -> MessageRecord: ...

    async def list_messages(
        self, conversation_id: str, *, before_id: int | None = None, limit: int = 50
    ) -> list[MessageRecord]: ...


class DesktopRows(Protocol):
    """The part of the inventory chat reads: how each desktop a transcript names is now."""

    async def row(self, relay_id: str, desktop_session_id: str) -> DesktopRow | None: ...


@dataclass
class ChatService:
    """What the chat routes need: who is calling, the store, the desktops' rows, the typed
    actions and the event stream."""

    auth: Authenticator
    store: ChatStore
    inventory: DesktopRows
    invoke: InvokeAction
    publish: PublishEvent
