"""Relays: registration, their tokens, presence, and which conversations see them."""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlalchemy import exists, select, update

from server.auth import tokens
from server.db import models
from server.db.base import StoreBase, relay_record, rowcount
from server.db.errors import InvalidValue, NotFound
from server.db.records import RelayRecord

RELAY_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class RelayStore(StoreBase):
    """The relays registered with this server and where they are shared."""

    async def add_relay(self, name: str, owner_id: str) -> tuple[RelayRecord, str]:
        """Register a relay; returns its record and its ``rdr_`` token (shown once)."""
        if not RELAY_NAME_RE.fullmatch(name):
            raise InvalidValue("name", "1-64 letters, digits, '.', '_' or '-'")
        token = tokens.new_secret(tokens.RELAY_TOKEN_PREFIX)
        row = models.Relay(
            id=tokens.new_id(),
            name=name,
            owner_id=owner_id,
            token_hash=tokens.hash_secret(token),
            connected=False,
            capabilities=[],
            created_at=self._now(),
        )
        async with self._unique("relay", name) as session:
            if await session.get(models.User, owner_id) is None:
                raise NotFound("user", owner_id)
            session.add(row)
        return relay_record(row), token

    async def rotate_relay_token(self, relay_id: str) -> str:
        """Replace the relay's token (the old one stops working) and lift a revocation."""
        token = tokens.new_secret(tokens.RELAY_TOKEN_PREFIX)
        async with self._sessions.begin() as session:
            result = await session.execute(
                update(models.Relay)
                .filter_by(id=relay_id)
                .values(token_hash=tokens.hash_secret(token), token_revoked_at=None)
            )
            if rowcount(result) == 0:
                raise NotFound("relay", relay_id)
        return token

    async def revoke_relay(self, relay_id: str) -> None:
        """Refuse the relay's token from now on (the server closes its connection)."""
        async with self._sessions.begin() as session:
            result = await session.execute(
                update(models.Relay).filter_by(id=relay_id).values(token_revoked_at=self._now())
            )
            if rowcount(result) == 0:
                raise NotFound("relay", relay_id)

    async def authenticate_relay(self, token: str) -> RelayRecord | None:
        """The relay holding this token, unless unknown or revoked."""
        if not tokens.looks_like(token, tokens.RELAY_TOKEN_PREFIX):
            return None
        async with self._sessions() as session:
            row = await session.scalar(
                select(models.Relay).filter_by(
                    token_hash=tokens.hash_secret(token), token_revoked_at=None
                )
            )
            return relay_record(row) if row else None

    async def get_relay(self, relay_id: str) -> RelayRecord | None:
        async with self._sessions() as session:
            row = await session.get(models.Relay, relay_id)
            return relay_record(row) if row else None

    async def get_relay_by_name(self, name: str) -> RelayRecord | None:
        async with self._sessions() as session:
            row = await session.scalar(select(models.Relay).filter_by(name=name))
            return relay_record(row) if row else None

    async def list_relays(self) -> list[RelayRecord]:
        async with self._sessions() as session:
            rows = await session.scalars(select(models.Relay).order_by(models.Relay.name))
            return [relay_record(row) for row in rows]

    async def set_relay_presence(
        self,
        relay_id: str,
        *,
        connected: bool,
        relay_version: str | None = None,
        protocol_version: int | None = None,
        capabilities: Sequence[str] | None = None,
    ) -> None:
        """Record a connect or disconnect; given hello fields replace the stored ones."""
        values: dict[str, object] = {"connected": connected, "last_seen_at": self._now()}
        if relay_version is not None:
            values["relay_version"] = relay_version
        if protocol_version is not None:
            values["protocol_version"] = protocol_version
        if capabilities is not None:
            values["capabilities"] = list(capabilities)
        await self._update_relay(relay_id, values)

    async def touch_relay(self, relay_id: str) -> None:
        """Note that the relay was heard from just now."""
        await self._update_relay(relay_id, {"last_seen_at": self._now()})

    async def touch_relays(self, relay_ids: Sequence[str]) -> list[str]:
        """Note that these relays were heard from; return those whose token was revoked."""
        if not relay_ids:
            return []
        async with self._sessions.begin() as session:
            await session.execute(
                update(models.Relay)
                .where(models.Relay.id.in_(relay_ids))
                .values(last_seen_at=self._now())
            )
            revoked = await session.scalars(
                select(models.Relay.id).where(
                    models.Relay.id.in_(relay_ids), models.Relay.token_revoked_at.is_not(None)
                )
            )
            return list(revoked)

    async def share_relay(self, relay_id: str, conversation_id: str) -> None:
        """Make the relay visible in the conversation (idempotent)."""
        async with self._sessions.begin() as session:
            if await session.get(models.Relay, relay_id) is None:
                raise NotFound("relay", relay_id)
            if await session.get(models.Conversation, conversation_id) is None:
                raise NotFound("conversation", conversation_id)
            if await session.get(models.RelayShare, (relay_id, conversation_id)) is None:
                session.add(models.RelayShare(relay_id=relay_id, conversation_id=conversation_id))

    async def unshare_relay(self, relay_id: str, conversation_id: str) -> None:
        async with self._sessions.begin() as session:
            share = await session.get(models.RelayShare, (relay_id, conversation_id))
            if share is not None:
                await session.delete(share)

    async def relays_visible_in(self, conversation_id: str) -> list[RelayRecord]:
        """The relays shared with the conversation, by name."""
        async with self._sessions() as session:
            rows = await session.scalars(
                select(models.Relay)
                .join(models.RelayShare)
                .where(models.RelayShare.conversation_id == conversation_id)
                .order_by(models.Relay.name)
            )
            return [relay_record(row) for row in rows]

    async def is_relay_visible(self, relay_id: str, conversation_id: str) -> bool:
        async with self._sessions() as session:
            found = await session.scalar(
                select(
                    exists().where(
                        models.RelayShare.relay_id == relay_id,
                        models.RelayShare.conversation_id == conversation_id,
                    )
                )
            )
            return bool(found)

    async def _update_relay(self, relay_id: str, values: dict[str, object]) -> None:
        async with self._sessions.begin() as session:
            result = await session.execute(
                update(models.Relay).filter_by(id=relay_id).values(**values)
            )
            if rowcount(result) == 0:
                raise NotFound("relay", relay_id)
