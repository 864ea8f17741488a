"""The dock's operator line: an admin account sees the relay's warm pool, and it follows a
start that takes a pooled desktop; a member who is no operator never sees it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, Page, expect

from server import admin
from tests.e2e import chat_fixtures
from tests.e2e.chat_fixtures import VIEWPORT, api_action, sign_in
from tests.e2e.viewer_stack import ViewerStack, viewer_stack
from tests.support.processes import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

browser = chat_fixtures.browser
POOL_ENV = {"RELAYDESK_POOL": "minimal=1", "RELAYDESK_DESKTOP_PROFILE": "minimal"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool_stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    async with viewer_stack(tmp_path_factory.mktemp("dock-pool"), POOL_ENV) as stack:
        yield stack


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Browser, pool_stack: ViewerStack) -> AsyncIterator[Page]:
    context: BrowserContext = await browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(scaled(15) * 1000)
    page = await context.new_page()
    yield page
    await context.close()


async def test_an_operator_sees_the_pool_in_the_dock(page: Page, pool_stack: ViewerStack) -> None:
    await sign_in(page, pool_stack)
    await page.locator("#dock-button").click()
    line = page.locator("#dock-pool")
    await expect(line).to_have_text(
        "Warm pool on relay-1: minimal 1/1 ready (0 hits, 0 misses)", timeout=scaled(40) * 1000
    )
    status, body = await api_action(pool_stack, "desktop_start", profile="minimal")
    assert status == 200 and body["from_pool"] is True, body
    await expect(line).to_contain_text("(1 hits, 0 misses)", timeout=scaled(20) * 1000)
    row = body["desktop"]
    status, body = await api_action(
        pool_stack,
        "desktop_stop_confirm",
        relay="relay-1",
        slot=row["slot"],
        desktop_session_id=row["desktop_session_id"],
    )
    assert status == 200, body


async def test_a_member_who_is_no_operator_sees_no_pool(
    page: Page, pool_stack: ViewerStack
) -> None:
    store = pool_stack.app.state.parts.store
    bob = await admin.create_user(store, "bob", "a-password-for-bob-0123")
    await admin.share_relay(
        store,
        "relay-1",
        (await admin.create_conversation(store, "Bob's", ["bob:write"]))["conversation_id"],
    )
    await page.goto(pool_stack.url + "/")
    await page.get_by_label("Username").fill("bob")
    await page.get_by_label("Password").fill(bob["password"])
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_selector("body[data-view='app']")
    await page.locator("#dock-button").click()
    await expect(page.locator("#dock-empty")).to_be_visible()
    await expect(page.locator("#dock-pool")).to_be_hidden()
