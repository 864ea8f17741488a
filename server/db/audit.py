"""The audit trail: one row per audited operation, never a secret in it."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

from sqlalchemy import delete, insert, select

from server.db import models
from server.db.base import StoreBase
from server.db.records import AuditRecord
from wire.ids import ConversationId, DesktopSessionId, RelayId

log = logging.getLogger(__name__)

REDACTED = "[redacted]"
# Rows queued by ``queue_audit`` beyond this make the next caller wait for the writer.
AUDIT_QUEUE_LIMIT: Final = 10_000
# Keys whose values are never written to the audit trail, whatever a caller passes.
_SECRET_KEY_PARTS = ("token", "password", "secret", "cookie", "authorization", "csrf")
MAX_AUDIT_PAGE = 10_000
# The background writer waits this long before committing, so rows of back-to-back actions
# share one transaction (one commit per action cost ~0.3 ms of the event loop's time).
AUDIT_LINGER_S: Final = 0.05


def redact(details: dict[str, Any] | None) -> dict[str, Any] | None:
    """A copy of ``details`` with secret-looking keys blanked, recursively."""
    if details is None:
        return None
    return {key: _redact_value(key, value) for key, value in details.items()}


def _redact_value(key: str, value: Any) -> Any:
    if any(part in key.lower() for part in _SECRET_KEY_PARTS):
        return REDACTED
    if isinstance(value, dict):
        return redact(value)
    return value


@dataclass(frozen=True)
class AuditRow:
    """One audit row as its writer builds it (the store adds the time and redacts ``details``)."""

    op: str
    actor: str
    outcome: str
    conversation_id: str | None = None
    relay_id: str | None = None
    desktop_session_id: str | None = None
    reason: str | None = None
    source: str | None = None
    request_id: str | None = None
    details: dict[str, Any] | None = None


class AuditWriter(Protocol):
    """What code that audits needs of the store (``Store`` satisfies it)."""

    async def write_audit(self, row: AuditRow) -> Any: ...


class AuditStore(StoreBase):
    """Append-only audit rows; see ``docs/data-model.md``.

    ``write_audit`` commits before it returns. ``queue_audit`` (the hot paths: actions, the
    screen tool) hands the row to a background writer that commits queued rows in batches, in
    the order they were queued, ``AUDIT_LINGER_S`` after the first row of a batch;
    ``list_audit`` and ``close`` flush it first, so a reader of this store never misses a queued
    row and a clean shutdown loses none.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._audit_queue: list[dict[str, Any]] = []
        self._audit_writer: asyncio.Task[None] | None = None

    async def queue_audit(self, row: AuditRow) -> None:
        """Queue one audit row for the background writer (waits only when it falls behind)."""
        if len(self._audit_queue) >= AUDIT_QUEUE_LIMIT:
            await self.flush_audit()
        self._audit_queue.append(_columns(row, self._now()))
        if self._audit_writer is None:
            self._audit_writer = asyncio.create_task(self._write_queued(), name="audit-writer")

    async def flush_audit(self) -> None:
        """Wait until every queued audit row is committed."""
        while self._audit_writer is not None:
            await asyncio.wait({self._audit_writer})

    async def _write_queued(self) -> None:
        try:
            await asyncio.sleep(AUDIT_LINGER_S)
            while self._audit_queue:
                batch, self._audit_queue = self._audit_queue, []
                try:
                    async with self._sessions.begin() as session:
                        await session.execute(insert(models.AuditEvent), batch)
                except Exception:
                    log.exception("could not write %d audit rows", len(batch))
        finally:
            self._audit_writer = None

    async def write_audit(self, row: AuditRow) -> AuditRecord:
        """Append one audit row; secret-looking keys in ``details`` are redacted."""
        event = models.AuditEvent(**_columns(row, self._now()))
        async with self._sessions.begin() as session:
            session.add(event)
        return _audit_record(event)

    async def list_audit(
        self, *, since: datetime | None = None, relay_id: str | None = None, limit: int = 1000
    ) -> list[AuditRecord]:
        """The newest ``limit`` rows (at or after ``since``), oldest first."""
        await self.flush_audit()
        query = select(models.AuditEvent)
        if since is not None:
            query = query.where(models.AuditEvent.at >= since)
        if relay_id is not None:
            query = query.where(models.AuditEvent.relay_id == relay_id)
        query = query.order_by(models.AuditEvent.id.desc()).limit(
            max(1, min(limit, MAX_AUDIT_PAGE))
        )
        async with self._sessions() as session:
            rows = list(await session.scalars(query))
        return [_audit_record(row) for row in reversed(rows)]

    async def session_audit(
        self, relay_id: str, desktop_session_id: str, since: datetime, until: datetime
    ) -> list[AuditRecord]:
        """One desktop session's rows written in ``[since, until]``, oldest first (a
        recording's timeline, docs/recording.md)."""
        await self.flush_audit()
        event = models.AuditEvent
        query = (
            select(event)
            .where(event.relay_id == relay_id, event.desktop_session_id == desktop_session_id)
            .where(event.at >= since, event.at <= until)
            .order_by(event.id)
            .limit(MAX_AUDIT_PAGE)
        )
        async with self._sessions() as session:
            rows = list(await session.scalars(query))
        return [_audit_record(row) for row in rows]

    async def prune_audit(self, older_than: datetime) -> int:
        """Delete audit rows written before ``older_than``; return how many went."""
        await self.flush_audit()
        async with self._sessions.begin() as session:
            result = await session.execute(
                delete(models.AuditEvent).where(models.AuditEvent.at < older_than)
            )
        return int(getattr(result, "rowcount", 0) or 0)


def _columns(row: AuditRow, at: datetime) -> dict[str, Any]:
    """The row's columns as stored: with its time, ``details`` redacted."""
    return {**vars(row), "at": at, "details": redact(row.details)}


def _audit_record(row: models.AuditEvent) -> AuditRecord:
    return AuditRecord(
        audit_id=row.id,
        at=row.at,
        op=row.op,
        actor=row.actor,
        outcome=row.outcome,
        conversation_id=ConversationId(row.conversation_id) if row.conversation_id else None,
        relay_id=RelayId(row.relay_id) if row.relay_id else None,
        desktop_session_id=(
            DesktopSessionId(row.desktop_session_id) if row.desktop_session_id else None
        ),
        reason=row.reason,
        source=row.source,
        request_id=row.request_id,
        details=row.details,
    )
