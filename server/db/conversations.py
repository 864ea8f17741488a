"""Conversations, their members' roles, and the chat transcript."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from server.db import models
from server.db.base import StoreBase
from server.db.errors import InvalidValue, NotFound
from server.db.records import (
    ConversationRecord,
    MemberRecord,
    MembershipRecord,
    MessageRecord,
    Role,
    parse_role,
)
from server.secrets import tokens
from wire.ids import ConversationId, UserId

MAX_PAGE = 500


class ConversationStore(StoreBase):
    """Who may see and do what where: conversations and member roles."""

    async def create_conversation(
        self, title: str, members: Iterable[tuple[str, Role]] = ()
    ) -> ConversationRecord:
        """Create a conversation with its initial members."""
        if not title.strip():
            raise InvalidValue("title", "must not be empty")
        row = models.Conversation(id=tokens.new_id(), title=title, created_at=self._now())
        async with self._sessions.begin() as session:
            session.add(row)
            await session.flush()
            for user_id, role in members:
                await _put_member(session, ConversationId(row.id), user_id, role)
        await self._caches_changed("role")
        return _conversation_record(row)

    async def add_member(self, conversation_id: str, user_id: str, role: Role) -> None:
        """Add a member, or change the role of an existing one."""
        async with self._sessions.begin() as session:
            if await session.get(models.Conversation, conversation_id) is None:
                raise NotFound("conversation", conversation_id)
            await _put_member(session, conversation_id, user_id, role)
        await self._caches_changed("role")

    async def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        async with self._sessions() as session:
            row = await session.get(models.Conversation, conversation_id)
            return _conversation_record(row) if row else None

    async def get_conversation_by_title(self, title: str) -> ConversationRecord | None:
        """The oldest conversation with this exact title (titles are not unique)."""
        async with self._sessions() as session:
            row = await session.scalar(
                select(models.Conversation)
                .filter_by(title=title)
                .order_by(models.Conversation.created_at, models.Conversation.id)
                .limit(1)
            )
            return _conversation_record(row) if row else None

    async def list_conversations(self) -> list[ConversationRecord]:
        async with self._sessions() as session:
            rows = await session.scalars(
                select(models.Conversation).order_by(models.Conversation.created_at)
            )
            return [_conversation_record(row) for row in rows]

    async def get_role(self, conversation_id: str, user_id: str) -> Role | None:
        """The user's role in the conversation; None when not a member or disabled."""
        hit, cached = self.role_cache.get((conversation_id, user_id))
        if hit:
            return cast("Role | None", cached)
        generation = self.role_cache.generation
        async with self._sessions() as session:
            # A disabled user holds no role anywhere (viewer grants re-check it).
            role = await session.scalar(
                select(models.ConversationMember.role)
                .join(models.User)
                .where(
                    models.ConversationMember.conversation_id == conversation_id,
                    models.ConversationMember.user_id == user_id,
                    models.User.disabled_at.is_(None),
                )
            )
        found = parse_role(role) if role else None
        self.role_cache.put((conversation_id, user_id), found, generation)
        return found

    async def list_conversations_for(self, user_id: str) -> list[MembershipRecord]:
        """The conversations the user belongs to, with the user's role in each."""
        async with self._sessions() as session:
            rows = await session.execute(
                select(models.Conversation, models.ConversationMember.role)
                .join(models.ConversationMember)
                .where(models.ConversationMember.user_id == user_id)
                .order_by(models.Conversation.created_at)
            )
            return [
                MembershipRecord(
                    conversation_id=ConversationId(conv.id),
                    title=conv.title,
                    created_at=conv.created_at,
                    role=parse_role(role),
                )
                for conv, role in rows
            ]

    async def list_members(self, conversation_id: str) -> list[MemberRecord]:
        async with self._sessions() as session:
            rows = await session.execute(
                select(
                    models.ConversationMember.user_id,
                    models.User.username,
                    models.ConversationMember.role,
                )
                .join(models.User)
                .where(models.ConversationMember.conversation_id == conversation_id)
                .order_by(models.User.username)
            )
            return [
                MemberRecord(ConversationId(conversation_id), UserId(uid), name, parse_role(role))
                for uid, name, role in rows
            ]

    # -- messages ---------------------------------------------------------------------

    async def add_message(
        self,
        conversation_id: str,
        author_id: str | None,
        text: str,
        *,
        kind: str = "user",
        payload: dict[str, Any] | None = None,
    ) -> MessageRecord:
        """Append a message to the transcript (``author_id`` None for system messages)."""
        row = models.Message(
            conversation_id=conversation_id,
            author_id=author_id,
            kind=kind,
            text=text,
            payload=payload,
            created_at=self._now(),
        )
        async with self._sessions.begin() as session:
            if await session.get(models.Conversation, conversation_id) is None:
                raise NotFound("conversation", conversation_id)
            session.add(row)
        return _message_record(row)

    async def list_messages(
        self, conversation_id: str, *, before_id: int | None = None, limit: int = 50
    ) -> list[MessageRecord]:
        """The newest ``limit`` messages older than ``before_id``, oldest first."""
        query = select(models.Message).filter_by(conversation_id=conversation_id)
        if before_id is not None:
            query = query.where(models.Message.id < before_id)
        query = query.order_by(models.Message.id.desc()).limit(max(1, min(limit, MAX_PAGE)))
        async with self._sessions() as session:
            rows = list(await session.scalars(query))
        return [_message_record(row) for row in reversed(rows)]


async def _put_member(
    session: AsyncSession, conversation_id: str, user_id: str, role: Role
) -> None:
    try:
        parse_role(role)
    except ValueError as err:
        raise InvalidValue("role", str(err)) from err
    if await session.get(models.User, user_id) is None:
        raise NotFound("user", user_id)
    member = await session.get(models.ConversationMember, (conversation_id, user_id))
    if member is None:
        session.add(
            models.ConversationMember(conversation_id=conversation_id, user_id=user_id, role=role)
        )
    else:
        member.role = role


def _conversation_record(row: models.Conversation) -> ConversationRecord:
    return ConversationRecord(
        conversation_id=ConversationId(row.id), title=row.title, created_at=row.created_at
    )


def _message_record(row: models.Message) -> MessageRecord:
    return MessageRecord(
        message_id=row.id,
        conversation_id=ConversationId(row.conversation_id),
        author_id=UserId(row.author_id) if row.author_id else None,
        kind=row.kind,
        text=row.text,
        payload=row.payload,
        created_at=row.created_at,
    )
