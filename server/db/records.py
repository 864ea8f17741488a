"""Frozen records the ``Store`` returns; ORM objects never leave ``server.db``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, get_args

from wire.ids import ConversationId, DesktopSessionId, RelayId, UserId

Role = Literal["read", "write", "owner"]
ROLES: tuple[Role, ...] = get_args(Role)
# Ordered weakest to strongest: a role satisfies every role at or before it.
_ROLE_RANK: dict[Role, int] = {role: rank for rank, role in enumerate(ROLES)}


def role_allows(held: Role | None, needed: Role) -> bool:
    """True when ``held`` is at least as strong as ``needed``."""
    return held is not None and _ROLE_RANK[held] >= _ROLE_RANK[needed]


def parse_role(value: str) -> Role:
    """``value`` as a Role, or ValueError naming the allowed roles."""
    for role in ROLES:
        if value == role:
            return role
    raise ValueError(f"role must be one of {', '.join(ROLES)}, not {value!r}")


@dataclass(frozen=True)
class UserRecord:
    user_id: UserId
    username: str
    is_admin: bool
    created_at: datetime
    disabled_at: datetime | None


@dataclass(frozen=True)
class TokenRecord:
    token_id: str
    user_id: UserId
    name: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    expires_at: datetime | None = None
    read_only: bool = False
    conversation_id: str | None = None

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and now >= self.expires_at


@dataclass(frozen=True)
class TokenCaller:
    """The user behind a presented API token, and the token (its expiry and scopes)."""

    user: UserRecord
    token: TokenRecord


@dataclass(frozen=True)
class WebSessionRecord:
    session_id: str
    user_id: UserId
    csrf_token: str = field(repr=False)
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class ConversationRecord:
    conversation_id: ConversationId
    title: str
    created_at: datetime


@dataclass(frozen=True)
class MembershipRecord:
    """A conversation as one member sees it: with that member's role."""

    conversation_id: ConversationId
    title: str
    created_at: datetime
    role: Role


@dataclass(frozen=True)
class MemberRecord:
    conversation_id: ConversationId
    user_id: UserId
    username: str
    role: Role


@dataclass(frozen=True)
class RelayRecord:
    relay_id: RelayId
    name: str
    owner_id: UserId
    connected: bool
    last_seen_at: datetime | None
    protocol_version: int | None
    relay_version: str | None
    capabilities: tuple[str, ...]
    created_at: datetime
    revoked: bool
    co_located: bool


@dataclass(frozen=True)
class AuditRecord:
    audit_id: int
    at: datetime
    op: str
    actor: str
    outcome: str
    conversation_id: ConversationId | None
    relay_id: RelayId | None
    desktop_session_id: DesktopSessionId | None
    reason: str | None
    source: str | None
    request_id: str | None
    details: dict[str, Any] | None


@dataclass(frozen=True)
class MessageRecord:
    message_id: int
    conversation_id: ConversationId
    author_id: UserId | None
    kind: str
    text: str
    payload: dict[str, Any] | None
    created_at: datetime


@dataclass(frozen=True)
class SnapshotRecord:
    """A desktop snapshot's metadata; its files are on ``relay_id`` under ``snapshot_id``."""

    snapshot_id: str
    conversation_id: ConversationId
    name: str
    relay_id: RelayId
    profile: str | None
    geometry: str
    depth: int
    apps: tuple[str, ...]
    windows: tuple[dict[str, Any], ...]
    size_bytes: int
    created_by: str
    created_at: datetime

    def to_dict(self, relay_name: str | None = None) -> dict[str, Any]:
        """What the actions answer about it (no relay-side id: the name is the handle)."""
        return {
            "name": self.name,
            "relay": relay_name or self.relay_id,
            "profile": self.profile,
            "geometry": self.geometry,
            "depth": self.depth,
            "apps": list(self.apps),
            "windows": [dict(w) for w in self.windows],
            "size_bytes": self.size_bytes,
            "created_by": self.created_by,
            "created_at": self.created_at.isoformat(),
        }
