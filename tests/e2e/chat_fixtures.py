"""Fixtures for the chat browser tests: one server + relay per module, Chromium, signed-in pages."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    Request,
    Response,
    ViewportSize,
)
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from tests.e2e.viewer_stack import ViewerStack, viewer_stack
from tests.support.browser import chromium
from tests.support.processes import scaled

VIEWPORT: ViewportSize = {"width": 1280, "height": 800}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chat_stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    async with viewer_stack(tmp_path_factory.mktemp("chat-e2e")) as stack:
        yield stack


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as browser:
        yield browser


@pytest_asyncio.fixture(loop_scope="module")
async def context(browser: Browser, chat_stack: ViewerStack) -> AsyncIterator[BrowserContext]:
    context = await browser.new_context(viewport=VIEWPORT)
    await context.grant_permissions(["clipboard-read", "clipboard-write"], origin=chat_stack.url)
    context.set_default_timeout(scaled(15) * 1000)
    yield context
    await context.close()


async def sign_in(page: Page, stack: ViewerStack) -> None:
    """Through the login form, as the seeded user. A form that never shows fails naming what
    the page saw: its view, console errors, failed requests and the answers it got."""
    seen: list[str] = []
    started = time.monotonic()

    def note(what: str) -> None:
        seen.append(f"{time.monotonic() - started:.2f}s {what}")

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            note(f"console: {message.text}")

    def failed(request: Request) -> None:
        note(f"failed: {request.url} {request.failure}")

    def answered(response: Response) -> None:
        note(f"{response.status} {response.url}")

    page.on("console", console)
    page.on("requestfailed", failed)
    page.on("response", answered)
    await page.goto(stack.url + "/")
    try:
        await page.wait_for_selector("body[data-view='login']", timeout=scaled(30) * 1000)
    except PlaywrightTimeoutError:
        view = await page.evaluate("document.body.dataset.view")
        raise AssertionError(f"the login form never showed (view {view!r}); seen: {seen}") from None
    finally:  # the page's later life is the test's, not the login's
        page.remove_listener("console", console)
        page.remove_listener("requestfailed", failed)
        page.remove_listener("response", answered)
    await page.get_by_label("Username").fill(stack.seed.user["username"])
    await page.get_by_label("Password").fill(stack.seed.user["password"])
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_selector("body[data-view='app']")
    await page.wait_for_selector("#conversation-title:has-text('Team')")


@pytest_asyncio.fixture(loop_scope="module")
async def chat_page(context: BrowserContext, chat_stack: ViewerStack) -> Page:
    page = await context.new_page()
    await sign_in(page, chat_stack)
    return page


async def send(page: Page, text: str) -> None:
    composer = page.get_by_label("Message", exact=True)
    await composer.fill(text)
    await composer.press("Enter")


async def last_result(page: Page, outcome: str | None = None) -> Any:
    selector = "#transcript .message-result"
    if outcome:
        selector += f"[data-outcome='{outcome}']"
    locator = page.locator(selector).last
    await locator.wait_for()
    return locator


async def api_action(stack: ViewerStack, name: str, **args: Any) -> tuple[int, Any]:
    """A typed action as a second client (bearer token), answer as it is."""
    body = {"conversation_id": stack.seed.conversation_id, **args}
    headers = {"Authorization": f"Bearer {stack.seed.api_token}"}
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(30)) as client:
        response = await client.post(f"/api/v1/actions/{name}", json=body, headers=headers)
    return response.status_code, response.json()


async def shot(page: Page, folder: Path, name: str) -> None:
    await page.screenshot(path=folder / f"{name}.png")
