"""SQLAlchemy models: the schema of record for ``migrations/versions``.

Secrets are never stored: API tokens, relay tokens, session secrets and login-link
tokens are kept as SHA-256 hex digests, passwords as argon2 hashes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID_LEN = 32  # uuid4().hex
HASH_LEN = 64  # sha256 hex digest
NAME_LEN = 64


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC in Python.

    SQLite keeps no offset, so values are stored as naive UTC there and made aware again
    on the way out; PostgreSQL stores ``timestamp with time zone``.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# SQLite only auto-increments an INTEGER PRIMARY KEY.
AutoIncrementId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UtcDateTime(), dict[str, Any]: JSON()}


class User(Base):
    __tablename__ = "users"

    id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    username: Mapped[str] = mapped_column(String(NAME_LEN), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    is_admin: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime]
    # Set while the account is disabled: no login, no session, no API token works.
    disabled_at: Mapped[datetime | None]


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    token_hash: Mapped[str] = mapped_column(String(HASH_LEN), unique=True)
    created_at: Mapped[datetime]
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    # Scopes (docs/security.md, API tokens): refused from this time on (401 token_expired);
    # only what role read allows; only this conversation (no foreign key, see migration 0003).
    expires_at: Mapped[datetime | None]
    read_only: Mapped[bool] = mapped_column(Boolean, server_default=false(), default=False)
    conversation_id: Mapped[str | None] = mapped_column(String(ID_LEN))


class WebSession(Base):
    """A browser session; its CSRF token is derived from the secret, so none is stored."""

    __tablename__ = "web_sessions"

    id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    secret_hash: Mapped[str] = mapped_column(String(HASH_LEN), unique=True)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime] = mapped_column(index=True)


class LoginLink(Base):
    __tablename__ = "login_links"

    id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(HASH_LEN), unique=True)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]


class Conversation(Base):
    __tablename__ = "conversations"

    id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    title: Mapped[str] = mapped_column(String(200), index=True)
    created_at: Mapped[datetime]


class ConversationMember(Base):
    __tablename__ = "conversation_members"

    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    role: Mapped[str] = mapped_column(String(16))


class Relay(Base):
    __tablename__ = "relays"

    id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN), unique=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    token_hash: Mapped[str] = mapped_column(String(HASH_LEN), unique=True)
    token_revoked_at: Mapped[datetime | None]
    connected: Mapped[bool] = mapped_column(Boolean)
    last_seen_at: Mapped[datetime | None]
    protocol_version: Mapped[int | None] = mapped_column(Integer)
    relay_version: Mapped[str | None] = mapped_column(String(NAME_LEN))
    capabilities: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime]
    # Set by the operator for a relay on the server's own host (``admin set-relay``).
    co_located: Mapped[bool] = mapped_column(Boolean, server_default=false())


class RelayShare(Base):
    __tablename__ = "relay_shares"

    relay_id: Mapped[str] = mapped_column(
        ForeignKey("relays.id", ondelete="CASCADE"), primary_key=True
    )
    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class AuditEvent(Base):
    """One audited operation; ids and outcomes only, never secrets or host paths."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(AutoIncrementId, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(index=True)
    op: Mapped[str] = mapped_column(String(NAME_LEN))
    actor: Mapped[str] = mapped_column(String(200))
    conversation_id: Mapped[str | None] = mapped_column(String(ID_LEN))
    relay_id: Mapped[str | None] = mapped_column(String(ID_LEN), index=True)
    desktop_session_id: Mapped[str | None] = mapped_column(String(NAME_LEN))
    outcome: Mapped[str] = mapped_column(String(NAME_LEN))
    reason: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str | None] = mapped_column(String(NAME_LEN))
    request_id: Mapped[str | None] = mapped_column(String(NAME_LEN))
    details: Mapped[dict[str, Any] | None]


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (Index(None, "conversation_id", "id"),)

    id: Mapped[int] = mapped_column(AutoIncrementId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    author_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    kind: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(Text)
    payload: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime]


class Desktop(Base):
    """The canonical desktop inventory (docs/architecture.md, "Inventory and actions")."""

    __tablename__ = "desktops"

    relay_id: Mapped[str] = mapped_column(
        ForeignKey("relays.id", ondelete="CASCADE"), primary_key=True
    )
    desktop_session_id: Mapped[str] = mapped_column(String(NAME_LEN), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    slot: Mapped[str] = mapped_column(String(NAME_LEN))
    state: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime | None]
    started_by: Mapped[str | None] = mapped_column(String(200))
    updated_at: Mapped[datetime]
    reason: Mapped[str | None] = mapped_column(Text)
    geometry: Mapped[str | None] = mapped_column(String(32))
    display: Mapped[str | None] = mapped_column(String(32))


class DesktopSnapshot(Base):
    """A desktop snapshot's metadata, owned by a conversation; its files stay on the relay
    that made it, under ``id`` (docs/desktops.md, "Snapshots and forks")."""

    __tablename__ = "desktop_snapshots"
    __table_args__ = (UniqueConstraint("conversation_id", "name"),)

    id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    relay_id: Mapped[str] = mapped_column(ForeignKey("relays.id", ondelete="CASCADE"))
    profile: Mapped[str | None] = mapped_column(String(NAME_LEN))
    geometry: Mapped[str] = mapped_column(String(32))
    depth: Mapped[int] = mapped_column(Integer)
    apps: Mapped[list[str]] = mapped_column(JSON)
    windows: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    created_by: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime]
