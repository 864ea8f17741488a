"""OpenAI's ``current_url`` from the desktop's own Chromium: a page served over HTTP by the
test, opened in a real Chromium on a real desktop, and navigated through the door itself."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.support.a11y_stack import A11yStack, a11y_stack, chromium_app
from tests.support.processes import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

PAGES = {
    "/first.html": "<!doctype html><title>first page</title><h1>First</h1>",
    "/second.html": "<!doctype html><title>second page</title><h1>Second</h1>",
}


class _Pages(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        page = PAGES.get(self.path)
        body = (page or "not found").encode()
        self.send_response(200 if page else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _served() -> Iterator[str]:
    """The pages over HTTP on a free loopback port; their base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=scaled(10))


class Browser:
    def __init__(self, stack: A11yStack, base: str) -> None:
        self.stack, self.base = stack, base
        cid = stack.seed.conversation_id
        self.door = (
            f"{stack.url}/api/v1/conversations/{cid}/computer-use/openai/relay-1/virtual/main"
        )

    async def call(self, **item: Any) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.stack.seed.api_token}"}
        async with httpx.AsyncClient(timeout=scaled(60)) as http_client:
            response = await http_client.post(self.door, json=item, headers=headers)
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        assert "is_error" not in answer, answer
        return answer

    async def url_shown(self, expected: str) -> dict[str, Any]:
        """Screenshots through the door until ``current_url`` is ``expected`` (the page loads)."""
        deadline = time.monotonic() + scaled(30)
        while True:
            item = await self.call(type="computer_call", call_id="c", action={"type": "screenshot"})
            if item["output"].get("current_url") == expected or time.monotonic() > deadline:
                return item
            await asyncio.sleep(0.3)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Browser]:
    with _served() as base:
        command = chromium_app(Path("{shared}"), "current-url", "--force-renderer-accessibility")
        command = f"{command.rsplit(' ', 1)[0]} {base}/first.html"
        async with a11y_stack(tmp_path_factory.mktemp("cu-browser"), [command]) as stack:
            yield Browser(stack, base)


async def test_the_pages_url_comes_with_the_screenshot(browser):
    item = await browser.url_shown(f"{browser.base}/first.html")
    assert item["output"]["current_url"] == f"{browser.base}/first.html", item["output"].keys()
    assert item["output"]["type"] == "computer_screenshot" and item["call_id"] == "c"


async def test_a_page_the_model_opens_is_the_next_url(browser):
    await browser.url_shown(f"{browser.base}/first.html")
    await browser.call(action={"type": "keypress", "keys": ["CTRL", "L"]})
    await browser.call(action={"type": "type", "text": f"{browser.base}/second.html"})
    await browser.call(action={"type": "keypress", "keys": ["ENTER"]})
    item = await browser.url_shown(f"{browser.base}/second.html")
    assert item["output"]["current_url"] == f"{browser.base}/second.html"
