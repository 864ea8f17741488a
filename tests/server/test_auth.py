"""Login, sessions, CSRF, bearer tokens, rate limiting and login links over HTTP."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from server.auth.dependencies import CSRF_HEADER, SESSION_COOKIE, Authenticator
from server.auth.errors import AuthError, auth_error_handler
from server.auth.ratelimit import LoginRateLimiter
from server.auth.routes import BAD_CREDENTIALS, AuthRoutes
from server.config import Settings
from server.db.store import Store
from server.secrets.passwords import fast_hasher
from tests.support import postgres

pytestmark = pytest.mark.integration

T = TypeVar("T")
PASSWORD = "correct horse battery staple"
MAX_FAILURES = 3

# Fixtures shared with the other server suites.
database_url = postgres.database_url
postgres_cluster = postgres.postgres_cluster
sqlite_template = postgres.sqlite_template


def make_app(url: str, settings: Settings) -> Starlette:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        store = await Store.open(url, password_hasher=fast_hasher())
        auth = Authenticator(store)
        limiter = LoginRateLimiter.in_process(settings.login_max_failures, settings.login_window_s)

        async def whoami(request: Request) -> JSONResponse:
            principal = await auth.authenticate(request)
            body = {"ok": True, "username": principal.username, "via": principal.via}
            return JSONResponse(body)

        app.router.routes[:0] = [
            *AuthRoutes(auth, settings, limiter).routes(),
            Route("/api/v1/whoami", whoami, methods=["GET", "POST"]),
        ]
        app.state.store = store
        yield
        await store.close()

    return Starlette(lifespan=lifespan, exception_handlers={AuthError: auth_error_handler})


@dataclass
class Harness:
    client: TestClient
    app: Starlette

    @property
    def store(self) -> Store:
        store: Store = self.app.state.store
        return store

    def run(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call a Store coroutine on the app's own event loop."""
        assert self.client.portal is not None
        return self.client.portal.call(functools.partial(func, *args, **kwargs))

    def login(self, username: str = "alice", password: str = PASSWORD) -> Any:
        return self.client.post("/api/v1/login", json={"username": username, "password": password})


def _harness(url: str, **overrides: Any) -> Iterator[Harness]:
    settings = Settings(login_max_failures=MAX_FAILURES, login_window_s=60, **overrides)
    app = make_app(url, settings)
    with TestClient(app) as client:
        harness = Harness(client, app)
        harness.run(harness.store.create_user, "alice", PASSWORD)
        harness.run(harness.store.create_user, "bob", PASSWORD)
        yield harness


@pytest.fixture
def web(database_url: str) -> Iterator[Harness]:
    yield from _harness(database_url)


def _error_code(response: Any) -> str:
    body = response.json()
    assert body["ok"] is False
    return str(body["error"]["code"])


def test_login_sets_session_cookie(web: Harness) -> None:
    response = web.login()
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    assert body["user"]["username"] == "alice"
    assert body["csrf_token"]
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=rds_")
    assert "HttpOnly" in cookie
    assert "SameSite=lax" in cookie
    assert "Path=/" in cookie
    assert "Secure" not in cookie
    assert response.headers["cache-control"] == "no-store"
    me = web.client.get("/api/v1/me").json()
    assert me["user"]["username"] == "alice"
    assert me["via"] == "cookie"
    assert me["csrf_token"] == body["csrf_token"]


def test_secure_cookie_behind_tls(database_url: str) -> None:
    for harness in _harness(database_url, cookie_secure=True):
        assert "Secure" in harness.login().headers["set-cookie"]


def test_wrong_password_and_unknown_user_look_the_same(web: Harness) -> None:
    wrong = web.login(password="nope")
    unknown = web.login(username="mallory")
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.json() == unknown.json()
    assert wrong.json()["error"] == {"code": "unauthorized", "message": BAD_CREDENTIALS}


