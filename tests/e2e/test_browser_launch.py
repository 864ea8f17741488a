"""A browser started with ``desktop_launch`` gets the private DevTools channel too: before it
runs the browser tools say there is no browser; after, they drive it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from tests.support.a11y_stack import A11yStack, a11y_stack
from tests.support.browser_stack import page_server
from tests.support.processes import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

PROFILE = """
description = "A browser, started on request"
packages = ["chromium"]
requires = ["chromium"]
start = []

[[apps]]
id = "chromium"
name = "Chromium"
icon = "chromium"
exec = ["chromium", "--user-data-dir={home}/.config/test-chromium", "--no-first-run",
        "--no-default-browser-check", "--password-store=basic", "--disable-gpu", "about:blank"]
"""


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with page_server() as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[A11yStack]:
    profiles = tmp_path_factory.mktemp("profiles")
    (profiles / "on-request.toml").write_text(PROFILE, encoding="utf-8")
    env = {"RELAYDESK_DESKTOP_PROFILES_DIR": str(profiles), "RELAYDESK_DESKTOP_APPS": ","}
    root = tmp_path_factory.mktemp("launch")
    async with a11y_stack(root, [], env=env, profile="on-request") as stack:
        yield stack


async def test_a_launched_browser_is_driven_over_its_channel(stack, base_url):
    status, body = await stack.act("browser_tabs")
    assert (status, body["error"]["code"]) == (503, "unavailable"), body
    assert "desktop_launch" in body["error"]["message"]
    await stack.ok("desktop_launch", app="chromium", wait_s=0)
    deadline = time.monotonic() + scaled(60)
    while True:
        status, body = await stack.act("browser_tabs")
        if status == 200 and body["tabs"]:
            break
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.5)
    opened = await stack.ok("browser_open", url=f"{base_url}/second.html")
    assert opened["tab"]["title"] == "Second page"
    found = await stack.ok("browser_find", selector='push_button[name="Press me"]')
    await stack.ok("browser_click", ref=found["matches"][0]["ref"])
    await stack.ok("browser_wait", **{"for": "selector"}, value='push_button[name="Pressed"]')
