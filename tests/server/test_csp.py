"""Every HTTP response of a real server carries a strict Content-Security-Policy.

The pages (chat and dock, the login link's page, the viewer page, error pages) and every other
route, enumerated from the app so a new route is covered, with and without authentication.
The pages themselves hold no inline script, event handler or style attribute that the policy
would block (the browser tests run them under it: tests/e2e).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server.chat.web import web_dir
from server.csp import POLICY
from server.viewer.assets import VIEWER_DIR
from tests.server.test_bad_input import ROUTES
from tests.support.background import in_background_thread
from tests.support.processes import scaled
from tests.support.stack import Seed, inprocess_server, seed_database

pytestmark = pytest.mark.unit

SESSION = "s" * 22
TOKEN = "eyJ1IjoiIn0.c2ln"


def directives(policy: str) -> dict[str, list[str]]:
    parsed: dict[str, list[str]] = {}
    for part in policy.split(";"):
        words = part.split()
        if words:
            parsed[words[0]] = words[1:]
    return parsed


def assert_strict(policy: str | None, what: str) -> None:
    assert policy, f"{what}: no Content-Security-Policy"
    found = directives(policy)
    fallback = found.get("default-src")
    assert (found.get("object-src") or fallback) == ["'none'"], what
    assert found.get("base-uri") == ["'none'"], what
    assert found.get("frame-ancestors") == ["'none'"], what
    # Only the server's own origin, or nothing at all (a page with no script).
    own = (["'self'"], ["'none'"])
    scripts = found.get("script-src") or fallback
    assert scripts in own, f"{what}: scripts from {scripts}"
    connect = found.get("connect-src") or fallback
    assert connect in own, f"{what}: connections to {connect}"
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy, what
    assert "*" not in policy and "http:" not in policy and "blob:" not in policy, what


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Starlette, str, Seed]]:
    seed = asyncio.run(seed_database(tmp_path_factory.mktemp("csp") / "data"))
    with in_background_thread(lambda: inprocess_server(seed)) as (app, url):
        yield app, url, seed


@pytest.fixture(scope="module")
def base(served: tuple[Starlette, str, Seed]) -> tuple[str, Seed]:
    _app, url, seed = served
    return url, seed


def test_the_policy_itself_is_strict() -> None:
    assert_strict(POLICY, "the policy")


@pytest.mark.parametrize(
    "path",
    [
        "/",
        f"/vnc/{SESSION}/{TOKEN}/",
        "/login/rdl_not-a-valid-link",
        "/no/such/page",
        "/app/index.html",
        "/favicon.ico",
        "/viewer/viewer.js",
        "/novnc/core/rfb.js",
        "/novnc/vnc.html",
        "/api/v1/me",
        "/healthz",
    ],
)
def test_pages_and_error_pages_carry_the_policy(base: tuple[str, Seed], path: str) -> None:
    url, _ = base
    response = httpx.get(url + path, timeout=scaled(10))
    assert_strict(response.headers.get("content-security-policy"), f"GET {path}")
    assert len(response.headers.get_list("content-security-policy")) == 1


def test_html_answers_are_all_covered(base: tuple[str, Seed]) -> None:
    url, _ = base
    for path in ("/", f"/vnc/{SESSION}/{TOKEN}/", "/login/rdl_x"):
        response = httpx.get(url + path, timeout=scaled(10))
        assert response.headers["content-type"].startswith("text/html"), path
        assert_strict(response.headers.get("content-security-policy"), path)


@pytest.mark.parametrize(("method", "template"), ROUTES)
def test_every_route_answers_with_the_policy(
    base: tuple[str, Seed], method: str, template: str
) -> None:
    url, seed = base
    path = re.sub(r"\{[^}]+\}", "x", template)
    for headers in ({}, {"Authorization": f"Bearer {seed.api_token}"}):
        response = httpx.request(method, url + path, headers=headers, timeout=scaled(10))
        assert_strict(response.headers.get("content-security-policy"), f"{method} {path}")


def test_a_request_the_boundary_refuses_carries_the_policy(base: tuple[str, Seed]) -> None:
    url, _ = base
    response = httpx.get(url + "/", headers={"Host": "evil.example"}, timeout=scaled(10))
    assert response.status_code == 400
    assert_strict(response.headers.get("content-security-policy"), "foreign Host")


async def _failing(request: Request) -> Response:
    raise RuntimeError("a handler's own bug")


def test_the_plain_text_500_carries_the_policy(served: tuple[Starlette, str, Seed]) -> None:
    """Starlette's outermost error middleware answers a handler's uncaught exception itself:
    that answer is covered too."""
    app, url, _ = served
    app.router.routes.append(Route("/csp-test-failure", _failing))
    response = httpx.get(url + "/csp-test-failure", timeout=scaled(10))
    assert response.status_code == 500
    assert response.headers["content-type"].startswith("text/plain")
    assert_strict(response.headers.get("content-security-policy"), "a 500")
    assert len(response.headers.get_list("content-security-policy")) == 1


class InlineFinder(HTMLParser):
    """Everything in a page a strict policy would block."""

    def __init__(self) -> None:
        super().__init__()
        self.blocked: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {name for name, _ in attrs}
        if tag == "script" and "src" not in names:
            self.blocked.append("inline <script>")
        if tag == "style":
            self.blocked.append("<style> element")
        self.blocked += [f"{tag} {n}=" for n in names if n.startswith("on") or n == "style"]
        hrefs = [v or "" for n, v in attrs if n in ("href", "src")]
        self.blocked += [f"{tag} {v}" for v in hrefs if v.lower().startswith("javascript:")]


@pytest.mark.parametrize("page", [web_dir() / "index.html", VIEWER_DIR / "index.html"])
def test_the_pages_hold_nothing_the_policy_blocks(page: Path) -> None:
    finder = InlineFinder()
    finder.feed(page.read_text())
    assert finder.blocked == []