def test_malformed_login_body(web: Harness) -> None:
    json_type = {"Content-Type": "application/json"}
    response = web.client.post("/api/v1/login", content=b"{not json", headers=json_type)
    assert response.status_code == 400
    assert _error_code(response) == "invalid_args"
    # Not JSON at all (a cross-site form's type): refused before the body is parsed.
    response = web.client.post("/api/v1/login", content=b"{not json")
    assert response.status_code == 415
    assert _error_code(response) == "unsupported_media_type"
    response = web.client.post("/api/v1/login", json={"username": "alice"})
    assert response.status_code == 400


def test_rate_limit_after_failures(web: Harness) -> None:
    """The address that failed is refused (429), the right password too, until the window
    passes; other addresses are in tests/server/test_login_limits.py."""
    for _ in range(MAX_FAILURES):
        assert web.login(password="guess").status_code == 401
    blocked = web.login()
    assert blocked.status_code == 429
    assert _error_code(blocked) == "limit_reached"
    assert 1 <= int(blocked.headers["retry-after"]) <= 60
    assert web.login(username="bob").status_code == 429, "counted per address, not per user"


async def test_limiter_counts_failures_per_address() -> None:
    now = [0.0]
    limiter = LoginRateLimiter.in_process(2, 10, clock=lambda: now[0])
    for _ in range(2):
        assert await limiter.retry_after("10.0.0.1") is None
        await limiter.record_failure("10.0.0.1")
    assert await limiter.retry_after("10.0.0.1") == 10
    assert await limiter.retry_after("10.0.0.2") is None
    now[0] = 10.5
    assert await limiter.retry_after("10.0.0.1") is None


def test_cookie_post_needs_csrf(web: Harness) -> None:
    csrf = web.login().json()["csrf_token"]
    assert web.client.get("/api/v1/whoami").status_code == 200
    missing = web.client.post("/api/v1/whoami")
    assert missing.status_code == 403
    assert _error_code(missing) == "forbidden"
    wrong = web.client.post("/api/v1/whoami", headers={CSRF_HEADER: "x" * len(csrf)})
    assert wrong.status_code == 403
    ok = web.client.post("/api/v1/whoami", headers={CSRF_HEADER: csrf})
    assert ok.status_code == 200
    assert ok.json()["via"] == "cookie"


def test_no_credentials(web: Harness) -> None:
    response = web.client.get("/api/v1/me")
    assert response.status_code == 401
    assert _error_code(response) == "unauthorized"
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_bearer_token(web: Harness) -> None:
    alice = web.run(web.store.get_user_by_name, "alice")
    token, record = web.run(web.store.create_api_token, alice.user_id)
    auth = {"Authorization": f"Bearer {token}"}
    response = web.client.post("/api/v1/whoami", headers=auth)  # no CSRF needed
    assert response.status_code == 200
    assert response.json()["via"] == "token"
    assert web.client.get("/api/v1/me", headers=auth).json()["csrf_token"] is None
    web.run(web.store.revoke_api_token, record.token_id)
    revoked = web.client.get("/api/v1/me", headers=auth)
    assert revoked.status_code == 401
    assert _error_code(revoked) == "unauthorized"


def test_bad_bearer_does_not_fall_back_to_cookie(web: Harness) -> None:
    web.login()
    response = web.client.get("/api/v1/me", headers={"Authorization": "Bearer rdk_wrong"})
    assert response.status_code == 401
    response = web.client.get("/api/v1/me", headers={"Authorization": "Basic abc"})
    assert response.status_code == 401


def test_logout(web: Harness) -> None:
    csrf = web.login().json()["csrf_token"]
    assert web.client.post("/api/v1/logout").status_code == 403
    secret = web.client.cookies[SESSION_COOKIE]
    response = web.client.post("/api/v1/logout", headers={CSRF_HEADER: csrf})
    assert response.status_code == 200
    assert f'{SESSION_COOKIE}=""' in response.headers["set-cookie"]
    assert web.run(web.store.get_web_session, secret) is None
    assert web.client.get("/api/v1/me").status_code == 401


