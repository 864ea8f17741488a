"""Desktop snapshots' metadata, owned by a conversation (docs/desktops.md, "Snapshots and
forks"): a conversation sees and names its own snapshots only."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select

from server.db import models
from server.db.base import StoreBase
from server.db.records import SnapshotRecord
from wire.ids import ConversationId, RelayId


class SnapshotStore(StoreBase):
    """Snapshots by (conversation, name)."""

    async def add_snapshot(
        self,
        *,
        snapshot_id: str,
        conversation_id: str,
        name: str,
        relay_id: str,
        meta: dict[str, Any],
        created_by: str,
    ) -> SnapshotRecord:
        """Record a snapshot; ``AlreadyExists`` when the conversation has one of that name."""
        row = models.DesktopSnapshot(
            id=snapshot_id,
            conversation_id=conversation_id,
            name=name,
            relay_id=relay_id,
            profile=meta.get("profile"),
            geometry=str(meta["geometry"]),
            depth=int(meta["depth"]),
            apps=list(meta.get("apps", [])),
            windows=list(meta.get("windows", [])),
            size_bytes=int(meta.get("size_bytes", 0)),
            created_by=created_by,
            created_at=self._now(),
        )
        async with self._unique("snapshot", name) as session:
            session.add(row)
        return _record(row)

    async def snapshot_named(self, conversation_id: str, name: str) -> SnapshotRecord | None:
        async with self._sessions() as session:
            row = await session.scalar(
                select(models.DesktopSnapshot).filter_by(conversation_id=conversation_id, name=name)
            )
            return _record(row) if row is not None else None

    async def snapshots_of(self, conversation_id: str) -> list[SnapshotRecord]:
        async with self._sessions() as session:
            rows = await session.scalars(
                select(models.DesktopSnapshot)
                .filter_by(conversation_id=conversation_id)
                .order_by(models.DesktopSnapshot.created_at, models.DesktopSnapshot.name)
            )
            return [_record(row) for row in rows]

    async def delete_snapshot(self, conversation_id: str, name: str) -> bool:
        async with self._sessions.begin() as session:
            result = await session.execute(
                delete(models.DesktopSnapshot).filter_by(conversation_id=conversation_id, name=name)
            )
            return bool(getattr(result, "rowcount", 0))


def _record(row: models.DesktopSnapshot) -> SnapshotRecord:
    return SnapshotRecord(
        snapshot_id=row.id,
        conversation_id=ConversationId(row.conversation_id),
        name=row.name,
        relay_id=RelayId(row.relay_id),
        profile=row.profile,
        geometry=row.geometry,
        depth=row.depth,
        apps=tuple(row.apps),
        windows=tuple(row.windows),
        size_bytes=row.size_bytes,
        created_by=row.created_by,
        created_at=row.created_at,
    )
