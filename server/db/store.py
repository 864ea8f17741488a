"""``Store``: the one persistence seam, on SQLite or PostgreSQL chosen by URL.

Its methods live with their concept (``identity``, ``conversations``, ``relays``,
``audit``); every one is async and returns frozen records from ``records``, never ORM
objects. Schema changes go through Alembic (``server.db.migrate.upgrade``), not here.
"""

from __future__ import annotations

from argon2 import PasswordHasher
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from server.db.audit import AuditStore
from server.db.base import Clock, utc_now
from server.db.conversations import ConversationStore
from server.db.engine import create_engine
from server.db.errors import SchemaMismatch, StoreError, StoreUnavailable
from server.db.identity import IdentityStore
from server.db.inventory import InventoryStore
from server.db.liveness import LivenessStore
from server.db.migrate import head_revision, revision_of
from server.db.relays import RelayStore
from server.db.snapshots import SnapshotStore
from server.secrets.passwords import Passwords


class Store(
    IdentityStore,
    ConversationStore,
    RelayStore,
    AuditStore,
    InventoryStore,
    LivenessStore,
    SnapshotStore,
):
    """Users, tokens, sessions, conversations, relays, audit and messages."""

    def __init__(self, engine: AsyncEngine, passwords: Passwords, clock: Clock = utc_now) -> None:
        super().__init__(async_sessionmaker(engine, expire_on_commit=False), passwords, clock)
        self._engine = engine

    @classmethod
    async def open(
        cls,
        database_url: str,
        *,
        password_hasher: PasswordHasher | None = None,
        clock: Clock = utc_now,
        check_schema: bool = True,
    ) -> Store:
        """Connect to an already migrated SQLite or PostgreSQL database.

        Raises ``StoreUnavailable`` when it does not answer and ``SchemaMismatch`` when it
        is not at the newest migration (unless ``check_schema`` is False).
        """
        store = cls(create_engine(database_url), Passwords(password_hasher), clock)
        try:
            if not await store.ping():
                raise StoreUnavailable()
            if check_schema:
                await store._check_schema()
        except StoreError:
            await store.close()
            raise
        return store

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._engine.dialect.name

    async def close(self) -> None:
        """Finish queued writes (audit rows), then release the connections."""
        await self.flush_audit()
        await self._engine.dispose()

    async def _check_schema(self) -> None:
        async with self._engine.connect() as conn:
            current = await conn.run_sync(revision_of)
        expected = head_revision()
        if current != expected:
            raise SchemaMismatch(current, expected)

    async def ping(self) -> bool:
        """True when the database answers a trivial query."""
        try:
            async with self._engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except (SQLAlchemyError, OSError):
            return False
        return True