def test_login_link_is_one_time(web: Harness) -> None:
    alice = web.run(web.store.get_user_by_name, "alice")
    token = web.run(web.store.create_login_link, alice.user_id, 60)
    first = web.client.post(f"/login/{token}", follow_redirects=False)
    assert first.status_code == 303
    assert first.headers["location"] == "/"
    assert "HttpOnly" in first.headers["set-cookie"]
    assert first.headers["referrer-policy"] == "no-referrer"
    assert web.client.get("/api/v1/me").json()["user"]["username"] == "alice"
    web.client.cookies.clear()
    again = web.client.post(f"/login/{token}", follow_redirects=False)
    assert again.status_code == 400
    assert "no longer valid" in again.text
    assert "set-cookie" not in again.headers
    for malformed in ("rdl_bogus", "x" * 200, token + "x", token[:-1] + "%21"):
        assert web.client.get(f"/login/{malformed}").status_code == 400, malformed
        assert web.client.post(f"/login/{malformed}").status_code == 400, malformed


def test_opening_a_login_link_spends_nothing(web: Harness) -> None:
    """A GET (a person, a link previewer, another site's navigation) shows the button only."""
    alice = web.run(web.store.get_user_by_name, "alice")
    token = web.run(web.store.create_login_link, alice.user_id, 60)
    for _ in range(2):
        page = web.client.get(f"/login/{token}", follow_redirects=False)
        assert page.status_code == 200 and "set-cookie" not in page.headers
        assert f'<form method=post action="/login/{token}">' in page.text
        assert "Another site sent you here" not in page.text
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert page.headers["referrer-policy"] == "same-origin"
        assert page.headers["cache-control"] == "no-store"
    sent = web.client.get(f"/login/{token}", headers={"Sec-Fetch-Site": "cross-site"})
    assert "Another site sent you here" in sent.text
    assert web.client.post(f"/login/{token}", follow_redirects=False).status_code == 303


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
    ],
)
def test_a_login_link_posted_by_another_site_signs_nobody_in(
    web: Harness, headers: dict[str, str]
) -> None:
    alice = web.run(web.store.get_user_by_name, "alice")
    token = web.run(web.store.create_login_link, alice.user_id, 60)
    refused = web.client.post(f"/login/{token}", headers=headers, follow_redirects=False)
    assert refused.status_code == 403 and "set-cookie" not in refused.headers
    assert "another site" in refused.text
    own = {"Sec-Fetch-Site": "same-origin"}
    signed_in = web.client.post(f"/login/{token}", headers=own, follow_redirects=False)
    assert signed_in.status_code == 303, "the refused POST did not spend the link"


def test_no_secret_reaches_the_logs(web: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    alice = web.run(web.store.get_user_by_name, "alice")
    api_token, _ = web.run(web.store.create_api_token, alice.user_id)
    link = web.run(web.store.create_login_link, alice.user_id, 60)
    web.login(password="wrong-" + PASSWORD)
    csrf = web.login().json()["csrf_token"]
    session = web.client.cookies[SESSION_COOKIE]
    web.client.post("/api/v1/whoami", headers={CSRF_HEADER: csrf})
    web.client.get("/api/v1/me", headers={"Authorization": f"Bearer {api_token}"})
    web.client.get(f"/login/{link}")
    web.client.post(f"/login/{link}", follow_redirects=False)
    # httpx logs the request URL on the client side; that is the test client, not the server.
    server_lines = [r.getMessage() for r in caplog.records if not r.name.startswith("httpx")]
    text = "\n".join(server_lines)
    assert "login failed user='alice'" in text
    for secret in (PASSWORD, api_token, link, session, csrf):
        assert secret not in text


def test_login_checks_origin_and_type_itself(web: Harness) -> None:
    """In any app (no boundary middleware): a cross-site form cannot sign a browser in."""
    body = b'{"username": "alice", "password": "' + PASSWORD.encode() + b'"}'
    cross = web.client.post(
        "/api/v1/login",
        content=body,
        headers={"Content-Type": "application/json", "Origin": "https://evil.example"},
    )
    assert cross.status_code == 403 and "set-cookie" not in cross.headers
    form = web.client.post("/api/v1/login", content=body, headers={"Content-Type": "text/plain"})
    assert form.status_code == 415 and "set-cookie" not in form.headers
    big = web.client.post(
        "/api/v1/login", content=b" " * 100_000, headers={"Content-Type": "application/json"}
    )
    assert big.status_code == 413
