"""Users, API tokens, web sessions and one-time login links."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from server.db import models
from server.db.base import StoreBase, rowcount, user_record
from server.db.errors import InvalidValue, NotFound
from server.db.records import TokenCaller, TokenRecord, UserRecord, WebSessionRecord
from server.secrets import tokens
from wire.ids import UserId

USERNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
# Recording every use would write on every API call; once a minute is plenty.
LAST_USED_GRANULARITY = timedelta(seconds=60)


def check_username(username: str) -> str:
    if not USERNAME_RE.fullmatch(username):
        raise InvalidValue("username", "1-64 letters, digits, '.', '_', '-' or '@'")
    return username


def check_password(password: str) -> str:
    if not password:
        raise InvalidValue("password", "must not be empty")
    return password


class IdentityStore(StoreBase):
    """Who someone is: accounts and the secrets that prove it (all stored hashed)."""

    async def create_user(
        self, username: str, password: str, *, is_admin: bool = False
    ) -> UserRecord:
        """Create an account; ``AlreadyExists`` when the username is taken."""
        check_username(username)
        password_hash = await self._passwords.hash(check_password(password))
        row = models.User(
            id=tokens.new_id(),
            username=username,
            password_hash=password_hash,
            is_admin=is_admin,
            created_at=self._now(),
        )
        async with self._unique("user", username) as session:
            session.add(row)
        return user_record(row)

    async def get_user(self, user_id: str) -> UserRecord | None:
        async with self._sessions() as session:
            row = await session.get(models.User, user_id)
            return user_record(row) if row else None

    async def get_user_by_name(self, username: str) -> UserRecord | None:
        async with self._sessions() as session:
            row = await session.scalar(select(models.User).filter_by(username=username))
            return user_record(row) if row else None

    async def list_users(self) -> list[UserRecord]:
        async with self._sessions() as session:
            rows = await session.scalars(select(models.User).order_by(models.User.username))
            return [user_record(row) for row in rows]

    async def verify_password(self, username: str, password: str) -> UserRecord | None:
        """The user when the password matches; same argon2 work for unknown users."""
        async with self._sessions() as session:
            row = await session.scalar(select(models.User).filter_by(username=username))
        ok = await self._passwords.verify(row.password_hash if row else None, password)
        # A disabled account gets the same answer as a wrong password, after the same work.
        if not (ok and row) or row.disabled_at is not None:
            return None
        if self._passwords.needs_rehash(row.password_hash):
            await self.set_password(UserId(row.id), password)
        return user_record(row)

    async def set_password(self, user_id: str, password: str) -> None:
        password_hash = await self._passwords.hash(check_password(password))
        async with self._sessions.begin() as session:
            result = await session.execute(
                update(models.User).filter_by(id=user_id).values(password_hash=password_hash)
            )
            if rowcount(result) == 0:
                raise NotFound("user", user_id)

    # -- API tokens -------------------------------------------------------------------

    async def create_api_token(
        self,
        user_id: str,
        name: str = "default",
        *,
        expires_at: datetime | None = None,
        read_only: bool = False,
        conversation_id: str | None = None,
    ) -> tuple[str, TokenRecord]:
        """A new ``rdk_`` token (returned once) and its record; only the hash is stored."""
        token = tokens.new_secret(tokens.API_TOKEN_PREFIX)
        row = models.ApiToken(
            id=tokens.new_id(),
            user_id=user_id,
            name=name,
            token_hash=tokens.hash_secret(token),
            created_at=self._now(),
            expires_at=expires_at,
            read_only=read_only,
            conversation_id=conversation_id,
        )
        async with self._sessions.begin() as session:
            if await session.get(models.User, user_id) is None:
                raise NotFound("user", user_id)
            session.add(row)
        return token, _token_record(row)

    async def disable_user(self, user_id: str) -> bool:
        """Refuse the user's logins, sessions and API tokens; False if already disabled.

        Their web sessions are deleted; everything else they own is kept.
        """
        async with self._sessions.begin() as session:
            changed = await _set_disabled(session, user_id, self._now())
            await session.execute(delete(models.WebSession).filter_by(user_id=user_id))
        await self._users_changed()
        return changed

    async def enable_user(self, user_id: str) -> bool:
        """Let a disabled user in again; False if the user was not disabled."""
        async with self._sessions.begin() as session:
            changed = await _set_disabled(session, user_id, None)
        await self._users_changed()
        return changed

    async def _users_changed(self) -> None:
        """Cached token answers and roles may name a user whose access just changed."""
        await self._caches_changed("token", "role")

    async def list_api_tokens(self, user_id: str | None = None) -> list[TokenRecord]:
        """One user's API tokens (every user's when ``user_id`` is None), oldest first."""
        query = select(models.ApiToken).order_by(models.ApiToken.created_at, models.ApiToken.id)
        if user_id is not None:
            query = query.filter_by(user_id=user_id)
        async with self._sessions() as session:
            return [_token_record(row) for row in await session.scalars(query)]

    async def get_api_token(self, token_id: str) -> TokenRecord | None:
        async with self._sessions() as session:
            row = await session.get(models.ApiToken, token_id)
            return _token_record(row) if row else None

    async def authenticate_api_token(self, token: str) -> UserRecord | None:
        """The token's user when it is known, not revoked and not expired; records its use."""
        caller = await self.api_token_caller(token)
        if caller is None or caller.token.expired(self._now()):
            return None
        return caller.user

    async def api_token_caller(self, token: str) -> TokenCaller | None:
        """The token's user and record when it is known and not revoked (expired or not: the
        caller says which); records its use."""
        if not tokens.looks_like(token, tokens.API_TOKEN_PREFIX):
            return None
        token_hash = tokens.hash_secret(token)
        hit, caller = self.token_cache.get(token_hash)
        if hit:
            return caller
        generation = self.token_cache.generation
        caller = await self._api_token_caller(token_hash)
        if caller is not None:
            self.token_cache.put(token_hash, caller, generation)
        return caller

    async def _api_token_caller(self, token_hash: str) -> TokenCaller | None:
        now = self._now()
        async with self._sessions.begin() as session:
            found = (
                await session.execute(
                    select(models.ApiToken, models.User)
                    .join(models.User)
                    .where(
                        models.ApiToken.token_hash == token_hash,
                        models.ApiToken.revoked_at.is_(None),
                        models.User.disabled_at.is_(None),
                    )
                )
            ).first()
            if found is None:
                return None
            row, user = found
            if row.last_used_at is None or now - row.last_used_at >= LAST_USED_GRANULARITY:
                row.last_used_at = now
            return TokenCaller(user_record(user), _token_record(row))

    async def revoke_api_token(self, token_id: str) -> bool:
        """Revoke a token by id; False when there was no such live token."""
        async with self._sessions.begin() as session:
            result = await session.execute(
                update(models.ApiToken)
                .filter_by(id=token_id, revoked_at=None)
                .values(revoked_at=self._now())
            )
        await self._caches_changed("token")
        return rowcount(result) > 0

    # -- web sessions -----------------------------------------------------------------

    async def create_web_session(self, user_id: str, ttl_s: int) -> tuple[str, str]:
        """A new browser session: (session secret for the cookie, CSRF token)."""
        secret = tokens.new_secret(tokens.SESSION_PREFIX)
        now = self._now()
        row = models.WebSession(
            id=tokens.new_id(),
            user_id=user_id,
            secret_hash=tokens.hash_secret(secret),
            created_at=now,
            expires_at=now + timedelta(seconds=ttl_s),
        )
        async with self._sessions.begin() as session:
            session.add(row)
        return secret, tokens.csrf_token_for(secret)

    async def get_web_session(self, secret: str) -> WebSessionRecord | None:
        """The live session for a cookie secret; None when unknown, expired or disabled."""
        if not tokens.looks_like(secret, tokens.SESSION_PREFIX):
            return None
        async with self._sessions() as session:
            row = await session.scalar(
                select(models.WebSession)
                .join(models.User)
                .where(
                    models.WebSession.secret_hash == tokens.hash_secret(secret),
                    models.User.disabled_at.is_(None),
                )
            )
        if row is None or row.expires_at <= self._now():
            return None
        return WebSessionRecord(
            session_id=row.id,
            user_id=UserId(row.user_id),
            csrf_token=tokens.csrf_token_for(secret),
            created_at=row.created_at,
            expires_at=row.expires_at,
        )

    async def delete_web_session(self, secret: str) -> None:
        async with self._sessions.begin() as session:
            await session.execute(
                delete(models.WebSession).filter_by(secret_hash=tokens.hash_secret(secret))
            )

    async def purge_expired_sessions(self) -> int:
        """Delete expired web sessions and expired or used login links; returns the count."""
        now = self._now()
        async with self._sessions.begin() as session:
            sessions = await session.execute(
                delete(models.WebSession).where(models.WebSession.expires_at <= now)
            )
            links = await session.execute(
                delete(models.LoginLink).where(
                    (models.LoginLink.expires_at <= now) | models.LoginLink.used_at.is_not(None)
                )
            )
        return rowcount(sessions) + rowcount(links)

    # -- login links ------------------------------------------------------------------

    async def create_login_link(self, user_id: str, ttl_s: int) -> str:
        """A one-time ``rdl_`` login token valid for ``ttl_s`` seconds."""
        token = tokens.new_secret(tokens.LOGIN_LINK_PREFIX)
        now = self._now()
        row = models.LoginLink(
            id=tokens.new_id(),
            user_id=user_id,
            token_hash=tokens.hash_secret(token),
            created_at=now,
            expires_at=now + timedelta(seconds=ttl_s),
        )
        async with self._sessions.begin() as session:
            if await session.get(models.User, user_id) is None:
                raise NotFound("user", user_id)
            session.add(row)
        return token

    async def consume_login_link(self, token: str) -> UserRecord | None:
        """The link's user, once: a used, unknown or expired link gives None."""
        if not tokens.looks_like(token, tokens.LOGIN_LINK_PREFIX):
            return None
        now = self._now()
        token_hash = tokens.hash_secret(token)
        async with self._sessions.begin() as session:
            # One conditional UPDATE, so two racing requests cannot both consume it.
            result = await session.execute(
                update(models.LoginLink)
                .where(
                    models.LoginLink.token_hash == token_hash,
                    models.LoginLink.used_at.is_(None),
                    models.LoginLink.expires_at > now,
                )
                .values(used_at=now)
            )
            if rowcount(result) != 1:
                return None
            user_id = await session.scalar(
                select(models.LoginLink.user_id).filter_by(token_hash=token_hash)
            )
            user = await session.get(models.User, user_id)
            return user_record(user) if user and user.disabled_at is None else None


async def _set_disabled(session: AsyncSession, user_id: str, when: datetime | None) -> bool:
    """Set ``users.disabled_at`` unless already in that state; ``NotFound`` for no user."""
    user = await session.get(models.User, user_id)
    if user is None:
        raise NotFound("user", user_id)
    changed = (user.disabled_at is None) != (when is None)
    if changed:
        user.disabled_at = when
    return changed


def _token_record(row: models.ApiToken) -> TokenRecord:
    return TokenRecord(
        token_id=row.id,
        user_id=UserId(row.user_id),
        name=row.name,
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
        expires_at=row.expires_at,
        read_only=bool(row.read_only),
        conversation_id=row.conversation_id,
    )
