"""``relaydesk admin …``: users, tokens, relays, conversations, audit (secrets shown once).

Exit status: 0 done, 1 the command could not be carried out (the message says why), 2 bad
usage (argparse).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from relaydesk import tables
from server.db.cache import READ_CACHE_TTL_S

# The database layer (SQLAlchemy, the store, migrations, server.admin) is imported when an
# admin command runs, not when the command line is parsed: every `relaydesk relay` start would
# otherwise spend seconds importing what a relay never uses.
if TYPE_CHECKING:
    from server.db.audit import AuditRow
    from server.db.store import Store

AdminCall = Callable[["Store", argparse.Namespace], Awaitable[Any]]


def _on(action: str, field: str) -> AdminCall:
    """The command that calls ``server.admin.<action>(store, args.<field>)``."""

    async def call(store: Store, args: argparse.Namespace) -> Any:
        from server import admin

        return await getattr(admin, action)(store, getattr(args, field))

    return call


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object (for scripts)")


def _read_password(args: argparse.Namespace) -> str | None:
    if not args.password_stdin:
        return None
    password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise SystemExit("relaydesk: empty password on standard input")
    return password


async def _create_user(store: Store, args: argparse.Namespace) -> Any:
    from server import admin

    return await admin.create_user(
        store, args.name, password=_read_password(args), is_admin=args.admin
    )


async def _set_password(store: Store, args: argparse.Namespace) -> Any:
    from server import admin

    return await admin.set_password(store, args.user, password=_read_password(args))


async def _create_token(store: Store, args: argparse.Namespace) -> Any:
    from server import admin

    return await admin.create_token(
        store,
        args.user,
        args.name,
        expires_in_s=args.expires_in,
        read_only=args.read_only,
        conversation=args.conversation,
    )


async def _revoke_token(store: Store, args: argparse.Namespace) -> Any:
    from server import admin

    return await admin.revoke_token(store, args.token_id, args.user)


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str) -> int:
    """``--expires-in``: seconds, or a number with a unit (90m, 12h, 30d)."""
    value = text.strip().lower()
    unit = DURATION_UNITS.get(value[-1:], 0)
    number = value[:-1] if unit else value
    if not number.isdigit() or int(number) <= 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 3600, 90m, 12h, 30d)")
    return int(number) * (unit or 1)


def _token_reference(text: str) -> str:
    """A token's id or name; the token itself is refused before it could be audited."""
    if text.startswith("rdk_"):
        raise argparse.ArgumentTypeError(
            "that is the token itself: give its id or name (admin list-tokens)"
        )
    return text


async def _login_link(store: Store, args: argparse.Namespace) -> Any:
    from server import admin

    return await admin.login_link(store, args.user, ttl_s=args.ttl, base_url=args.url)


def _server_url() -> str:
    """Where people reach the server: RELAYDESK_PUBLIC_URL, else RELAYDESK_HOST:PORT when
    either is set, else where ``relaydesk up`` last served, else the default address."""
    from relaydesk import saved

    public = os.environ.get("RELAYDESK_PUBLIC_URL", "").strip()
    if public:
        return public
    named = any(os.environ.get(name, "").strip() for name in ("RELAYDESK_HOST", "RELAYDESK_PORT"))
    if not named and (last := saved.load()) is not None:
        return last.server_url
    host = os.environ.get("RELAYDESK_HOST", "").strip() or "127.0.0.1"
    host = "127.0.0.1" if host in {"0.0.0.0", "::"} else host
    port = os.environ.get("RELAYDESK_PORT", "").strip() or "8400"
    return f"http://{host}:{port}"


async def _add_relay(store: Store, args: argparse.Namespace) -> Any:
    from server import admin

    return await admin.add_relay(store, args.name, args.owner, co_located=args.co_located)


async def _set_relay(store: Store, args: argparse.Namespace) -> Any:
    from server import admin

    return await admin.set_relay(store, args.relay, co_located=args.co_located)


async def _unshare_relay(store: Store, args: argparse.Namespace) -> Any:
    from server import admin

    return await admin.unshare_relay(store, args.relay, args.conversation)


