"""``Authenticator.authenticate(request)``: bearer API token or session cookie (+ CSRF) →
``Principal``.

An ``Authenticator`` reads the store it is given. A request that carries an
``Authorization`` header is judged by it alone; a bad bearer token never falls back to
the cookie. Cookie-authenticated unsafe methods need ``X-CSRF-Token``.
"""

from __future__ import annotations

from dataclasses import replace

from starlette.requests import HTTPConnection, Request

from server.auth.errors import Forbidden, TokenExpired, Unauthorized
from server.auth.principal import AuthMethod, Principal
from server.db.records import UserRecord
from server.db.store import Store
from server.secrets.tokens import hash_secret, same_secret

SESSION_COOKIE = "relaydesk_session"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Authenticator:
    """Who is calling: the user behind a bearer token or a session cookie."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def authenticate(self, request: Request) -> Principal:
        """The caller, or ``Unauthorized`` / ``Forbidden`` (missing or wrong CSRF token)."""
        if "authorization" in request.headers:
            return await self._from_bearer(request)
        return await self._from_cookie(request, require_csrf=request.method not in SAFE_METHODS)

    async def authenticate_connection(self, conn: HTTPConnection) -> Principal:
        """For WebSocket and SSE handshakes: bearer or cookie, no CSRF (they change nothing)."""
        if "authorization" in conn.headers:
            return await self._from_bearer(conn)
        return await self._from_cookie(conn, require_csrf=False)

    async def _from_bearer(self, conn: HTTPConnection) -> Principal:
        scheme, _, token = conn.headers["authorization"].partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("expected 'Authorization: Bearer <token>'")
        return await token_principal(self.store, token.strip())

    async def _from_cookie(self, conn: HTTPConnection, *, require_csrf: bool) -> Principal:
        secret = conn.cookies.get(SESSION_COOKIE)
        if not secret:
            raise Unauthorized()
        session = await self.store.get_web_session(secret)
        user = await self.store.get_user(session.user_id) if session else None
        if session is None or user is None:
            raise Unauthorized("session expired or signed out")
        if require_csrf and not same_secret(conn.headers.get(CSRF_HEADER, ""), session.csrf_token):
            raise Forbidden(f"missing or wrong {CSRF_HEADER} header")
        return _principal(user, "cookie", session.csrf_token, hash_secret(secret))


async def token_principal(store: Store, token: str) -> Principal:
    """The caller behind an API token, with its scopes; ``Unauthorized`` for an unknown or
    revoked token, ``TokenExpired`` for one past its expiry."""
    caller = await store.api_token_caller(token)
    if caller is None:
        raise Unauthorized("invalid or revoked token")
    if caller.token.expired(store.now()):
        raise TokenExpired(f"API token {caller.token.name!r} has expired")
    principal = _principal(caller.user, "token", secret_hash=hash_secret(token))
    return replace(
        principal,
        read_only=caller.token.read_only,
        conversation_scope=caller.token.conversation_id,
    )


def _principal(
    user: UserRecord,
    via: AuthMethod,
    csrf_token: str | None = None,
    secret_hash: str | None = None,
) -> Principal:
    return Principal(user.user_id, user.username, user.is_admin, via, csrf_token, secret_hash)
