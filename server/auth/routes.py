"""Login, logout, ``/me`` and one-time login links.

Failed logins are logged with the username and client address only; passwords, tokens
and session secrets never reach a log line, a response body or an exception message.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from server import errors
from server.auth import addresses
from server.auth.dependencies import SESSION_COOKIE, Authenticator
from server.auth.errors import AuthError, RateLimited, Unauthorized, error_response
from server.auth.link_page import FOREIGN_SITES, confirmation_page, refusal_page
from server.auth.principal import Principal
from server.auth.ratelimit import LoginRateLimiter
from server.boundary.body import read_json_object
from server.boundary.hosts import CrossOrigin, HostPolicy
from server.config import Settings
from server.db.records import UserRecord
from server.json_response import JSONResponse
from server.secrets.tokens import LOGIN_LINK_PREFIX, TOKEN_BYTES
from wire.errors import ErrorCode, OpError, RelaydeskError

log = logging.getLogger(__name__)

BAD_CREDENTIALS = "wrong username or password"
MAX_FIELD_LEN = 1024
# Two fields of at most MAX_FIELD_LEN characters, with room for escapes; read only this much.
LOGIN_BODY_LIMIT = 8 * 1024
LOGOUT_BODY_LIMIT = 1024
# A login link token is ``rdl_`` and the URL-safe base64 of 32 random bytes (43 characters).
LINK_CHARS = math.ceil(TOKEN_BYTES * 4 / 3)
LINK_SHAPE = re.compile(re.escape(LOGIN_LINK_PREFIX) + f"[A-Za-z0-9_-]{{{LINK_CHARS}}}")
# Nothing about a login exchange may be cached or leak through a Referer header.
PRIVATE_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
LINK_NO_LONGER_VALID = "This login link is no longer valid. Ask for a new one."
LINK_FROM_ANOTHER_SITE = (
    "This sign-in was sent by another site, so it was refused. Open the login link yourself "
    "and press Sign in."
)

Endpoint = Callable[[Request], Awaitable[Response]]


def user_json(user: UserRecord | Principal) -> dict[str, Any]:
    return {"user_id": user.user_id, "username": user.username, "is_admin": user.is_admin}


def set_session_cookie(response: Response, secret: str, settings: Settings) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        secret,
        max_age=settings.session_ttl_s,
        path="/",
        secure=settings.cookie_secure,
        httponly=True,
        samesite="lax",
    )


def clear_session_cookie(response: Response, settings: Settings) -> None:
    response.delete_cookie(
        SESSION_COOKIE, path="/", secure=settings.cookie_secure, httponly=True, samesite="lax"
    )


def invalid_args(message: str) -> JSONResponse:
    return errors.error_response(OpError(ErrorCode.INVALID_ARGS, message))


def json_errors(endpoint: Endpoint) -> Endpoint:
    """Turn every ``RelaydeskError`` into the one error body, so the routes work in any app."""

    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except AuthError as err:
            return error_response(err)
        except RelaydeskError as err:
            return errors.error_response(err)

    return wrapped


def _credentials(body: dict[str, Any]) -> tuple[str, str] | None:
    username, password = body.get("username"), body.get("password")
    if not (isinstance(username, str) and isinstance(password, str)):
        return None
    if len(username) > MAX_FIELD_LEN or len(password) > MAX_FIELD_LEN:
        return None
    return username, password


async def _check_rate(limiter: LoginRateLimiter, address: str) -> None:
    if (wait := await limiter.retry_after(address)) is not None:
        log.warning("login refused (rate limited) from %s", address)
        raise RateLimited(wait)


def _link_token(request: Request) -> str | None:
    """The path's token if it has a login link's shape (checked before any lookup)."""
    token = str(request.path_params["token"])
    return token if LINK_SHAPE.fullmatch(token) else None


class AuthRoutes:
    """Sign-in and sign-out over ``auth``'s store, limited by ``limiter``."""

    def __init__(self, auth: Authenticator, settings: Settings, limiter: LoginRateLimiter) -> None:
        self.auth = auth
        self.store = auth.store
        self.settings = settings
        self.limiter = limiter
        self.hosts = HostPolicy.build(settings.public_url, settings.allowed_hosts)

    def client_address(self, request: Request) -> str:
        """The connection's address, or the one a configured trusted proxy forwards."""
        return addresses.client_address(request, self.settings.trusted_proxies)

    def _origin_allowed(self, request: Request) -> bool:
        origin, host = request.headers.get("origin"), request.headers.get("host")
        return self.hosts.origin_allowed(origin, host)

    def _check_origin(self, request: Request) -> None:
        """Login CSRF: another site's form must not sign the browser in (to anyone's account)."""
        if not self._origin_allowed(request):
            log.warning("login refused (cross-origin) from %s", self.client_address(request))
            raise CrossOrigin()

    async def login(self, request: Request) -> Response:
        """``POST /api/v1/login {username, password}`` → session cookie + CSRF token.

        Cheapest first: the address's rate limit and the Origin before a byte of the body is
        read, then a small JSON body (``LOGIN_BODY_LIMIT``). Failures count against the address
        only: the right password from an address under its limit always signs in.
        """
        address, limiter = self.client_address(request), self.limiter
        await _check_rate(limiter, address)
        self._check_origin(request)
        credentials = _credentials(await read_json_object(request, LOGIN_BODY_LIMIT))
        if credentials is None:
            return invalid_args("expected a JSON object with string 'username' and 'password'")
        username, password = credentials
        store = self.store
        user = await store.verify_password(username, password)
        if user is None:
            await limiter.record_failure(address)
            log.warning("login failed user=%r from %s", username[:64], address)
            raise Unauthorized(BAD_CREDENTIALS)
        return await self._signed_in(request, user, "password")

    async def _signed_in(self, request: Request, user: UserRecord, how: str) -> Response:
        settings, store = self.settings, self.store
        if old_secret := request.cookies.get(SESSION_COOKIE):
            await store.delete_web_session(old_secret)  # no session fixation across logins
        secret, csrf = await store.create_web_session(user.user_id, settings.session_ttl_s)
        log.info("login user=%s via %s from %s", user.username, how, self.client_address(request))
        if how == "link":
            response: Response = RedirectResponse("/", status_code=303, headers=PRIVATE_HEADERS)
        else:
            body = {"ok": True, "user": user_json(user), "csrf_token": csrf}
            response = JSONResponse(body, headers=PRIVATE_HEADERS)
        set_session_cookie(response, secret, settings)
        return response

    async def logout(self, request: Request) -> Response:
        """``POST /api/v1/logout``: ends the cookie session (CSRF-checked) and clears the cookie."""
        principal = await self.auth.authenticate(request)
        await read_json_object(request, LOGOUT_BODY_LIMIT, empty_ok=True)  # nothing is expected
        if principal.via == "cookie":
            await self.store.delete_web_session(request.cookies[SESSION_COOKIE])
        response = JSONResponse({"ok": True}, headers=PRIVATE_HEADERS)
        clear_session_cookie(response, self.settings)
        return response

    async def me(self, request: Request) -> Response:
        """``GET /api/v1/me``: the caller, and the CSRF token for cookie sessions."""
        principal = await self.auth.authenticate(request)
        body = {
            "ok": True,
            "user": user_json(principal),
            "via": principal.via,
            "csrf_token": principal.csrf_token,
        }
        return JSONResponse(body, headers=PRIVATE_HEADERS)

    def _refused_link(self, request: Request, why: str) -> Response:
        log.warning("login link refused (%s) from %s", why, self.client_address(request))
        if why == "another site":
            return refusal_page(LINK_FROM_ANOTHER_SITE, 403)
        return refusal_page(LINK_NO_LONGER_VALID, 400)

    async def login_link(self, request: Request) -> Response:
        """``POST /login/{token}`` (the confirmation page's button): spends the one-time link,
        signs the browser in and goes to ``/``."""
        token = _link_token(request)
        if token is None:
            return self._refused_link(request, "malformed")
        if self._sent_by_another_site(request):
            return self._refused_link(request, "another site")
        user = await self.store.consume_login_link(token)
        if user is None:
            return self._refused_link(request, "no longer valid")
        return await self._signed_in(request, user, "link")

    async def login_link_page(self, request: Request) -> Response:
        """``GET /login/{token}``: a page whose button signs in; the link is not spent here (see
        ``server.auth.link_page``)."""
        if _link_token(request) is None:
            return self._refused_link(request, "malformed")
        foreign = request.headers.get("sec-fetch-site") in FOREIGN_SITES
        return confirmation_page(request.url.path, sent_by_another_site=foreign)

    def _sent_by_another_site(self, request: Request) -> bool:
        """Login CSRF through a link: only relaydesk's own page may post it."""
        site = request.headers.get("sec-fetch-site")
        return (site is not None and site != "same-origin") or not self._origin_allowed(request)

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/api/v1/login", json_errors(self.login), methods=["POST"]),
            Route("/api/v1/logout", json_errors(self.logout), methods=["POST"]),
            Route("/api/v1/me", json_errors(self.me), methods=["GET"]),
            Route("/login/{token}", self.login_link_page, methods=["GET"]),
            Route("/login/{token}", self.login_link, methods=["POST"]),
        ]