async def _purge_sessions(store: Store, args: argparse.Namespace) -> Any:
    from server import admin

    return await admin.purge_sessions(store)


async def _create_conversation(store: Store, args: argparse.Namespace) -> Any:
    from server import admin

    return await admin.create_conversation(store, args.title, args.member)


async def _share_relay(store: Store, args: argparse.Namespace) -> Any:
    from server import admin

    return await admin.share_relay(store, args.relay, args.conversation)


async def _list(store: Store, args: argparse.Namespace) -> Any:
    from server import admin

    listers = {
        "users": admin.list_users,
        "relays": admin.list_relays,
        "conversations": admin.list_conversations,
    }
    return await listers[args.what](store)


def _since(text: str) -> datetime:
    """``--since``: an ISO 8601 time (UTC when it names no offset)."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from err
    return value if value.tzinfo else value.replace(tzinfo=UTC)


async def _audit(store: Store, args: argparse.Namespace) -> Any:
    from server import admin

    return await admin.list_audit(store, since=args.since, relay=args.relay)


def _add(
    sub: Any, name: str, help_text: str, call: AdminCall, *, reads: bool = False
) -> argparse.ArgumentParser:
    """One admin command; ``reads``: it only reads, so a database that does not exist yet is
    a mistake (a mistyped data directory), never created."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text)
    _json_flag(p)
    p.set_defaults(func=lambda args: run_admin(call, args), admin_reads=reads, admin_what=name)
    return p


def _recordings_dir() -> str:
    return os.environ.get("RELAYDESK_RECORDINGS_DIR", "")


async def _set_conversation(store: Store, args: argparse.Namespace) -> Any:
    """A conversation's settings: whether its desktops are recorded by default."""
    from server import admin
    from server.config import Settings, default_data_dir, recordings_path
    from server.recordings.files import RecordingFiles

    if await store.get_conversation(args.conversation) is None:
        raise admin.AdminError(f"no conversation {args.conversation}")
    where = Settings(data_dir=default_data_dir(), recordings_dir=_recordings_dir())
    files = RecordingFiles(recordings_path(where))
    if args.record is not None:
        await asyncio.to_thread(files.set_records_by_default, args.conversation, args.record)
    record = await asyncio.to_thread(files.records_by_default, args.conversation)
    return {"conversation_id": args.conversation, "record": record}


def add_admin(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "admin",
        help="manage users, tokens, relays and conversations; revoke access",
        description="Administer the database named by RELAYDESK_DATABASE_URL. Secrets "
        "(passwords, tokens) are printed once and stored only as hashes.",
    )
    asub = p.add_subparsers(dest="admin_command", required=True, metavar="COMMAND")
    u = _add(asub, "create-user", "create a user; prints a generated password once", _create_user)
    u.add_argument("name", help="the new user's name (letters, digits, '.', '_', '@', '-')")
    u.add_argument("--admin", action="store_true", help="make the user an administrator")
    u.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    _add_recovery_commands(asub)
    sc = _add(
        asub,
        "set-conversation",
        "a conversation's settings: --record records every desktop started in it unless the "
        "start says otherwise (docs/recording.md); --no-record turns that off",
        _set_conversation,
    )
    sc.add_argument("conversation", help="conversation id")
    sc.add_argument(
        "--record", action=argparse.BooleanOptionalAction, default=None, help="record by default"
    )
    t = _add(
        asub,
        "create-token",
        "create an API token (rdk_…) for a user; shown once. Named, optionally expiring and "
        "scoped (read-only; one conversation)",
        _create_token,
    )
    t.add_argument("user", help="user name")
    t.add_argument(
        "--name",
        default=None,
        help="the token's name, unique among the user's live tokens (default: 'default', "
        "else 'default-2', ...); list-tokens shows it and revoke-token takes it",
    )
    t.add_argument(
        "--expires-in",
        type=_duration,
        default=None,
        metavar="DURATION",
        help="refuse the token after this long (401 token_expired): seconds, or a number "
        "with s, m, h or d (90m, 12h, 30d); default: never",
    )
    t.add_argument(
        "--read-only",
        action="store_true",
        help="only what role read allows: list, status, read; every write is 403 forbidden",
    )
    t.add_argument(
        "--conversation",
        default=None,
        help="only this conversation id (every other is 403 forbidden)",
    )
    _add_access_commands(asub)
    r = _add(asub, "add-relay", "register a relay; prints its token once", _add_relay)
    r.add_argument("name", help="the relay's name (letters, digits, '.', '_', '-')")
    r.add_argument("--owner", required=True, help="user name of the relay's owner")
    r.add_argument("--co-located", action="store_true", help=CO_LOCATED_HELP)
    _add_relay_commands(asub)
    c = _add(
        asub, "create-conversation", "create a conversation with members", _create_conversation
    )
    c.add_argument("title", help="the conversation's title")
    c.add_argument(
        "--member",
        action="append",
        default=[],
        metavar="USER:ROLE",
        help="member and role (read, write, owner); repeatable",
    )
    s = _add(asub, "share-relay", "make a relay visible in a conversation", _share_relay)
    s.add_argument("relay", help="relay name or id")
    s.add_argument("conversation", help="conversation id")
    un = _add(
        asub,
        "unshare-relay",
        "hide a relay from a conversation: its members can no longer see or use it",
        _unshare_relay,
    )
    un.add_argument("relay", help="relay name or id")
    un.add_argument("conversation", help="conversation id")
    li = _add(asub, "list", "list users, relays or conversations", _list, reads=True)
    li.add_argument(
        "what", choices=["users", "relays", "conversations"], help="what to list (a table)"
    )
    a = _add(asub, "audit", "read the audit log", _audit, reads=True)
    a.add_argument("--since", default=None, type=_since, help="ISO 8601 time; only newer rows")
    a.add_argument("--relay", default=None, help="relay name or id")


