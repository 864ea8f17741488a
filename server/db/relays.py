"""Relays: registration, their tokens, presence, and which conversations see them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, bindparam, exists, select, update

from server.db import models
from server.db.base import StoreBase, relay_record, rowcount
from server.db.batch import Coalescer
from server.db.errors import InvalidValue, NotFound
from server.db.records import RelayRecord
from server.secrets import tokens
from wire.ids import RelayId, UserId

RELAY_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

_RELAY_COLUMNS = (
    models.Relay.id,
    models.Relay.name,
    models.Relay.owner_id,
    models.Relay.connected,
    models.Relay.last_seen_at,
    models.Relay.protocol_version,
    models.Relay.relay_version,
    models.Relay.capabilities,
    models.Relay.created_at,
    models.Relay.co_located,
    models.Relay.token_hash,
)


def _relay_from_columns(values: Sequence[Any]) -> RelayRecord:
    relay_id, name, owner_id, connected, last_seen, protocol, version, caps, created = values[:9]
    co_located = values[9]
    return RelayRecord(
        relay_id=RelayId(relay_id),
        name=name,
        owner_id=UserId(owner_id),
        connected=connected,
        last_seen_at=last_seen,
        protocol_version=protocol,
        relay_version=version,
        capabilities=tuple(caps or ()),
        created_at=created,
        revoked=False,
        co_located=co_located,
    )


_RELAYS = cast("Table", models.Relay.__table__)


@dataclass(frozen=True)
class PresenceUpdate:
    """One relay's connect or disconnect, as ``set_relay_presence`` records it."""

    relay_id: str
    values: dict[str, object]


