"""A relay started with RELAYDESK_BROWSER_EVALUATE=1 and RELAYDESK_BROWSER_ALLOW_FILE=1:
``browser_evaluate``'s values come back as JSON, a throw is an error, and it is agent input
like any act; ``browser_open`` opens files of the desktop's home, and nothing outside it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import pytest_asyncio

from tests.support.a11y_stack import A11yStack
from tests.support.browser_stack import browser_stack, form_tab_shown, page_server

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with page_server() as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory, base_url: str
) -> AsyncIterator[A11yStack]:
    env = {"RELAYDESK_BROWSER_EVALUATE": "1", "RELAYDESK_BROWSER_ALLOW_FILE": "1"}
    async with browser_stack(tmp_path_factory.mktemp("evaluate"), base_url, env=env) as stack:
        await form_tab_shown(stack)
        yield stack


async def test_values_come_back_as_json(stack):
    assert (await stack.ok("browser_evaluate", expression="document.title"))["value"] == (
        "Order form"
    )
    rows = await stack.ok("browser_evaluate", expression="document.querySelectorAll('tr').length")
    assert rows["value"] == 61
    awaited = await stack.ok("browser_evaluate", expression="Promise.resolve({a: [1, 2]})")
    assert awaited["value"] == {"a": [1, 2]}


async def test_a_throw_is_an_error_and_a_long_expression_is_refused(stack):
    status, body = await stack.act("browser_evaluate", expression="nope.nothing")
    assert (status, body["error"]["code"]) == (422, "action_failed"), body
    status, body = await stack.act("browser_evaluate", expression="1;" * 60_000)
    assert (status, body["error"]["field"]) == (400, "expression"), body


async def test_evaluate_waits_for_a_person_to_hand_back(stack):
    await stack.ok("desktop_take_control", person=True)
    try:
        status, body = await stack.act("browser_evaluate", expression="1")
        assert (status, body["error"]["code"]) == (423, "takeover_active"), body
    finally:
        await stack.ok("desktop_hand_back", person=True)
    assert (await stack.ok("browser_evaluate", expression="6 * 7"))["value"] == 42


async def test_files_of_the_home_open_and_nothing_else(stack):
    page = "<!doctype html><title>Home page</title><h1>From the home</h1>"
    await stack.ok("desktop_file_write", path="site/page.html", content=page)
    opened = await stack.ok("browser_open", url="file:~/site/page.html")
    assert opened["tab"]["title"] == "Home page", opened
    url = opened["tab"]["url"]
    assert url.startswith("file:///") and url.endswith("/site/page.html"), url
    home = Path(unquote(urlsplit(url).path)).parent.parent
    again = await stack.ok("browser_open", url=url)  # the absolute form
    assert again["tab"]["title"] == "Home page"
    # A link in the home that leads out of it is followed first, and refused.
    os.symlink("/etc/hostname", home / "site" / "escape.html")
    for outside in (
        "file:///etc/hostname",
        "file:~/site/escape.html",
        "file:~/../../etc/hostname",
        f"file://{home}/site/../../../etc/hostname",
    ):
        status, body = await stack.act("browser_open", url=outside)
        assert (status, body["error"]["field"]) == (400, "url"), (outside, body)
    status, body = await stack.act("browser_open", url="file:~/site/missing.html")
    assert (status, body["error"]["code"]) == (404, "not_found"), body
    tabs = (await stack.ok("browser_tabs"))["tabs"]
    assert [t["title"] for t in tabs] == ["Home page"], tabs  # nothing else was opened
