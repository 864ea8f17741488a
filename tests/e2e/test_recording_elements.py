"""A recorded desktop's timeline names the element each accessibility and browser act was on:
the agent clicks a button of the desktop's Chromium through the accessibility tool (AT-SPI)
and through the browser tool, fills a field, and the timeline and the web app's event list
show each act with the element's role and accessible name, never the text typed
(docs/recording.md)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import expect

from tests.e2e.chat_fixtures import sign_in
from tests.support.a11y_stack import A11yStack
from tests.support.browser import chromium
from tests.support.browser_stack import browser_stack, form_tab_shown, page_server
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

TYPED = "Ada Lovelace"


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with page_server() as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory, base_url: str
) -> AsyncIterator[A11yStack]:
    async with browser_stack(tmp_path_factory.mktemp("rec-elements"), base_url) as stack:
        await form_tab_shown(stack)
        yield stack


def ref_of(text: str, line_part: str) -> str:
    for line in text.splitlines():
        if line_part in line:
            return str(line.split()[0])
    raise AssertionError(f"{line_part!r} not in:\n{text}")


async def atspi_button(stack: A11yStack, name: str) -> str:
    """The page's button as the accessibility bus shows it (Chromium's tree comes up late)."""
    found: dict[str, Any] = {}

    async def listed() -> bool:
        nonlocal found
        status, found = await stack.act(
            "desktop_find", selector=f'push_button[name="{name}"]', backend="atspi"
        )
        return status == 200 and found["count"] == 1

    await wait_until(listed, scaled(60), f"the button {name!r} on the accessibility bus")
    match = found["matches"][0]
    assert match["backend"] == "atspi" and not match["ref"].startswith("@b"), match
    return str(match["ref"])


async def timeline(stack: A11yStack, recording_id: str) -> list[dict[str, Any]]:
    path = f"/api/v1/conversations/{stack.seed.conversation_id}/recordings/{recording_id}"
    headers = {"Authorization": f"Bearer {stack.seed.api_token}"}
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(60)) as client:
        response = await client.get(path, headers=headers)
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()["timeline"]
    return events


async def test_the_timeline_names_the_element_of_each_act(stack):
    on = await stack.ok("desktop_record", on=True, desktop_session_id=stack.session_id)
    recording_id = on["recording_id"]
    # The accessibility tool, over AT-SPI.
    hover = await atspi_button(stack, "Hover for a tip")
    clicked = await stack.ok("desktop_click", ref=hover)
    assert (clicked["role"], clicked["name"]) == ("push_button", "Hover for a tip"), clicked
    # The browser tool.
    page = (await stack.ok("browser_snapshot"))["text"]
    filled = await stack.ok("browser_fill", ref=ref_of(page, '"Customer"'), text=TYPED)
    assert filled["value"] == TYPED, filled
    placed = await stack.ok("browser_click", ref=ref_of(page, '"Place order"'))
    assert placed["name"] == "Place order", placed
    await stack.ok("browser_wait", **{"for": "selector"}, value=f'"Ordered: {TYPED}"')
    await stack.ok("desktop_record", on=False, desktop_session_id=stack.session_id)

    events = await timeline(stack, recording_id)
    by_name = {e["name"]: e for e in events}
    a11y = by_name["desktop.a11y.click"]
    assert a11y["element"] == {"role": "push_button", "name": "Hover for a tip"}, a11y
    assert a11y["kind"] == "agent_action" and a11y["summary"]["action"] == "click", a11y
    browser = by_name["desktop.browser.click"]
    assert browser["element"] == {"role": "push_button", "name": "Place order"}, browser
    fill = by_name["desktop.browser.fill"]
    assert fill["element"] == {"role": "entry", "name": "Customer"}, fill
    assert fill["summary"]["text_length"] == len(TYPED), fill
    assert "Ada" not in json.dumps(events), "typed text never reaches the timeline"

    # The web app's event list says what was acted on.
    async with chromium() as browser_app:
        page_app = await browser_app.new_page()
        await sign_in(page_app, stack)  # its url and seed are all it reads
        await page_app.get_by_role("button", name="Recordings").click()
        await page_app.locator(f".rec-item[data-id='{recording_id}']").click()
        shown = page_app.locator(".rec-event .rec-element")
        await expect(shown.filter(has_text="click push_button “Place order”")).to_have_count(1)
        await expect(shown.filter(has_text="click push_button “Hover for a tip”")).to_have_count(1)
        await expect(shown.filter(has_text="fill entry “Customer”")).to_have_count(1)
        await page_app.close()
