"""The accessibility tools on real Chromium started by the relay: a test page with a form and a
50-row table, its chrome read over the desktop's accessibility bus and its page over the
browser's DevTools channel (``backend: "cdp"``, docs/browser.md "Routing"); and a Chromium
started with its renderer's accessibility off (on a desktop of its own), whose page is read
all the same."""

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
    # the page comes from the browser's own tree, below the fold included
    assert 'table_cell "Item 50"' in text
    assert all(p["backend"] == "cdp" for p in seen["pages"]), seen["pages"]
    page_lines = [x for x in text.splitlines() if 'entry "Customer"' in x]
    assert page_lines[0].strip().startswith("@b"), text
    # a cell's text leaf only repeats the cell: not listed twice
    assert 'static "Item 1"' not in text


async def test_find_reaches_rows_below_the_fold_and_scrolls_them_into_view(stack):
    await _observed(stack, 'table "Items"')
    found = await stack.ok("desktop_find", selector='table_cell[name="Item 50"]', window=PAGE)
    assert found["count"] == 1, found
    cell = found["matches"][0]
    assert "showing" not in (await stack.ok("desktop_read", ref=cell["ref"]))["states"]
    scrolled = await stack.ok("desktop_scroll", ref=cell["ref"], into_view=True)
    assert (scrolled["method"], scrolled["backend"]) == ("cdp", "cdp"), scrolled
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


async def test_typing_into_a_chromium_field_goes_through_devtools_and_is_confirmed(stack):
    await _observed(stack, 'push_button "Place order"')
    found = await stack.ok("desktop_find", selector='entry[name="Customer"]', window=PAGE)
    assert found["count"] == 1 and found["backend"] == "cdp", found
    typed = await stack.ok("desktop_type", ref=found["matches"][0]["ref"], text="Ada Lovelace")
    assert typed["method"] == "cdp" and typed["confirmed"] is True, str(typed)
    button = await stack.ok("desktop_find", selector='button[name="Place order"]', window=PAGE)
    clicked = await stack.ok("desktop_click", ref=button["matches"][0]["ref"])
    assert clicked["method"] == "cdp" and clicked["effect"] == "changed", clicked
    done = await stack.ok(
        "desktop_wait", selector='"Ordered: Ada Lovelace"', window=PAGE, timeout_ms=10000
    )
    assert done["satisfied"] is True


async def test_chromium_without_renderer_accessibility_is_read_over_devtools(tmp_path_factory):
    # Over AT-SPI such a browser shows its window but not the page (the worker diagnoses it
    # for a browser without a DevTools channel); the relay's own browser is read over DevTools.
    plain = chromium_app(
        SHARED, "without", "--disable-renderer-accessibility", page="a11y_plain.html"
    )

    async with a11y_stack(tmp_path_factory.mktemp("plain"), [plain]) as stack:
        await _window(stack, PLAIN)
        deadline = time.monotonic() + scaled(30)
        while True:  # until the page has loaded into the browser's tree
            status, body = await stack.act("desktop_observe", window=PLAIN)
            if status == 200 and 'push_button "Hello"' in body["text"]:
                break
            assert time.monotonic() < deadline, body.get("text", body)
            await asyncio.sleep(0.5)
    assert [p["backend"] for p in body["pages"]] == ["cdp"], body
    hello = next(x for x in body["text"].splitlines() if 'push_button "Hello"' in x)
    assert hello.strip().startswith("@b"), body["text"]
