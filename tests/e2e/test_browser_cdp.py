"""The browser's CDP endpoint: Playwright from PyPI connects through the server to the very
Chromium the desktop shows (``connect_over_cdp``), fills and submits a form the person then
sees; members only, role write; a person's takeover refuses what acts while reads go on; what
would end the browser is refused; bad messages close the connection with a reason; Stop closes
it; connect, disconnect and refusals are audit rows."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
import websockets
from playwright.async_api import Browser, Error, Page, async_playwright

from server import admin
from tests.support.a11y_stack import A11yStack
from tests.support.browser_stack import browser_stack, form_tab_shown, page_server
from tests.support.processes import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

WINDOW = "Order form - Chromium"
REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "playwright_agent.py"
BROWSER_USE_DRIVER = REPO_ROOT / "tests" / "browser_use" / "agent_driver.py"


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with page_server() as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory, base_url: str
) -> AsyncIterator[A11yStack]:
    env = {"RELAYDESK_BROWSER_EVALUATE": "1"}
    root = tmp_path_factory.mktemp("cdp")
    flag = "--force-renderer-accessibility"
    async with browser_stack(root, base_url, flag, env=env) as stack:
        await form_tab_shown(stack)
        yield stack


def _base(stack: A11yStack, path: str = "") -> str:
    cid = stack.seed.conversation_id
    return f"{stack.url}/api/v1/conversations/{cid}/cdp/{stack.relay_id}/virtual/main{path}"


def _ws(stack: A11yStack) -> str:
    return "ws" + _base(stack).removeprefix("http")


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _member(stack: A11yStack, name: str, role: str | None) -> str:
    store = stack.app.state.parts.store
    user = await admin.create_user(store, name)
    if role is not None:
        await store.add_member(stack.seed.conversation_id, user["user_id"], role)
    token: str = (await admin.create_token(store, name))["token"]
    return token


@pytest_asyncio.fixture(loop_scope="module")
async def browser(stack: A11yStack) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        connected = await playwright.chromium.connect_over_cdp(
            _base(stack), headers=_auth(stack.seed.api_token), timeout=scaled(60) * 1000
        )
        try:
            yield connected
        finally:
            await connected.close()


def _form_page(browser: Browser) -> Page:
    pages = [p for c in browser.contexts for p in c.pages]
    return next(p for p in pages if p.url.endswith("/form.html"))


async def _ops(stack: A11yStack, prefix: str) -> list[Any]:
    rows = await stack.app.state.parts.store.list_audit()
    return [r for r in rows if r.op.startswith(prefix)]


async def test_discovery_points_back_to_the_servers_own_socket(stack):
    async with httpx.AsyncClient(timeout=scaled(30)) as client:
        answer = await client.get(
            _base(stack, "/json/version/"), headers=_auth(stack.seed.api_token)
        )
    assert answer.status_code == 200, answer.text
    assert answer.json()["webSocketDebuggerUrl"] == _ws(stack)


async def test_playwright_fills_the_form_the_person_sees(stack, browser, base_url):
    page = _form_page(browser)
    assert await page.title() == "Order form"
    await page.fill("#customer", "Ada")
    await page.click("button[type=submit]")
    assert await page.text_content("#result") == "Ordered: Ada"
    # The desktop's own window (its accessibility tree, as the person's browser shows it).
    seen = await stack.ok(
        "desktop_wait", selector='"Ordered: Ada"', window=WINDOW, timeout_ms=int(scaled(20) * 1000)
    )
    assert seen["satisfied"] is True
    # The relay's own tools on the same browser see it too, and still work beside Playwright.
    snapshot = await stack.ok("browser_snapshot", max_nodes=1000, view="all")
    assert "Ordered: Ada" in snapshot["text"]


async def test_the_playwright_example_runs(stack, base_url):
    command = [
        sys.executable,
        str(EXAMPLE),
        "--server",
        stack.url,
        "--conversation",
        stack.seed.conversation_id,
        "--relay",
        stack.relay_id,
        "--url",
        f"{base_url}/form.html",
        "--fill",
        "#customer=Grace",
        "--click",
        "button[type=submit]",
        "--read",
        "#result",
    ]
    env = {**os.environ, "RELAYDESK_API_TOKEN": stack.seed.api_token}
    child = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(child.communicate(), scaled(120))
    assert child.returncode == 0, err.decode()
    assert out.decode().splitlines() == ["title: Order form", "read: Ordered: Grace"]
    assert (await stack.ok("browser_tabs"))["tabs"][0]["title"] == "Order form"


async def test_browser_uses_agent_orders_in_the_browser_the_person_sees(stack, base_url):
    """browser-use's own Agent, configured as examples/browser_use_agent.py configures it, with
    a scripted model (the one seam faked: no model service runs here)."""
    python = REPO_ROOT / ".venv-browser-use" / "bin" / "python"
    assert python.exists(), f"{python} is missing: scripts/install builds it (Python >= 3.12)"
    before = await stack.ok("browser_tabs")
    command = [
        str(python),
        str(BROWSER_USE_DRIVER),
        stack.url,
        stack.seed.conversation_id,
        stack.relay_id,
        f"{base_url}/form.html",
    ]
    quiet = {"ANONYMIZED_TELEMETRY": "false", "BROWSER_USE_CLOUD_SYNC": "false"}
    env = {**os.environ, **quiet, "RELAYDESK_API_TOKEN": stack.seed.api_token}
    child = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(child.communicate(), scaled(120))
    assert child.returncode == 0, err.decode()[-4000:]
    answer = json.loads(out.decode().strip().splitlines()[-1])
    assert answer["actions"] == ["navigate", "input", "click", "done"], answer
    assert (answer["final"], answer["success"], answer["errors"]) == ("placed", True, []), answer
    # The person's browser shows the order, in the same tab, at the window's own size.
    seen = await stack.ok(
        "desktop_wait", selector='"Ordered: Ada"', window=WINDOW, timeout_ms=int(scaled(20) * 1000)
    )
    assert seen["satisfied"] is True, seen
    after = await stack.ok("browser_tabs")
    assert [t["id"] for t in after["tabs"]] == [t["id"] for t in before["tabs"]], after
    size = await stack.ok("browser_evaluate", expression="[innerWidth, outerWidth]")
    assert size["value"][0] <= size["value"][1] < 1900, size  # no 1920x1080 page emulated
    ops = [r.op for r in await _ops(stack, "desktop.browser.cdp_")]
    assert ops.count("desktop.browser.cdp_connect") >= 1, ops


async def test_connect_and_disconnect_are_audited(stack, browser):
    assert _form_page(browser)
    ops = [r.op for r in await _ops(stack, "desktop.browser.cdp_")]
    assert "desktop.browser.cdp_connect" in ops


async def test_a_non_member_and_a_read_member_are_refused(stack):
    stranger = await _member(stack, "cdp-stranger", None)
    reader = await _member(stack, "cdp-reader", "read")
    async with httpx.AsyncClient(timeout=scaled(30)) as client:
        for token, status in ((stranger, 404), (reader, 403), ("rdk_not-a-token", 401)):
            answer = await client.get(_base(stack, "/json/version"), headers=_auth(token))
            assert answer.status_code == status, answer.text
        answer = await client.get(_base(stack, "/json/version"))
        assert answer.status_code == 401
    for token, status in ((stranger, 404), (reader, 403)):
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with websockets.connect(_ws(stack), additional_headers=_auth(token)):
                pass
        assert refused.value.response.status_code == status


async def _raw(stack: A11yStack) -> Any:
    return websockets.connect(
        _ws(stack), additional_headers=_auth(stack.seed.api_token), max_size=None
    )


async def _call(socket: Any, message_id: int, method: str, **params: Any) -> dict[str, Any]:
    await socket.send(json.dumps({"id": message_id, "method": method, "params": params}))
    while True:
        answer: dict[str, Any] = json.loads(await asyncio.wait_for(socket.recv(), scaled(30)))
        if answer.get("id") == message_id:
            return answer


async def _drain(socket: Any) -> None:
    """Read until the connection closes (``ConnectionClosed``)."""
    while True:
        await asyncio.wait_for(socket.recv(), scaled(30))


async def test_what_would_end_the_browser_is_refused(stack):
    async with await _raw(stack) as socket:
        closed = await _call(socket, 1, "Browser.close")
        assert closed["error"]["message"].startswith("forbidden"), closed
        targets = await _call(socket, 2, "Target.getTargets")
        pages = [t for t in targets["result"]["targetInfos"] if t["type"] == "page"]
        assert len(pages) == 1, pages
        last = await _call(socket, 3, "Target.closeTarget", targetId=pages[0]["targetId"])
        assert "last tab" in last["error"]["message"], last
        version = await _call(socket, 4, "Browser.getVersion")
        assert "Chrome" in version["result"]["product"]
    assert (await stack.ok("browser_tabs"))["tabs"]
    refused = [r.reason for r in await _ops(stack, "desktop.browser.cdp_refused")]
    assert "Browser.close" in refused


@pytest.mark.parametrize(
    ("frame", "code", "reason"),
    [
        ("this is not json", 1007, "JSON"),
        ("[1, 2]", 1007, "object"),
        ('{"id": "one", "method": "Page.enable"}', 1007, "integer"),
        (b"\x00binary", 1003, "text"),
        ("x" * (9 * 1024 * 1024), 1009, "over"),
    ],
)
async def test_a_bad_message_closes_the_connection_with_a_reason(stack, frame, code, reason):
    async with await _raw(stack) as socket:
        await socket.send(frame)
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(socket.recv(), scaled(30))
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == code and reason in closed.value.rcvd.reason, closed.value
    # Nothing else is affected.
    assert (await stack.ok("browser_tabs"))["tabs"]


async def test_a_takeover_refuses_playwrights_click_while_its_screenshot_works(stack, browser):
    page = _form_page(browser)
    await stack.ok("desktop_take_control", person=True)
    try:
        with pytest.raises(Error, match="takeover_active"):
            await page.mouse.click(20, 20)
        shot = await page.screenshot()
        assert shot.startswith(b"\x89PNG")
        assert await page.title() == "Order form"
    finally:
        await stack.ok("desktop_hand_back", person=True)
    refused = await _ops(stack, "desktop.browser.cdp_refused")
    assert any(r.outcome == "takeover_active" for r in refused), refused


async def test_stop_closes_the_connection(stack):
    # Last: Stop refuses agent input for a while afterwards.
    async with await _raw(stack) as socket:
        assert "result" in await _call(socket, 1, "Browser.getVersion")
        await stack.ok("agent_stop", person=True)
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await _drain(socket)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4430, closed.value
    assert "stopped_by_user" in closed.value.rcvd.reason
    ops = [r.op for r in await _ops(stack, "desktop.browser.cdp_")]
    assert "desktop.browser.cdp_disconnect" in ops
