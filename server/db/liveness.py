"""Which credentials held by open streams are still good, read in batches and never cached.

An open stream (an event stream, a Cua or viewer WebSocket) is re-checked every second by
``server.auth.revocation``; these reads answer for all of a process's streams at once, one
query per kind of credential, straight from the database, so a revocation made anywhere (the
admin CLI, another replica) is seen by the next check whatever the read caches hold.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import Final

from sqlalchemy import or_, select

from server.db import models
from server.db.base import StoreBase

# Values per ``IN (…)``: well under SQLite's and PostgreSQL's parameter limits.
BATCH: Final = 500


def _batches(values: Collection[str]) -> Iterator[Sequence[str]]:
    ordered = sorted(values)
    for start in range(0, len(ordered), BATCH):
        yield ordered[start : start + BATCH]


class LivenessStore(StoreBase):
    """Batched, uncached answers to "is this credential still good?"."""

    async def live_api_tokens(self, token_hashes: Collection[str]) -> set[str]:
        """The hashes of tokens that are neither revoked, expired nor held by a disabled user."""
        live: set[str] = set()
        now = self._now()
        async with self._sessions() as session:
            for batch in _batches(token_hashes):
                rows = await session.scalars(
                    select(models.ApiToken.token_hash)
                    .join(models.User)
                    .where(
                        models.ApiToken.token_hash.in_(batch),
                        models.ApiToken.revoked_at.is_(None),
                        or_(models.ApiToken.expires_at.is_(None), models.ApiToken.expires_at > now),
                        models.User.disabled_at.is_(None),
                    )
                )
                live.update(rows)
        return live

    async def live_web_sessions(self, secret_hashes: Collection[str]) -> set[str]:
        """The hashes of web sessions that still exist, have not expired, and whose user is
        enabled (logging out or disabling the user deletes the row)."""
        live: set[str] = set()
        now = self._now()
        async with self._sessions() as session:
            for batch in _batches(secret_hashes):
                rows = await session.scalars(
                    select(models.WebSession.secret_hash)
                    .join(models.User)
                    .where(
                        models.WebSession.secret_hash.in_(batch),
                        models.WebSession.expires_at > now,
                        models.User.disabled_at.is_(None),
                    )
                )
                live.update(rows)
        return live

    async def enabled_users(self, user_ids: Collection[str]) -> set[str]:
        """The ids of users that exist and are not disabled."""
        live: set[str] = set()
        async with self._sessions() as session:
            for batch in _batches(user_ids):
                rows = await session.scalars(
                    select(models.User.id).where(
                        models.User.id.in_(batch), models.User.disabled_at.is_(None)
                    )
                )
                live.update(rows)
        return live

    async def live_secret_hashes(self, user_id: str) -> tuple[set[str], set[str]]:
        """The hashes of ``user_id``'s live API tokens and live web sessions (a viewer
        capability names its minting credential by a hash of one of these)."""
        now = self._now()
        async with self._sessions() as session:
            tokens = await session.scalars(
                select(models.ApiToken.token_hash)
                .join(models.User)
                .where(
                    models.ApiToken.user_id == user_id,
                    models.ApiToken.revoked_at.is_(None),
                    models.User.disabled_at.is_(None),
                )
            )
            token_hashes = set(tokens)
            sessions = await session.scalars(
                select(models.WebSession.secret_hash)
                .join(models.User)
                .where(
                    models.WebSession.user_id == user_id,
                    models.WebSession.expires_at > now,
                    models.User.disabled_at.is_(None),
                )
            )
            return token_hashes, set(sessions)
