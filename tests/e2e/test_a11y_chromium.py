"""The accessibility tools on real Chromium: a test page with a form and a 50-row table, read
and driven over the desktop's accessibility bus; and a Chromium started without the
accessibility flag (on a desktop of its own), which must be diagnosed, not answered with an
empty tree."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.support.a11y_stack import A11yStack, a11y_stack, chromium_app
from tests.support.processes import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

PAGE = "relaydesk test page - Chromium"
PLAIN = "plain page - Chromium"
SHARED = Path("{shared}")  # replaced by the stack with its shared directory


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[A11yStack]:
    apps = [chromium_app(SHARED, "with", "--force-renderer-accessibility")]
    async with a11y_stack(tmp_path_factory.mktemp("chromium"), apps) as stack:
        await _window(stack, PAGE)
        yield stack


async def _window(stack: A11yStack, title: str) -> dict[str, Any]:
    deadline = time.monotonic() + scaled(60)
    while True:
        listed = await stack.ok("desktop_apps")
        for app in listed["running"]:
            for window in app["windows"]:
                if window["name"] == title:
                    found: dict[str, Any] = window
                    return found
        assert time.monotonic() < deadline, listed
        await asyncio.sleep(0.3)


async def _observed(stack: A11yStack, needle: str) -> dict[str, Any]:
    """Observe the page until ``needle`` shows (the renderer fills its tree after load)."""
    deadline = time.monotonic() + scaled(30)
    while True:
        seen = await stack.ok("desktop_observe", window=PAGE, max_nodes=1000)
        if needle in seen["text"]:
            return seen
        assert time.monotonic() < deadline, seen["text"]
        await asyncio.sleep(0.3)


async def test_the_page_form_and_table_are_observed(stack):
    seen = await _observed(stack, 'push_button "Place order"')
    text = seen["text"]
    for expected in (
        'entry "Customer"',
        'check_box "Gift wrap"',
        'push_button "Place order"',
        'table "Items"',
        'table_cell "Item 1"',
        'heading "Order form"',
    ):
        assert expected in text, text
    # rows below the fold are not showing: they are not listed
    assert 'table_cell "Item 50"' not in text
    # a cell's text leaf only repeats the cell: not listed twice
    assert 'static "Item 1"' not in text


async def test_find_reaches_rows_below_the_fold_and_scrolls_them_into_view(stack):
    await _observed(stack, 'table "Items"')
    found = await stack.ok("desktop_find", selector='table_cell[name="Item 50"]', window=PAGE)
    assert found["count"] == 1, found
    cell = found["matches"][0]
    assert "showing" not in (await stack.ok("desktop_read", ref=cell["ref"]))["states"]
    scrolled = await stack.ok("desktop_scroll", ref=cell["ref"], into_view=True)
    assert scrolled["method"] == "native"
    shown = await stack.ok(
        "desktop_wait",
        selector='table_cell[name="Item 50"]:visible',
        window=PAGE,
        condition="visible",
        timeout_ms=10000,
    )
    assert shown["satisfied"] is True
    # back to the top for the tests that follow
    button = await stack.ok("desktop_find", selector='button[name="Place order"]', window=PAGE)
    await stack.ok("desktop_scroll", ref=button["matches"][0]["ref"], into_view=True)
    await stack.ok(
        "desktop_wait",
        selector='button[name="Place order"]',
        window=PAGE,
        condition="visible",
        timeout_ms=10000,
    )


async def test_typing_into_a_chromium_field_is_physical_and_confirmed(stack):
    await _observed(stack, 'push_button "Place order"')
    found = await stack.ok("desktop_find", selector='entry[name="Customer"]', window=PAGE)
    assert found["count"] == 1, found
    typed = await stack.ok("desktop_type", ref=found["matches"][0]["ref"], text="Ada Lovelace")
    assert typed["method"] == "physical" and typed["confirmed"] is True, str(typed)
    button = await stack.ok("desktop_find", selector='button[name="Place order"]', window=PAGE)
    clicked = await stack.ok("desktop_click", ref=button["matches"][0]["ref"])
    assert clicked["method"] == "native"
    done = await stack.ok(
        "desktop_wait", selector='"Ordered: Ada Lovelace"', window=PAGE, timeout_ms=10000
    )
    assert done["satisfied"] is True


async def test_chromium_without_the_flag_is_diagnosed(tmp_path_factory):
    # relaydesk's desktops turn accessibility on for every app (the bus's IsEnabled, which
    # Chromium reads too): only a browser that turns its renderer's off lacks the page's tree.
    plain = chromium_app(
        SHARED, "without", "--disable-renderer-accessibility", page="a11y_plain.html"
    )

    async with a11y_stack(tmp_path_factory.mktemp("plain"), [plain]) as stack:
        await _window(stack, PLAIN)
        deadline = time.monotonic() + scaled(10)
        while True:  # the page loads; its document stays empty
            status, body = await stack.act("desktop_observe", window=PLAIN)
            if status != 200 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
    assert status == 503, body
    assert body["error"]["code"] == "a11y_unavailable"
    assert "--force-renderer-accessibility" in body["error"]["message"]
