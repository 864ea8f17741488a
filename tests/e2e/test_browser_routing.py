"""The accessibility tools on the desktop's Chromium: the page content through its DevTools
channel (``backend: "cdp"``, browser refs), the browser's own chrome (tabs strip, address
bar) through AT-SPI; the element actions take either kind of ref."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from tests.support.a11y_stack import A11yStack
from tests.support.browser_stack import browser_stack, form_tab_shown, page_server
from tests.support.processes import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

WINDOW = "Order form - Chromium"


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with page_server() as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory, base_url: str
) -> AsyncIterator[A11yStack]:
    async with browser_stack(tmp_path_factory.mktemp("routing"), base_url) as stack:
        await form_tab_shown(stack)
        await _observed(stack)
        yield stack


async def _observed(stack: A11yStack, **args: Any) -> dict[str, Any]:
    """The browser's window observed, once its chrome is on the accessibility bus."""
    deadline = time.monotonic() + scaled(60)
    while True:
        status, seen = await stack.act("desktop_observe", window=WINDOW, max_nodes=1000, **args)
        if status == 200 and seen.get("pages"):
            return seen
        assert time.monotonic() < deadline, seen
        await asyncio.sleep(0.5)


def _ref(text: str, line_part: str) -> str:
    for line in text.splitlines():
        if line_part in line:
            return str(line.split()[0])
    raise AssertionError(f"{line_part!r} not in:\n{text}")


async def test_observe_reads_the_page_over_cdp_and_the_chrome_over_atspi(stack):
    seen = await _observed(stack, format="both")
    text = seen["text"]
    address = _ref(text, 'entry "Address and search bar"')
    assert not address.startswith("@b"), text  # the chrome: AT-SPI
    for page_part in ('push_button "Place order"', 'combo_box "Size"', 'table_cell "Item 60"'):
        assert _ref(text, page_part).startswith("@b"), text  # the page: the browser's tree
    assert [p["backend"] for p in seen["pages"]] == ["cdp"], seen["pages"]
    by_ref = {e["ref"]: e["backend"] for e in seen["elements"]}
    assert by_ref[address] == "atspi"
    assert by_ref[_ref(text, 'push_button "Place order"')] == "cdp"
    assert seen["nodes"] == len(text.splitlines()) == len(seen["elements"])
    # The page sits under the window, indented below it.
    page_line = next(x for x in text.splitlines() if 'document_web "Order form"' in x)
    assert page_line.startswith("  @b"), text


async def test_observe_keeps_its_budget(stack):
    status, cut = await stack.act("desktop_observe", window=WINDOW, max_nodes=30)
    assert status == 200, cut
    assert cut["nodes"] == len(cut["text"].splitlines()) <= 30, cut["text"]
    assert cut["truncated"]["budget"] is True, cut


async def test_find_serves_the_address_bar_by_atspi_and_the_page_by_cdp(stack):
    bar = await stack.ok("desktop_find", selector='entry[name="Address and search bar"]')
    assert bar["count"] == 1 and bar["backend"] == "atspi", bar
    assert bar["matches"][0]["backend"] == "atspi" and not bar["matches"][0]["ref"].startswith("@b")
    button = await stack.ok("desktop_find", selector='push_button[name="Place order"]')
    assert button["count"] == 1 and button["backend"] == "cdp", button
    assert button["matches"][0]["ref"].startswith("@b"), button


async def test_element_actions_take_page_refs(stack, base_url):
    seen = await _observed(stack)
    customer = _ref(seen["text"], 'entry "Customer"')
    typed = await stack.ok("desktop_type", ref=customer, text="Ada")
    assert typed["backend"] == "cdp" and typed["confirmed"] is True, typed
    appended = await stack.ok("desktop_type", ref=customer, text=" L", mode="append")
    assert appended["text"] == "Ada L", appended
    read = await stack.ok("desktop_read", ref=customer)
    assert (read["backend"], read["role"], read["value"]) == ("cdp", "entry", "Ada L"), read
    clicked = await stack.ok("desktop_click", ref=_ref(seen["text"], 'push_button "Place order"'))
    assert (clicked["backend"], clicked["method"], clicked["effect"]) == (
        "cdp",
        "cdp",
        "changed",
    ), clicked
    await stack.ok("browser_wait", **{"for": "selector"}, value='"Ordered: Ada L"')
    scrolled = await stack.ok("desktop_scroll", ref=_ref(seen["text"], 'table_cell "Item 60"'))
    assert scrolled["backend"] == "cdp" and scrolled["effect"] == "changed", scrolled
    await stack.ok("desktop_focus", ref=customer)
    pressed = await stack.ok("desktop_key", ref=customer, keys="ctrl+a")
    assert pressed["backend"] == "cdp", pressed
    # The chrome's refs still work through AT-SPI.
    bar = await stack.ok("desktop_read", ref=_ref(seen["text"], 'entry "Address and search bar"'))
    assert bar["backend"] == "atspi" and "form.html" in str(bar.get("value")), bar


async def test_a_page_ref_gone_is_stale(stack, base_url):
    seen = await _observed(stack)
    gift = _ref(seen["text"], 'check_box "Gift wrap"')
    await stack.ok("browser_open", url=f"{base_url}/second.html")
    try:
        status, body = await stack.act("desktop_click", ref=gift)
        assert (status, body["error"]["code"]) == (409, "stale_ref"), body
    finally:
        await stack.ok("browser_open", url=f"{base_url}/form.html")


async def test_wait_sees_a_page_element_arrive_over_cdp_and_the_chrome_over_atspi(stack, base_url):
    await stack.ok("browser_open", url=f"{base_url}/late.html")  # its button comes 0.8 s later
    try:
        waited = await stack.ok(
            "desktop_wait", selector='push_button[name="Arrived"]', timeout_ms=10000
        )
        assert waited["satisfied"] is True and waited["backend"] == "cdp", waited
        assert waited["matches"][0]["ref"].startswith("@b"), waited
        pressed = await stack.ok("desktop_click", ref=waited["matches"][0]["ref"])
        assert pressed["backend"] == "cdp", pressed
        bar = await stack.ok(
            "desktop_wait", selector='entry[name="Address and search bar"]', timeout_ms=5000
        )
        assert bar["backend"] == "atspi" and bar["matches"][0]["backend"] == "atspi", bar
        status, body = await stack.act(
            "desktop_wait", selector='push_button[name="Never there"]', timeout_ms=500
        )
        assert body["error"]["code"] == "timeout" and body["error"]["checks"] >= 1, body
        assert status == 504, body
        gone = await stack.ok(
            "desktop_wait", selector='push_button[name="Never there"]', condition="gone"
        )
        assert gone["satisfied"] is True and gone["checks"] == 1, gone
    finally:
        await stack.ok("browser_open", url=f"{base_url}/form.html")