CO_LOCATED_HELP = (
    "the relay runs on the server's own host (lets the server reach its desktops directly)"
)


def _add_recovery_commands(asub: Any) -> None:
    """Getting a user back in: a new password, or a one-time login link."""
    sp = _add(
        asub,
        "set-password",
        "give a user a new password; prints a generated one once (or --password-stdin)",
        _set_password,
    )
    sp.add_argument("user", help="user name or id")
    sp.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    ll = _add(
        asub,
        "login-link",
        "print a one-time login link for a user (signs a browser in once, then expires)",
        _login_link,
    )
    ll.add_argument("user", help="user name or id (relaydesk up's user is 'admin')")
    ll.add_argument(
        "--url",
        default=None,
        help="the server's URL people open (default: RELAYDESK_PUBLIC_URL, else "
        "http://RELAYDESK_HOST:RELAYDESK_PORT when set, else where relaydesk up serves)",
    )
    ll.add_argument(
        "--ttl",
        type=int,
        default=int(os.environ.get("RELAYDESK_LOGIN_LINK_TTL_S") or 900),
        help="seconds the link stays valid (RELAYDESK_LOGIN_LINK_TTL_S, default 900)",
    )


def _add_access_commands(asub: Any) -> None:
    """Listing and revoking what lets people in: API tokens, accounts, sessions."""
    lt = _add(
        asub,
        "list-tokens",
        "list API tokens (id, name, user, created, last used, revoked); never the tokens",
        _on("list_tokens", "user"),
        reads=True,
    )
    lt.add_argument("user", nargs="?", default=None, help="only this user's tokens")
    rt = _add(
        asub,
        "revoke-token",
        f"revoke an API token; every server refuses it within {READ_CACHE_TTL_S:g} s",
        _revoke_token,
    )
    rt.add_argument(
        "token_id",
        metavar="TOKEN",
        type=_token_reference,
        help="the token's id or name, as list-tokens shows them (never the token itself)",
    )
    rt.add_argument("--user", default=None, help="the user whose token is named")
    du = _add(
        asub,
        "disable-user",
        "disable a user: no login, web sessions ended, API tokens refused; data is kept",
        _on("disable_user", "user"),
    )
    du.add_argument("user", help="user name or id")
    eu = _add(asub, "enable-user", "let a disabled user log in again", _on("enable_user", "user"))
    eu.add_argument("user", help="user name or id")
    _add(
        asub,
        "purge-sessions",
        "delete expired web sessions and expired or used login links now "
        "(the server also does it on a schedule)",
        _purge_sessions,
    )