class RelayStore(StoreBase):
    """The relays registered with this server and where they are shared."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._auth_batches: Coalescer[str, RelayRecord | None] = Coalescer(
            self._authenticate_relays
        )
        self._presence_batches: Coalescer[PresenceUpdate, bool] = Coalescer(self._write_presence)

    async def add_relay(
        self, name: str, owner_id: str, *, co_located: bool = False
    ) -> tuple[RelayRecord, str]:
        """Register a relay; returns its record and its ``rdr_`` token (shown once).

        ``co_located`` marks a relay that runs on the server's own host.
        """
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
            co_located=co_located,
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
        await self._relays_changed()
        return token

    async def revoke_relay(self, relay_id: str) -> None:
        """Refuse the relay's token from now on (the server closes its connection).

        ``authenticate_relay`` reads the database on every call (no cache), so the next
        handshake or token re-check with the old token already fails.
        """
        async with self._sessions.begin() as session:
            result = await session.execute(
                update(models.Relay).filter_by(id=relay_id).values(token_revoked_at=self._now())
            )
            if rowcount(result) == 0:
                raise NotFound("relay", relay_id)
        await self._relays_changed()

    async def authenticate_relay(self, token: str) -> RelayRecord | None:
        """The relay holding this token, unless unknown or revoked (never cached)."""
        if not tokens.looks_like(token, tokens.RELAY_TOKEN_PREFIX):
            return None
        return await self._auth_batches.submit(tokens.hash_secret(token))

    async def _authenticate_relays(self, token_hashes: list[str]) -> list[RelayRecord | None]:
        """Concurrent relay handshakes share one query (``Coalescer``)."""
        async with self._sessions() as session:
            result = await session.execute(
                select(*_RELAY_COLUMNS).where(
                    models.Relay.token_hash.in_(set(token_hashes)),
                    models.Relay.token_revoked_at.is_(None),
                )
            )
            found = {values[-1]: _relay_from_columns(values) for values in result.all()}
        return [found.get(token_hash) for token_hash in token_hashes]

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
        found = await self._presence_batches.submit(PresenceUpdate(relay_id, values))
        await self._relays_changed()
        if not found:
            raise NotFound("relay", relay_id)

    async def _write_presence(self, updates: list[PresenceUpdate]) -> list[bool]:
        """Presence of many relays in one transaction, in submission order; True if found."""
        async with self._sessions.begin() as session:
            for group in _same_columns(updates):
                columns = sorted(group[0].values)
                await session.execute(
                    update(_RELAYS)
                    .where(_RELAYS.c.id == bindparam("b_relay_id"))
                    .values({column: bindparam(f"b_{column}") for column in columns}),
                    [_params(u) for u in group],
                )
            ids = {u.relay_id for u in updates}
            known = set(
                await session.scalars(select(models.Relay.id).where(models.Relay.id.in_(ids)))
            )
        return [u.relay_id in known for u in updates]

    async def touch_relay(self, relay_id: str) -> None:
        """Note that the relay was heard from just now."""
        await self._update_relay(relay_id, {"last_seen_at": self._now()})

    async def touch_relays(self, relay_ids: Sequence[str]) -> list[str]:
        """Note that these relays, connected to this server process, were heard from (and are
        connected: a replica that reaped a dead one may have recorded a relay gone just as it
        reconnected here); return those whose token was revoked."""
        if not relay_ids:
            return []
        async with self._sessions.begin() as session:
            await session.execute(
                update(models.Relay)
                .where(models.Relay.id.in_(relay_ids))
                .values(last_seen_at=self._now(), connected=True)
            )
            revoked = await session.scalars(
                select(models.Relay.id).where(
                    models.Relay.id.in_(relay_ids), models.Relay.token_revoked_at.is_not(None)
                )
            )
            found = list(revoked)
        await self._relays_changed()
        return found

    async def share_relay(self, relay_id: str, conversation_id: str) -> None:
        """Make the relay visible in the conversation (idempotent)."""
        async with self._sessions.begin() as session:
            if await session.get(models.Relay, relay_id) is None:
                raise NotFound("relay", relay_id)
            if await session.get(models.Conversation, conversation_id) is None:
                raise NotFound("conversation", conversation_id)
            if await session.get(models.RelayShare, (relay_id, conversation_id)) is None:
                session.add(models.RelayShare(relay_id=relay_id, conversation_id=conversation_id))
        await self._relays_changed(shares=True)

    async def unshare_relay(self, relay_id: str, conversation_id: str) -> bool:
        """Hide the relay from the conversation; False when it was not shared there."""
        async with self._sessions.begin() as session:
            share = await session.get(models.RelayShare, (relay_id, conversation_id))
            if share is not None:
                await session.delete(share)
        await self._relays_changed(shares=True)
        return share is not None

    async def rename_relay(self, relay_id: str, name: str) -> None:
        """Give the relay a new name (its id, token, shares and desktops stay)."""
        if not RELAY_NAME_RE.fullmatch(name):
            raise InvalidValue("name", "1-64 letters, digits, '.', '_' or '-'")
        async with self._unique("relay", name) as session:
            result = await session.execute(
                update(models.Relay).filter_by(id=relay_id).values(name=name)
            )
            if rowcount(result) == 0:
                raise NotFound("relay", relay_id)
        await self._relays_changed(shares=True)

    async def set_relay_co_located(self, relay_id: str, co_located: bool) -> None:
        """Record whether the relay runs on the server's own host."""
        await self._update_relay(relay_id, {"co_located": co_located})

    async def relays_visible_in(self, conversation_id: str) -> list[RelayRecord]:
        """The relays shared with the conversation, by name."""
        hit, cached = self.relay_cache.get(("visible_in", conversation_id))
        if hit:
            return list(cast("tuple[RelayRecord, ...]", cached))
        generation = self.relay_cache.generation
        async with self._sessions() as session:
            rows = await session.scalars(
                select(models.Relay)
                .join(models.RelayShare)
                .where(models.RelayShare.conversation_id == conversation_id)
                .order_by(models.Relay.name)
            )
            records = [relay_record(row) for row in rows]
        self.relay_cache.put(("visible_in", conversation_id), tuple(records), generation)
        return records

    async def is_relay_visible(self, relay_id: str, conversation_id: str) -> bool:
        key = (f"share:{relay_id}", conversation_id)
        hit, cached = self.relay_cache.get(key)
        if hit:
            return bool(cached)
        generation = self.relay_cache.generation
        async with self._sessions() as session:
            found = bool(
                await session.scalar(
                    select(
                        exists().where(
                            models.RelayShare.relay_id == relay_id,
                            models.RelayShare.conversation_id == conversation_id,
                        )
                    )
                )
            )
        self.relay_cache.put(key, found, generation)
        return found

    async def _relays_changed(self, *, shares: bool = False) -> None:
        """A relay write through this store: cached reads of relays (and shares) are stale."""
        if shares:
            await self._caches_changed("relay", "desktop")
        else:
            await self._caches_changed("relay")

    async def _update_relay(self, relay_id: str, values: dict[str, object]) -> None:
        async with self._sessions.begin() as session:
            result = await session.execute(
                update(models.Relay).filter_by(id=relay_id).values(**values)
            )
            if rowcount(result) == 0:
                raise NotFound("relay", relay_id)
        await self._relays_changed()


def _params(update: PresenceUpdate) -> dict[str, object]:
    return {"b_relay_id": update.relay_id, **{f"b_{k}": v for k, v in update.values.items()}}


def _same_columns(updates: list[PresenceUpdate]) -> list[list[PresenceUpdate]]:
    """Consecutive runs of updates that set the same columns (one executemany each).

    Runs keep the submission order, so a connect followed by a disconnect of the same relay
    in one batch still ends ``connected = False``.
    """
    groups: list[list[PresenceUpdate]] = []
    for item in updates:
        if groups and sorted(groups[-1][0].values) == sorted(item.values):
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups
