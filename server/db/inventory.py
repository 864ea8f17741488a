"""The desktop inventory's rows: one per ``(relay_id, desktop_session_id)``, history kept."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, cast

from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from server.db import models
from server.db.base import StoreBase, rowcount
from server.db.batch import Coalescer
from server.db.rows import LIVE_STATES, DesktopRow
from wire.ops import DesktopState

TERMINAL_STATES: frozenset[str] = frozenset({"stopped", "failed"})

# Select's type parameters differ between SQLAlchemy 2.0 and 2.1.
RowQuery = Any


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


_COLUMNS = (
    models.Desktop.relay_id,
    models.Desktop.desktop_session_id,
    models.Desktop.kind,
    models.Desktop.slot,
    models.Desktop.state,
    models.Desktop.started_at,
    models.Desktop.started_by,
    models.Desktop.updated_at,
    models.Desktop.reason,
    models.Desktop.geometry,
    models.Desktop.display,
    models.Relay.name,
)


def desktop_row(values: Sequence[Any]) -> DesktopRow:
    """A row from the column tuple of ``_with_names`` (plain columns: no ORM objects to build)."""
    relay_id, session_id, kind, slot, state, started_at, started_by, updated_at = values[:8]
    reason, geometry, display, relay_name = values[8:]
    return DesktopRow(
        relay_id=relay_id,
        desktop_session_id=session_id,
        kind=kind,
        slot=slot,
        state=state,
        started_at=_iso(started_at),
        started_by=started_by,
        updated_at=_iso(updated_at) or "",
        reason=reason,
        geometry=geometry,
        display=display,
        relay_name=relay_name,
    )


def _with_names() -> RowQuery:
    return select(*_COLUMNS).join(models.Relay, models.Relay.id == models.Desktop.relay_id)


def _ordered(query: RowQuery) -> RowQuery:
    return query.order_by(models.Relay.name, models.Desktop.kind, models.Desktop.slot)


_DESKTOPS = models.Desktop.__table__
_KEY = ("relay_id", "desktop_session_id")
_INSERTS: dict[str, Any] = {"sqlite": sqlite.insert, "postgresql": postgresql.insert}
LiveQuery = tuple[str, tuple[str, ...]]


class InventoryStore(StoreBase):
    """Persistence of :class:`DesktopRow`; the inventory's rules live in ``server.inventory``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._live_batches: Coalescer[LiveQuery, list[DesktopRow]] = Coalescer(
            self._desktops_for_relays
        )

    async def upsert_desktops(self, rows: Iterable[DesktopRow]) -> None:
        """Insert or replace rows, all in one transaction (one statement per batch)."""
        values = [self._values(row) for row in rows]
        if not values:
            return
        async with self._sessions.begin() as session:
            await session.execute(_upsert(session), values)
        # Here and on every other replica: their cached lists and live rows are old now.
        await self._caches_changed("desktop")

    def _values(self, row: DesktopRow) -> dict[str, Any]:
        return {
            "relay_id": row.relay_id,
            "desktop_session_id": row.desktop_session_id,
            "kind": row.kind,
            "slot": row.slot,
            "state": row.state,
            "started_at": _parse(row.started_at),
            "started_by": row.started_by,
            "updated_at": _parse(row.updated_at) or self._now(),
            "reason": row.reason,
            "geometry": row.geometry,
            "display": row.display,
        }

    async def desktop(self, relay_id: str, desktop_session_id: str) -> DesktopRow | None:
        query = _with_names().where(
            models.Desktop.relay_id == relay_id,
            models.Desktop.desktop_session_id == desktop_session_id,
        )
        return await self._first(query)

    async def desktops_for_relay(
        self, relay_id: str, states: Sequence[str] | None = None
    ) -> list[DesktopRow]:
        """The relay's rows (only those in ``states`` when given)."""
        if states is not None:
            # Concurrent reads of live rows (a burst of hellos) share one query.
            return await self._live_batches.submit((relay_id, tuple(sorted(states))))
        query = _with_names().where(models.Desktop.relay_id == relay_id)
        return await self._all(_ordered(query))

    async def cached_desktops_for_relay(
        self, relay_id: str, states: Sequence[str]
    ) -> list[DesktopRow]:
        """:meth:`desktops_for_relay` in ``states``, briefly cached like the visible lists
        (dropped by every write of rows, on every replica)."""
        key = (f"relay:{relay_id}", tuple(sorted(states)))
        hit, cached = self.desktop_cache.get(key)
        if hit:
            return list(cast("tuple[DesktopRow, ...]", cached))
        generation = self.desktop_cache.generation
        rows = await self.desktops_for_relay(relay_id, states)
        self.desktop_cache.put(key, tuple(rows), generation)
        return rows

    async def _desktops_for_relays(self, queries: list[LiveQuery]) -> list[list[DesktopRow]]:
        states = {state for _, wanted in queries for state in wanted}
        query = _with_names().where(
            models.Desktop.relay_id.in_({relay_id for relay_id, _ in queries}),
            models.Desktop.state.in_(states),
        )
        by_relay: dict[str, list[DesktopRow]] = {}
        for row in await self._all(_ordered(query)):
            by_relay.setdefault(row.relay_id, []).append(row)
        return [
            [row for row in by_relay.get(relay_id, ()) if row.state in wanted]
            for relay_id, wanted in queries
        ]

    async def visible_desktops(
        self, conversation_id: str, states: Sequence[str] = tuple(LIVE_STATES)
    ) -> list[DesktopRow]:
        """Rows in ``states`` of the relays shared with the conversation (briefly cached)."""
        key = (conversation_id, tuple(sorted(states)))
        hit, cached = self.desktop_cache.get(key)
        if hit:
            return list(cast("tuple[DesktopRow, ...]", cached))
        generation = self.desktop_cache.generation
        query = (
            _with_names()
            .join(models.RelayShare, models.RelayShare.relay_id == models.Desktop.relay_id)
            .where(
                models.RelayShare.conversation_id == conversation_id,
                models.Desktop.state.in_(states),
            )
        )
        rows = await self._all(_ordered(query))
        self.desktop_cache.put(key, tuple(rows), generation)
        return rows

    async def conversations_sharing(self, relay_id: str) -> list[str]:
        """Ids of the conversations the relay is shared with."""
        async with self._sessions() as session:
            ids = await session.scalars(
                select(models.RelayShare.conversation_id).where(
                    models.RelayShare.relay_id == relay_id
                )
            )
            return list(ids)

    async def mark_relay_unknown(self, relay_id: str) -> list[DesktopRow]:
        """Turn the relay's live rows ``unknown``; returns the rows that changed."""
        states = ("starting", "running", "paused", "stopping")
        live = await self.desktops_for_relay(relay_id, states)
        now = self._now().isoformat()
        changed = [_replace_state(row, "unknown", "relay_disconnected", now) for row in live]
        await self.upsert_desktops(changed)
        return changed

    async def desktop_counts(self) -> dict[str, int]:
        """How many rows each state has (stopped and failed: the history not yet pruned)."""
        query = select(models.Desktop.state, func.count()).group_by(models.Desktop.state)
        async with self._sessions() as session:
            result = await session.execute(query)
            return {str(state): int(count) for state, count in result.all()}

    async def prune_history(self, older_than: datetime) -> int:
        """Delete stopped and failed rows last updated before ``older_than``."""
        async with self._sessions.begin() as session:
            result = await session.execute(
                delete(models.Desktop).where(
                    models.Desktop.state.in_(TERMINAL_STATES),
                    models.Desktop.updated_at < older_than,
                )
            )
        self.desktop_cache.clear()
        return rowcount(result)

    async def _first(self, query: RowQuery) -> DesktopRow | None:
        rows = await self._all(query.limit(1))
        return rows[0] if rows else None

    async def _all(self, query: RowQuery) -> list[DesktopRow]:
        async with self._sessions() as session:
            result = await session.execute(query)
            return [desktop_row(values) for values in result.all()]


def _upsert(session: AsyncSession) -> Any:
    """``INSERT … ON CONFLICT (relay_id, desktop_session_id) DO UPDATE`` for this dialect."""
    statement = _INSERTS[session.get_bind().dialect.name](_DESKTOPS)
    updated = {c.name: statement.excluded[c.name] for c in _DESKTOPS.c if c.name not in _KEY}
    return statement.on_conflict_do_update(index_elements=list(_KEY), set_=updated)


def _replace_state(
    row: DesktopRow, state: DesktopState, reason: str, updated_at: str
) -> DesktopRow:
    return replace(row, state=state, reason=reason, updated_at=updated_at)