def _add_relay_commands(asub: Any) -> None:
    """Relay registration changes: flags, revocation, a new token."""
    sr = _add(asub, "set-relay", "change a relay's registration flags", _set_relay)
    sr.add_argument("relay", help="relay name or id")
    sr.add_argument(
        "--co-located", action=argparse.BooleanOptionalAction, required=True, help=CO_LOCATED_HELP
    )
    rr = _add(
        asub,
        "revoke-relay",
        "refuse a relay's token; the server closes its connection (rotate-relay-token "
        "gives it a new one)",
        _on("revoke_relay", "relay"),
    )
    rr.add_argument("relay", help="relay name or id")
    rot = _add(
        asub,
        "rotate-relay-token",
        "give a relay a new token, printed once; the old one stops working at once",
        _on("rotate_relay_token", "relay"),
    )
    rot.add_argument("relay", help="relay name or id")


def run_admin(call: AdminCall, args: argparse.Namespace) -> int:
    """Open the store, run one admin call, print its result (exit 1 with a reason if not)."""
    from server import admin
    from server.config import database_url_from_env
    from server.db.errors import StoreError

    if getattr(args, "url", "") is None:
        args.url = _server_url()
    database_url = database_url_from_env()
    print(f"relaydesk: database {describe_database(database_url)}", file=sys.stderr)
    try:
        result = asyncio.run(_with_store(call, args, database_url))
    except (admin.AdminError, StoreError) as err:
        print(f"relaydesk: {err.message}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, default=str))
    else:
        print(tables.render(args.admin_what, getattr(args, "what", None), result))
    return 0


def describe_database(database_url: str) -> str:
    """The database as an operator recognises it: the SQLite file, or the URL sans password."""
    from sqlalchemy import make_url

    from server.db.lock import sqlite_path

    path = sqlite_path(database_url)
    if path is not None:
        return str(path)
    return make_url(database_url).render_as_string(hide_password=True)


async def _with_store(call: AdminCall, args: argparse.Namespace, database_url: str) -> Any:
    from server import admin
    from server.cluster.caches import shared_caches
    from server.db.lock import sqlite_path
    from server.db.migrate import upgrade
    from server.db.store import Store

    path = sqlite_path(database_url)
    if args.admin_reads and path is not None and not path.exists():
        raise admin.AdminError(
            f"no database at {path}: check RELAYDESK_DATA_DIR (or RELAYDESK_DATABASE_URL); "
            "commands that only read never create one"
        )
    await upgrade(database_url)
    store = await Store.open(database_url)
    try:
        # Replicas sharing Redis drop cached tokens and roles at once, not after their TTL.
        async with shared_caches(os.environ.get("RELAYDESK_REDIS_URL", ""), store, listen=False):
            if args.admin_reads:
                return await call(store, args)
            try:
                result = await call(store, args)
            except admin.AdminError as err:
                await store.write_audit(_audit_row(args, "refused", err.message))
                raise
            await store.write_audit(_audit_row(args, "ok", None))
            return result
    finally:
        await store.close()


# What an administrative change names in its audit row: never a password or a token.
AUDITED_ARGUMENTS = (
    "user",
    "name",
    "owner",
    "relay",
    "conversation",
    "title",
    "member",
    "token_id",
    "expires_in",
    "read_only",
    "co_located",
    "ttl",
    "admin",
)


def _audit_row(args: argparse.Namespace, outcome: str, reason: str | None) -> AuditRow:
    """The audit row of one administrative change made with this command line."""
    from server.db.audit import AuditRow

    details = {k: getattr(args, k) for k in AUDITED_ARGUMENTS if getattr(args, k, None) is not None}
    conversation = getattr(args, "conversation", None)
    return AuditRow(
        op=f"admin.{args.admin_what}",
        actor=f"cli:{getpass.getuser()}",
        outcome=outcome,
        conversation_id=conversation if isinstance(conversation, str) else None,
        reason=reason,
        source="cli",
        details=details,
    )
