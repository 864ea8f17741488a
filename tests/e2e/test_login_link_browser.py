"""One-time login links in headless Chromium against a real server: another site that sends
the browser to an attacker's link, or posts it, leaves the victim's session as it was; a person
who opens a link and presses Sign in is signed in (no JavaScript needed).

The attacker's page is served by a second HTTP server at ``http://localhost:<port>``; relaydesk
answers at ``http://127.0.0.1:<port>``: another host, so another site to the browser.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio
from aiohttp import web
from playwright.async_api import Browser, BrowserContext, Page

from server import admin
from server.db.store import Store
from tests.support.browser import chromium
from tests.support.processes import free_port, scaled
from tests.support.stack import Seed, inprocess_server, seed_database

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

PASSWORD = "correct horse battery staple"


@dataclass
class Site:
    seed: Seed
    base: str

    async def link(self, username: str) -> str:
        store = await Store.open(self.seed.database_url)
        try:
            made = await admin.login_link(store, username, ttl_s=600, base_url=self.base)
        finally:
            await store.close()
        return str(made["login_url"])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def site(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Site]:
    seed = await seed_database(tmp_path_factory.mktemp("login-links") / "data")
    store = await Store.open(seed.database_url)
    try:
        await admin.set_password(store, "alice", PASSWORD)
        await admin.create_user(store, "mallory")
    finally:
        await store.close()
    async with inprocess_server(seed) as (_app, base):
        yield Site(seed, base)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as browser:
        yield browser


@pytest_asyncio.fixture(loop_scope="module")
async def context(browser: Browser) -> AsyncIterator[BrowserContext]:
    context = await browser.new_context()
    context.set_default_timeout(scaled(15) * 1000)
    yield context
    await context.close()


@contextlib.asynccontextmanager
async def attacker_site(html: str) -> AsyncIterator[str]:
    """``html`` served at ``http://localhost:<port>/`` (another site than relaydesk's)."""

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=html, content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://localhost:{port}/"
    finally:
        await runner.cleanup()


async def signed_in_as(context: BrowserContext, site: Site) -> str | None:
    """Who the context's cookies sign in (``None``: nobody)."""
    me = await context.request.get(site.base + "/api/v1/me")
    if me.status != 200:
        return None
    username: str = (await me.json())["user"]["username"]
    return username


async def sign_in_victim(context: BrowserContext, site: Site) -> None:
    """Alice signs in with her password (the browser context's cookie jar keeps the session)."""
    body = {"username": "alice", "password": PASSWORD}
    signed_in = await context.request.post(site.base + "/api/v1/login", data=body)
    assert signed_in.status == 200, await signed_in.text()


async def follow_link(page: Page, link: str) -> None:
    """What a person does: open the link, press Sign in, land in the app."""
    await page.goto(link)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url("**/")


async def test_a_person_who_opens_the_link_and_presses_sign_in_is_signed_in(
    context: BrowserContext, site: Site
) -> None:
    page = await context.new_page()
    await page.goto(await site.link("alice"))
    assert await signed_in_as(context, site) is None, "opening the link signs nobody in"
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(site.base + "/")
    assert await signed_in_as(context, site) == "alice"


async def test_another_site_sending_the_browser_to_a_link_changes_no_session(
    context: BrowserContext, site: Site
) -> None:
    await sign_in_victim(context, site)
    page = await context.new_page()
    mallorys = await site.link("mallory")
    script = f"<script>location.href = {mallorys!r};</script>"
    async with attacker_site(script) as attacker:
        await page.goto(attacker)
        await page.wait_for_url(lambda url: url.startswith(site.base))
    assert await signed_in_as(context, site) == "alice", "the victim's session is unchanged"
    assert page.url == mallorys
    assert await page.get_by_text("Another site sent you here").is_visible()

    # The link was not spent: its owner can still use it (in a browser of their own).
    other = await context.browser.new_context()  # type: ignore[union-attr]
    try:
        await follow_link(await other.new_page(), mallorys)
        assert await signed_in_as(other, site) == "mallory"
    finally:
        await other.close()


async def test_another_site_posting_a_link_changes_no_session(
    context: BrowserContext, site: Site
) -> None:
    await sign_in_victim(context, site)
    page = await context.new_page()
    mallorys = await site.link("mallory")
    form = (
        f'<form method=post action="{mallorys}"><button>go</button></form>'
        "<script>document.forms[0].submit();</script>"
    )
    async with attacker_site(form) as attacker:
        async with page.expect_response(mallorys) as posted:
            await page.goto(attacker)
        assert (await posted.value).status == 403
    assert await signed_in_as(context, site) == "alice", "the victim's session is unchanged"
