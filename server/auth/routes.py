"""Login, logout, ``/me`` and one-time login links.

Failed logins are logged with the username and client address only; passwords, tokens
and session secrets never reach a log line, a response body or an exception message.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from server.auth.dependencies import SESSION_COOKIE, authenticate, store_of
from server.auth.errors import AuthError, RateLimited, Unauthorized, error_response
from server.auth.principal import Principal
from server.auth.ratelimit import LoginRateLimiter
from server.config import Settings
from server.db.records import UserRecord
from server.json_response import JSONResponse
from wire.errors import ErrorCode

log = logging.getLogger(__name__)

BAD_CREDENTIALS = "wrong username or password"
MAX_FIELD_LEN = 1024
# Nothing about a login exchange may be cached or leak through a Referer header.
PRIVATE_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
INVALID_LINK_PAGE = (
    "<!doctype html><meta charset=utf-8><title>relaydesk</title>"
    "<p>This login link is no longer valid. Ask for a new one.</p>"
)

Endpoint = Callable[[Request], Awaitable[Response]]


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def login_limiter(request: Request) -> LoginRateLimiter:
    """The app's limiter (``app.state.login_limiter``), created from settings on first use."""
    state = request.app.state
    if getattr(state, "login_limiter", None) is None:
        settings = settings_of(request)
        state.login_limiter = LoginRateLimiter(settings.login_max_failures, settings.login_window_s)
    limiter: LoginRateLimiter = state.login_limiter
    return limiter


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


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
    body = {"ok": False, "error": {"code": ErrorCode.INVALID_ARGS.value, "message": message}}
    return JSONResponse(body, status_code=400)


def json_errors(endpoint: Endpoint) -> Endpoint:
    """Turn ``AuthError`` into its JSON response, so the routes work in any app."""

    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except AuthError as err:
            return error_response(err)

    return wrapped


async def _credentials(request: Request) -> tuple[str, str] | None:
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(body, dict):
        return None
    username, password = body.get("username"), body.get("password")
    if not (isinstance(username, str) and isinstance(password, str)):
        return None
    if len(username) > MAX_FIELD_LEN or len(password) > MAX_FIELD_LEN:
        return None
    return username, password


@json_errors
async def login(request: Request) -> Response:
    """``POST /api/v1/login {username, password}`` → session cookie + CSRF token."""
    credentials = await _credentials(request)
    if credentials is None:
        return invalid_args("expected a JSON object with string 'username' and 'password'")
    username, password = credentials
    address, limiter = client_address(request), login_limiter(request)
    if (wait := limiter.retry_after(username, address)) is not None:
        log.warning("login refused (rate limited) user=%r from %s", username[:64], address)
        raise RateLimited(wait)
    store = store_of(request)
    user = await store.verify_password(username, password)
    if user is None:
        limiter.record_failure(username, address)
        log.warning("login failed user=%r from %s", username[:64], address)
        raise Unauthorized(BAD_CREDENTIALS)
    limiter.record_success(username)
    if old_secret := request.cookies.get(SESSION_COOKIE):
        await store.delete_web_session(old_secret)  # no session fixation across logins
    return await _signed_in(request, user, "password")


async def _signed_in(request: Request, user: UserRecord, how: str) -> Response:
    settings = settings_of(request)
    secret, csrf = await store_of(request).create_web_session(user.user_id, settings.session_ttl_s)
    log.info("login user=%s via %s from %s", user.username, how, client_address(request))
    if how == "link":
        response: Response = RedirectResponse("/", status_code=303, headers=PRIVATE_HEADERS)
    else:
        body = {"ok": True, "user": user_json(user), "csrf_token": csrf}
        response = JSONResponse(body, headers=PRIVATE_HEADERS)
    set_session_cookie(response, secret, settings)
    return response


@json_errors
async def logout(request: Request) -> Response:
    """``POST /api/v1/logout``: ends the cookie session (CSRF-checked) and clears the cookie."""
    principal = await authenticate(request)
    if principal.via == "cookie":
        await store_of(request).delete_web_session(request.cookies[SESSION_COOKIE])
    response = JSONResponse({"ok": True}, headers=PRIVATE_HEADERS)
    clear_session_cookie(response, settings_of(request))
    return response


@json_errors
async def me(request: Request) -> Response:
    """``GET /api/v1/me``: the caller, and the CSRF token for cookie sessions."""
    principal = await authenticate(request)
    body = {
        "ok": True,
        "user": user_json(principal),
        "via": principal.via,
        "csrf_token": principal.csrf_token,
    }
    return JSONResponse(body, headers=PRIVATE_HEADERS)


async def login_link(request: Request) -> Response:
    """``GET /login/{token}``: a one-time link signs the browser in and goes to ``/``."""
    user = await store_of(request).consume_login_link(request.path_params["token"])
    if user is None:
        log.warning("login link refused from %s", client_address(request))
        return HTMLResponse(INVALID_LINK_PAGE, status_code=400, headers=PRIVATE_HEADERS)
    return await _signed_in(request, user, "link")


auth_routes = [
    Route("/api/v1/login", login, methods=["POST"]),
    Route("/api/v1/logout", logout, methods=["POST"]),
    Route("/api/v1/me", me, methods=["GET"]),
    Route("/login/{token}", login_link, methods=["GET"]),
]
