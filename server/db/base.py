"""What every part of the ``Store`` shares: the session factory, the clock, conversions."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import CursorResult, Result
from sqlalchemy.exc import DisconnectionError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from server.db import models
from server.db.cache import ReadCache
from server.db.errors import AlreadyExists, StoreError, StoreUnavailable
from server.db.invalidation import CacheName, Invalidations, LocalInvalidations
from server.db.records import RelayRecord, TokenCaller, UserRecord
from server.secrets.passwords import Passwords
from wire.ids import RelayId, UserId

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def unreachable(err: BaseException) -> bool:
    """Whether ``err`` (or what caused it) says the database could not be reached or went
    away — a refused or broken connection, a server shutting down — rather than that a
    statement was wrong."""
    try:
        from asyncpg.exceptions import OperatorInterventionError, PostgresConnectionError
    except ImportError:  # SQLite only
        driver: tuple[type[BaseException], ...] = ()
    else:
        driver = (PostgresConnectionError, OperatorInterventionError)
    seen: BaseException | None = err
    for _ in range(8):  # a cause chain is short; never loop on a cycle
        if seen is None:
            return False
        gone = (ConnectionError, TimeoutError, DisconnectionError, OperationalError, InterfaceError)
        if isinstance(seen, (*gone, *driver)):
            return True
        if getattr(seen, "connection_invalidated", False):
            return True
        seen = getattr(seen, "orig", None) or seen.__cause__ or seen.__context__
    return False


@asynccontextmanager
async def _reachable(
    context: AbstractAsyncContextManager[AsyncSession],
) -> AsyncIterator[AsyncSession]:
    try:
        async with context as session:
            yield session
    except StoreError:
        raise
    except Exception as err:
        if unreachable(err):
            raise StoreUnavailable() from err
        raise


class Sessions:
    """The store's sessions: ``async with sessions()`` or ``sessions.begin()``. A database
    that cannot be reached fails the block with ``StoreUnavailable`` (``unavailable``, 503),
    so no driver error leaves ``server.db``."""

    def __init__(self, maker: async_sessionmaker[AsyncSession]) -> None:
        self._maker = maker

    def __call__(self) -> AbstractAsyncContextManager[AsyncSession]:
        return _reachable(self._maker())

    def begin(self) -> AbstractAsyncContextManager[AsyncSession]:
        return _reachable(self._maker.begin())


class StoreBase:
    """State shared by the store's parts (identity, conversations, relays, audit)."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        passwords: Passwords,
        clock: Clock = utc_now,
    ) -> None:
        self._sessions = Sessions(sessions)
        self._passwords = passwords
        self._clock = clock
        # Hot reads of every API call, kept briefly (bound and invalidation: ``cache.py``).
        self.token_cache: ReadCache[str, TokenCaller | None] = ReadCache()
        self.role_cache: ReadCache[tuple[str, str], Any] = ReadCache()
        self.relay_cache: ReadCache[tuple[str, str], Any] = ReadCache()
        self.desktop_cache: ReadCache[tuple[str, tuple[str, ...]], Any] = ReadCache()
        # Who else must drop these caches after a write (other replicas: ``invalidation.py``).
        self.invalidations: Invalidations = LocalInvalidations()
        # Told the names of caches cleared here (open streams re-check their credentials).
        self.cache_listeners: list[Callable[[frozenset[str]], None]] = []

    def clear_caches(self, names: Iterable[str]) -> None:
        """Forget the named caches (a write here, or one announced by another process)."""
        caches: dict[str, ReadCache[Any, Any]] = {
            "token": self.token_cache,
            "role": self.role_cache,
            "relay": self.relay_cache,
            "desktop": self.desktop_cache,
        }
        cleared = frozenset(names)
        for name in cleared:
            caches[name].clear()
        for listener in self.cache_listeners:
            listener(cleared)

    async def _caches_changed(self, *names: CacheName) -> None:
        """A write through this store: clear these caches here, then everywhere else."""
        self.clear_caches(names)
        await self.invalidations.announce(names)

    def _now(self) -> datetime:
        return self._clock()

    def now(self) -> datetime:
        """The store's clock (the time expiries are judged by)."""
        return self._clock()

    @asynccontextmanager
    async def _unique(self, entity: str, name: str) -> AsyncIterator[AsyncSession]:
        """A transaction whose unique-constraint violation becomes ``AlreadyExists``."""
        try:
            async with self._sessions.begin() as session:
                yield session
        except IntegrityError as err:
            raise AlreadyExists(entity, name) from err


def user_record(row: models.User) -> UserRecord:
    return UserRecord(
        user_id=UserId(row.id),
        username=row.username,
        is_admin=row.is_admin,
        created_at=row.created_at,
        disabled_at=row.disabled_at,
    )


def relay_record(row: models.Relay) -> RelayRecord:
    return RelayRecord(
        relay_id=RelayId(row.id),
        name=row.name,
        owner_id=UserId(row.owner_id),
        connected=row.connected,
        last_seen_at=row.last_seen_at,
        protocol_version=row.protocol_version,
        relay_version=row.relay_version,
        capabilities=tuple(row.capabilities or ()),
        created_at=row.created_at,
        revoked=row.token_revoked_at is not None,
        co_located=row.co_located,
    )


def rowcount(result: Result[Any]) -> int:
    """Rows matched by an UPDATE or DELETE."""
    return int(cast("CursorResult[Any]", result).rowcount)
