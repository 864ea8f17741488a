"""Administration used by ``relaydesk admin …`` and ``relaydesk up``.

Every function takes an open ``Store`` and returns JSON-ready dicts. Secrets (passwords,
tokens) appear only in the return value of the call that created them, to be shown once.
"""

from __future__ import annotations

import re
import secrets
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

from server.db.errors import StoreError
from server.db.records import (
    AuditRecord,
    ConversationRecord,
    RelayRecord,
    Role,
    TokenRecord,
    UserRecord,
    parse_role,
)
from server.db.store import Store
from wire.errors import ErrorCode, RelaydeskError
from wire.ids import ConversationId, UserId

ADMIN_USERNAME = "admin"
DESKTOP_CONVERSATION = "Desktop"
# The name ``relaydesk up`` gave its relay before it was named after the host; "local" is
# also what a relay calls the host's real screen, so such a relay is renamed on the next ``up``.
OLD_ALL_IN_ONE_RELAY = "local"
FALLBACK_RELAY_NAME = "this-machine"
GENERATED_PASSWORD_BYTES = 18


# An API token's name, as relay names are spelled.
TOKEN_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class AdminError(RelaydeskError):
    """An admin command cannot be carried out; the message says why."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.INVALID_ARGS) -> None:
        self.code = code
        super().__init__(message)


@asynccontextmanager
async def _as_admin_error() -> AsyncIterator[None]:
    try:
        yield
    except StoreError as err:
        raise AdminError(err.message, err.code) from err


async def _user(store: Store, username_or_id: str) -> UserRecord:
    user = await store.get_user_by_name(username_or_id) or await store.get_user(username_or_id)
    if user is None:
        raise AdminError(f"no user {username_or_id!r}", ErrorCode.NOT_FOUND)
    return user


async def _relay(store: Store, name_or_id: str) -> RelayRecord:
    relay = await store.get_relay_by_name(name_or_id) or await store.get_relay(name_or_id)
    if relay is None:
        raise AdminError(f"no relay {name_or_id!r}", ErrorCode.RELAY_NOT_FOUND)
    return relay


def parse_member(spec: str) -> tuple[str, Role]:
    """``"alice:write"`` → ``("alice", "write")``."""
    user, sep, role = spec.rpartition(":")
    if not sep or not user:
        raise AdminError(f"member {spec!r} must look like USER:ROLE")
    try:
        return user, parse_role(role)
    except ValueError as err:
        raise AdminError(f"member {spec!r}: {err}") from err


async def create_user(
    store: Store, username: str, password: str | None = None, *, is_admin: bool = False
) -> dict[str, Any]:
    """Create a user; a strong password is generated when none is given."""
    password = password or secrets.token_urlsafe(GENERATED_PASSWORD_BYTES)
    async with _as_admin_error():
        user = await store.create_user(username, password, is_admin=is_admin)
    return {"user_id": user.user_id, "username": user.username, "password": password}


async def set_password(store: Store, username: str, password: str | None = None) -> dict[str, Any]:
    """Give the user a new password (generated when none is given, shown once)."""
    user = await _user(store, username)
    password = password or secrets.token_urlsafe(GENERATED_PASSWORD_BYTES)
    async with _as_admin_error():
        await store.set_password(user.user_id, password)
    return {"user_id": user.user_id, "username": user.username, "password": password}


async def login_link(store: Store, username: str, *, ttl_s: int, base_url: str) -> dict[str, Any]:
    """A one-time login link for the user (how ``relaydesk up``'s admin gets back in)."""
    user = await _user(store, username)
    if user.disabled_at is not None:
        raise AdminError(f"user {user.username!r} is disabled (admin enable-user first)")
    async with _as_admin_error():
        token = await store.create_login_link(user.user_id, ttl_s)
    return {
        "username": user.username,
        "login_url": f"{base_url.rstrip('/')}/login/{token}",
        "expires_in_s": ttl_s,
    }


async def create_token(
    store: Store,
    username: str,
    name: str | None = None,
    *,
    expires_in_s: int | None = None,
    read_only: bool = False,
    conversation: str | None = None,
) -> dict[str, Any]:
    """A new API token for the user, shown once: named (unique among the user's live tokens;
    ``default``, ``default-2``, … when not given), optionally expiring and scoped (read-only;
    one conversation)."""
    user = await _user(store, username)
    taken = await live_token_names(store, user.user_id)
    name = name or free_token_name(taken)
    if not TOKEN_NAME_RE.fullmatch(name):
        raise AdminError(
            f"token name {name!r}: use 1 to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    if name in taken:
        raise AdminError(
            f"user {user.username!r} already has a live API token named {name!r} "
            "(revoke-token it, or choose another --name)"
        )
    if expires_in_s is not None and expires_in_s <= 0:
        raise AdminError("--expires-in must be a positive duration")
    if conversation is not None and await store.get_conversation(conversation) is None:
        raise AdminError(f"no conversation {conversation!r}", ErrorCode.NOT_FOUND)
    expires_at = store.now() + timedelta(seconds=expires_in_s) if expires_in_s else None
    async with _as_admin_error():
        token, record = await store.create_api_token(
            user.user_id,
            name,
            expires_at=expires_at,
            read_only=read_only,
            conversation_id=conversation,
        )
    return {"token": token, **_token_json(record, {user.user_id: user.username})}


def free_token_name(taken: set[str], base: str = "default") -> str:
    """``base``, else the first of ``base-2``, ``base-3``, … not in ``taken``."""
    names = (base, *(f"{base}-{n}" for n in range(2, len(taken) + 2)))
    return next(name for name in names if name not in taken)


async def live_token_names(store: Store, user_id: str) -> set[str]:
    """The names of the user's tokens that are not revoked."""
    return {t.name for t in await _tokens(store, user_id) if t.revoked_at is None}


async def _tokens(store: Store, user_id: str | None) -> list[TokenRecord]:
    return await store.list_api_tokens(user_id)


async def list_tokens(store: Store, user: str | None = None) -> list[dict[str, Any]]:
    """API tokens (of one user, or of all), without the tokens themselves."""
    names = {u.user_id: u.username for u in await store.list_users()}
    user_id = (await _user(store, user)).user_id if user else None
    return [_token_json(t, names) for t in await _tokens(store, user_id)]


async def revoke_token(store: Store, token: str, user: str | None = None) -> dict[str, Any]:
    """Revoke an API token by id, or by name (of ``user``'s tokens when given); idempotent:
    an already revoked token stays revoked."""
    record = await _token_by_id_or_name(store, token, user)
    was_live = await store.revoke_api_token(record.token_id)
    return {"token_id": record.token_id, "name": record.name, "revoked": True, "was_live": was_live}


async def _token_by_id_or_name(store: Store, token: str, user: str | None) -> TokenRecord:
    """The token with this id, else the one live token with this name."""
    user_id = (await _user(store, user)).user_id if user else None
    found = await store.get_api_token(token)
    if found is not None and user_id in (None, found.user_id):
        return found
    named = [t for t in await _tokens(store, user_id) if t.name == token]
    live = [t for t in named if t.revoked_at is None] or named
    if not live:
        raise AdminError(f"no API token with the id or name {token!r}", ErrorCode.NOT_FOUND)
    if len(live) > 1:
        names = {u.user_id: u.username for u in await store.list_users()}
        owners = ", ".join(f"{t.token_id} ({names.get(t.user_id, t.user_id)})" for t in live)
        raise AdminError(
            f"several API tokens are named {token!r}: {owners}; give the id, or --user"
        )
    return live[0]


async def disable_user(store: Store, username: str) -> dict[str, Any]:
    """Refuse the user's logins, sessions and API tokens; their data stays."""
    return await _set_disabled(store, username, disabled=True)


async def enable_user(store: Store, username: str) -> dict[str, Any]:
    """Let a disabled user log in again (their old sessions stay ended)."""
    return await _set_disabled(store, username, disabled=False)


async def _set_disabled(store: Store, username: str, *, disabled: bool) -> dict[str, Any]:
    user = await _user(store, username)
    change = store.disable_user if disabled else store.enable_user
    async with _as_admin_error():
        changed = await change(user.user_id)
    return {
        "user_id": user.user_id,
        "username": user.username,
        "disabled": disabled,
        "changed": changed,
    }


async def add_relay(
    store: Store, name: str, owner: str, *, co_located: bool = False
) -> dict[str, Any]:
    """Register a relay owned by ``owner`` (username or id); its token is shown once."""
    user = await _user(store, owner)
    async with _as_admin_error():
        relay, token = await store.add_relay(name, user.user_id, co_located=co_located)
    return {
        "relay_id": relay.relay_id,
        "name": relay.name,
        "co_located": relay.co_located,
        "token": token,
    }


async def set_relay(store: Store, name_or_id: str, *, co_located: bool) -> dict[str, Any]:
    """Change a relay's registration flags; returns the relay as ``list relays`` shows it."""
    relay = await _relay(store, name_or_id)
    async with _as_admin_error():
        await store.set_relay_co_located(relay.relay_id, co_located)
    return _relay_json(await _relay(store, relay.relay_id))


async def revoke_relay(store: Store, name_or_id: str) -> dict[str, Any]:
    """Refuse the relay's token; the server disconnects it."""
    relay = await _relay(store, name_or_id)
    async with _as_admin_error():
        await store.revoke_relay(relay.relay_id)
    return {"relay_id": relay.relay_id, "name": relay.name, "revoked": True}


async def rotate_relay_token(store: Store, name_or_id: str) -> dict[str, Any]:
    """A new token for the relay, shown once; the old one stops working (lifts a revocation)."""
    relay = await _relay(store, name_or_id)
    async with _as_admin_error():
        token = await store.rotate_relay_token(relay.relay_id)
    return {"relay_id": relay.relay_id, "name": relay.name, "token": token}


async def create_conversation(
    store: Store, title: str, members: Sequence[str] = ()
) -> dict[str, Any]:
    """Create a conversation; ``members`` are ``"USER:ROLE"`` (role read, write or owner)."""
    resolved: list[tuple[UserId, Role]] = []
    for spec in members:
        username, role = parse_member(spec)
        resolved.append(((await _user(store, username)).user_id, role))
    async with _as_admin_error():
        conversation = await store.create_conversation(title, resolved)
    return {"conversation_id": conversation.conversation_id}


async def share_relay(store: Store, relay_name_or_id: str, conversation_id: str) -> dict[str, Any]:
    """Make a relay visible in a conversation."""
    relay = await _relay(store, relay_name_or_id)
    async with _as_admin_error():
        await store.share_relay(relay.relay_id, ConversationId(conversation_id))
    return {"relay_id": relay.relay_id, "conversation_id": conversation_id}


async def unshare_relay(
    store: Store, relay_name_or_id: str, conversation_id: str
) -> dict[str, Any]:
    """Hide a relay from a conversation (idempotent; ``was_shared`` says if it was)."""
    relay = await _relay(store, relay_name_or_id)
    if await store.get_conversation(conversation_id) is None:
        raise AdminError(f"no conversation {conversation_id!r}", ErrorCode.NOT_FOUND)
    was_shared = await store.unshare_relay(relay.relay_id, conversation_id)
    return {
        "relay_id": relay.relay_id,
        "conversation_id": conversation_id,
        "was_shared": was_shared,
    }


async def purge_sessions(store: Store) -> dict[str, Any]:
    """Delete expired web sessions and expired or used login links now."""
    return {"purged": await store.purge_expired_sessions()}


async def list_users(store: Store) -> list[dict[str, Any]]:
    return [
        {
            "user_id": u.user_id,
            "username": u.username,
            "is_admin": u.is_admin,
            "disabled": u.disabled_at is not None,
            "created_at": _iso(u.created_at),
        }
        for u in await store.list_users()
    ]


async def list_relays(store: Store) -> list[dict[str, Any]]:
    return [_relay_json(relay) for relay in await store.list_relays()]


async def list_conversations(store: Store) -> list[dict[str, Any]]:
    return [await _conversation_json(store, c) for c in await store.list_conversations()]


async def list_audit(
    store: Store,
    *,
    since: datetime | None = None,
    relay: str | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    """Recent audit rows, oldest first; ``relay`` is a name or id."""
    relay_id = (await _relay(store, relay)).relay_id if relay else None
    return [
        _audit_json(a) for a in await store.list_audit(since=since, relay_id=relay_id, limit=limit)
    ]


def all_in_one_relay_name(hostname: str | None = None) -> str:
    """The all-in-one relay's name: this host's name as a relay name, else ``this-machine``."""
    raw = (hostname if hostname is not None else socket.gethostname()).split(".")[0]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).strip("-._")[:64]
    if not name or name.lower() in {OLD_ALL_IN_ONE_RELAY, "localhost"}:
        return FALLBACK_RELAY_NAME
    return name


async def _all_in_one_relay(store: Store, owner: UserId) -> tuple[RelayRecord, str]:
    """The all-in-one relay and a fresh token for it, registered (or renamed) once."""
    name = all_in_one_relay_name()
    relay = await store.get_relay_by_name(name)
    old = await store.get_relay_by_name(OLD_ALL_IN_ONE_RELAY)
    if relay is None and old is not None and old.owner_id == owner:
        await store.rename_relay(old.relay_id, name)
        relay = await store.get_relay(old.relay_id)
    if relay is None:
        # The all-in-one relay runs on the server's host: the direct viewing path is allowed.
        return await store.add_relay(name, owner, co_located=True)
    if not relay.co_located:  # registered before the flag existed
        await store.set_relay_co_located(relay.relay_id, True)
    return relay, await store.rotate_relay_token(relay.relay_id)


async def bootstrap_all_in_one(store: Store, *, login_link_ttl_s: int = 900) -> dict[str, Any]:
    """Ensure admin, the "Desktop" conversation and the shared relay named after this host.

    Idempotent. Every call rotates the relay's token and mints a new one-time login
    link, returning both (``relay_token``, ``login_token``). A relay an earlier version named
    ``local`` is renamed (its id, shares and history stay).
    """
    admin = await store.get_user_by_name(ADMIN_USERNAME)
    if admin is None:
        password = secrets.token_urlsafe(GENERATED_PASSWORD_BYTES)  # unused: sign in by link
        admin = await store.create_user(ADMIN_USERNAME, password, is_admin=True)
    conversation = await store.get_conversation_by_title(DESKTOP_CONVERSATION)
    if conversation is None:
        conversation = await store.create_conversation(DESKTOP_CONVERSATION, [])
    if await store.get_role(conversation.conversation_id, admin.user_id) != "owner":
        await store.add_member(conversation.conversation_id, admin.user_id, "owner")
    relay, relay_token = await _all_in_one_relay(store, admin.user_id)
    await store.share_relay(relay.relay_id, conversation.conversation_id)
    return {
        "user_id": admin.user_id,
        "username": admin.username,
        "conversation_id": conversation.conversation_id,
        "relay_id": relay.relay_id,
        "relay_name": relay.name,
        "relay_token": relay_token,
        "login_token": await store.create_login_link(admin.user_id, login_link_ttl_s),
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _relay_json(relay: RelayRecord) -> dict[str, Any]:
    return {
        "relay_id": relay.relay_id,
        "name": relay.name,
        "owner_id": relay.owner_id,
        "connected": relay.connected,
        "last_seen_at": _iso(relay.last_seen_at),
        "protocol_version": relay.protocol_version,
        "relay_version": relay.relay_version,
        "capabilities": list(relay.capabilities),
        "revoked": relay.revoked,
        "co_located": relay.co_located,
        "created_at": _iso(relay.created_at),
    }


def _token_json(token: TokenRecord, usernames: dict[UserId, str]) -> dict[str, Any]:
    return {
        "token_id": token.token_id,
        "name": token.name,
        "user": usernames.get(token.user_id, token.user_id),
        "created_at": _iso(token.created_at),
        "last_used_at": _iso(token.last_used_at),
        "revoked": token.revoked_at is not None,
        "revoked_at": _iso(token.revoked_at),
        "expires_at": _iso(token.expires_at),
        "read_only": token.read_only,
        "conversation": token.conversation_id,
    }


async def _conversation_json(store: Store, conv: ConversationRecord) -> dict[str, Any]:
    members = await store.list_members(conv.conversation_id)
    relays = await store.relays_visible_in(conv.conversation_id)
    return {
        "conversation_id": conv.conversation_id,
        "title": conv.title,
        "created_at": _iso(conv.created_at),
        "members": [{"username": m.username, "role": m.role} for m in members],
        "relays": [r.name for r in relays],
    }


def _audit_json(row: AuditRecord) -> dict[str, Any]:
    return {
        "audit_id": row.audit_id,
        "at": _iso(row.at),
        "op": row.op,
        "actor": row.actor,
        "outcome": row.outcome,
        "conversation_id": row.conversation_id,
        "relay_id": row.relay_id,
        "desktop_session_id": row.desktop_session_id,
        "reason": row.reason,
        "source": row.source,
        "request_id": row.request_id,
        "details": row.details,
    }
