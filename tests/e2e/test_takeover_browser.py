"""People stay in charge, in headless Chromium against the real server, relay and desktop.

A person types in the viewer and an agent's click 50 ms later is refused (``takeover_active``)
while an X client on the desktop records only the person's keys; five seconds after the last
key the agent's click goes through. "Take control" holds past the idle time until "Hand back".
The control state reaches a second viewer and the dock within a second. "Stop agent" on the
dock ends a scripted agent's request in flight; its next action and a new grant inside the
cooldown are refused (``stopped_by_user``), after it a new grant works; each step is audited.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, Page
from playwright.async_api import TimeoutError as PlaywrightTimeout

from server import admin
from server.control.model import DesktopKey
from tests.e2e import viewer_pages
from tests.e2e.chat_fixtures import VIEWPORT, shot, sign_in
from tests.e2e.viewer_stack import Desktop, ViewerStack, viewer_stack
from tests.support.processes import scaled
from tests.support.stack import wait_until
from tests.support.xrecorder import XRecorder

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

IDLE_S = 5.0  # the default RELAYDESK_TAKEOVER_IDLE_S
COOLDOWN_S = 4.0  # RELAYDESK_AGENT_REGRANT_COOLDOWN_S, short for the test
POINT = (640, 400)
# Characters no keyboard layout maps: each batch is typed through remapped spare keycodes,
# so typing them keeps the agent's request in flight for a while.
SLOW_TEXT = "".join(chr(0x4E00 + i) for i in range(400))


class Agent:
    """An agent with its own API token (user ``bot``, role ``write``) driving the screen tool."""

    def __init__(self, stack: ViewerStack, token: str) -> None:
        self.stack = stack
        self.token = token

    async def screen(self, **body: Any) -> tuple[int, Any]:
        payload = {"conversation_id": self.stack.seed.conversation_id, **body}
        headers = {"Authorization": f"Bearer {self.token}"}
        async with httpx.AsyncClient(base_url=self.stack.url, timeout=scaled(60)) as client:
            response = await client.post("/api/v1/actions/screen", json=payload, headers=headers)
        return response.status_code, response.json()

    async def click(self) -> tuple[int, Any]:
        status, shot_ = await self.screen(action="screenshot", format="jpeg")
        assert status == 200, shot_
        x, y = POINT
        return await self.screen(
            action="click", x=x, y=y, expected_screen_revision=shot_["screen_revision"]
        )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    settings = {"agent_regrant_cooldown_s": COOLDOWN_S}
    async with viewer_stack(tmp_path_factory.mktemp("takeover"), server_settings=settings) as s:
        yield s


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def agent(stack: ViewerStack) -> Agent:
    store = stack.app.state.parts.store
    user = await admin.create_user(store, "bot")
    await store.add_member(stack.seed.conversation_id, user["user_id"], "write")
    return Agent(stack, (await admin.create_token(store, "bot"))["token"])


# The shared fixtures, made visible to this module's tests (the stack is this module's).
desktop = viewer_pages.desktop
browser = viewer_pages.browser
recorder = viewer_pages.recorder


@pytest_asyncio.fixture(loop_scope="module")
async def context(browser: Browser, stack: ViewerStack) -> AsyncIterator[BrowserContext]:
    context = await browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(scaled(15) * 1000)
    page = await context.new_page()
    await sign_in(page, stack)  # the viewer's buttons act with this browser's session
    await page.close()
    yield context
    await context.close()


@pytest_asyncio.fixture(loop_scope="module", autouse=True)
async def released(stack: ViewerStack, desktop: Desktop) -> AsyncIterator[None]:
    """Every test starts with nobody in control and ends handing back what it took."""
    yield
    key = DesktopKey(stack.relay_id, desktop.desktop_session_id)
    await stack.app.state.parts.control.hand_back(key)


async def open_viewer(context: BrowserContext, stack: ViewerStack, desktop: Desktop) -> Page:
    return await viewer_pages.open_viewer(context, stack, desktop, 15)


async def wait_for_control(page: Page, text: str, within_s: float = 5) -> None:
    """The viewer's bar says ``text`` about who is in control (within ``within_s``)."""
    try:
        await page.wait_for_function(
            "t => document.getElementById('control-text').textContent.startsWith(t)",
            arg=text,
            timeout=scaled(within_s) * 1000,
        )
    except PlaywrightTimeout:
        shown = await page.locator("#control-text").inner_text()
        raise AssertionError(f"the bar says {shown!r}, not {text!r}") from None


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


async def test_typing_in_the_viewer_refuses_the_agent_until_idle(
    stack: ViewerStack,
    desktop: Desktop,
    context: BrowserContext,
    agent: Agent,
    recorder: XRecorder,
    artifacts_dir: Path,
) -> None:
    page = await open_viewer(context, stack, desktop)
    await asyncio.to_thread(recorder.drain)
    await page.focus("#screen canvas")
    await page.keyboard.type("abc")
    last_key = time.monotonic()
    await asyncio.sleep(0.05)
    status, refused = await agent.click()
    assert (status, refused["error"]["code"]) == (423, "takeover_active"), refused
    assert "alice is using this desktop" in refused["error"]["message"]
    events = await asyncio.to_thread(recorder.drain)
    assert [e["char"] for e in events if e["type"] == "KeyPress"] == ["a", "b", "c"]
    assert set(kinds(events)) <= {"KeyPress", "KeyRelease"}, "the agent's click never arrived"
    await wait_for_control(page, "You are in control")
    await shot(page, artifacts_dir, "person-in-control")

    # The idle time runs from the last input the server received, which reaches it a moment
    # after the browser sent it: the agent waits what the refusal says (retry_after_s), as an
    # agent does, and gets in within a second of the idle time.
    await asyncio.sleep(max(0.0, last_key + IDLE_S + 0.2 - time.monotonic()))
    status, clicked = await agent.click()
    while status == 423 and time.monotonic() < last_key + IDLE_S + scaled(1.0):
        await asyncio.sleep(float(clicked["error"].get("retry_after_s") or 0.1))
        status, clicked = await agent.click()
    assert status == 200, clicked
    events = await asyncio.to_thread(recorder.drain)
    assert ("ButtonPress", *POINT) in [(e["type"], e.get("x"), e.get("y")) for e in events]
    await wait_for_control(page, "Agent bot is in control")
    await page.locator("#control").click()  # its panel lists the agent's last actions
    await page.wait_for_selector(".agent-actions li")
    await shot(page, artifacts_dir, "agent-actions")
    assert "click at 640, 400" in await page.locator(".agent-actions li").first.inner_text()


async def test_take_control_holds_past_the_idle_time_until_hand_back(
    stack: ViewerStack,
    desktop: Desktop,
    context: BrowserContext,
    agent: Agent,
    recorder: XRecorder,
    artifacts_dir: Path,
) -> None:
    page = await open_viewer(context, stack, desktop)
    status, clicked = await agent.click()  # the agent is at work
    assert status == 200, clicked
    await wait_for_control(page, "Agent bot is in control")
    await page.locator("#take-control").click()
    await wait_for_control(page, "You are in control (took control)")
    assert await page.locator("#hand-back").is_visible()
    await asyncio.sleep(IDLE_S + 0.5)
    await asyncio.to_thread(recorder.drain)
    status, refused = await agent.click()
    assert (status, refused["error"]["code"]) == (423, "takeover_active"), refused
    assert "hands back" in refused["error"]["message"]
    assert "ButtonPress" not in kinds(await asyncio.to_thread(recorder.drain))
    await shot(page, artifacts_dir, "took-control")
    await page.locator("#hand-back").click()
    await wait_for_control(page, "Agent bot is in control")  # its grant is still live
    status, clicked = await agent.click()
    assert status == 200, clicked
    assert "ButtonPress" in kinds(await asyncio.to_thread(recorder.drain))


async def test_the_control_state_reaches_a_second_viewer_and_the_dock_within_a_second(
    stack: ViewerStack,
    desktop: Desktop,
    context: BrowserContext,
    agent: Agent,
    artifacts_dir: Path,
) -> None:
    first = await open_viewer(context, stack, desktop)
    second = await open_viewer(context, stack, desktop)
    chat = await context.new_page()
    await chat.goto(stack.url + "/")
    await chat.wait_for_selector("#conversation-title:has-text('Team')")
    await chat.locator("#dock-button").click()
    row = chat.locator(f"tr.dock-row[data-session='{desktop.desktop_session_id}']")
    await row.wait_for()
    status, _ = await agent.click()
    assert status == 200
    await wait_for_control(second, "Agent bot is in control", within_s=1)
    await chat.wait_for_function(
        "sid => document.querySelector(`tr[data-session='${sid}']`).dataset.control === 'agent'",
        arg=desktop.desktop_session_id,
        timeout=scaled(1) * 1000,
    )
    await first.focus("#screen canvas")
    await first.keyboard.press("x")
    await wait_for_control(second, "You are in control", within_s=1)  # the same person
    await chat.wait_for_function(
        "sid => document.querySelector(`tr[data-session='${sid}']`).dataset.control === 'person'",
        arg=desktop.desktop_session_id,
        timeout=scaled(1) * 1000,
    )
    assert "alice" in await row.locator("td.control").inner_text()
    await shot(chat, artifacts_dir, "dock")
    await shot(second, artifacts_dir, "second-viewer")


async def test_stop_on_the_dock_ends_the_agent_run_and_refuses_a_regrant_for_the_cooldown(
    stack: ViewerStack,
    desktop: Desktop,
    context: BrowserContext,
    agent: Agent,
    artifacts_dir: Path,
) -> None:
    parts = stack.app.state.parts
    key = DesktopKey(stack.relay_id, desktop.desktop_session_id)
    await wait_until(lambda: _idle(parts, key), IDLE_S + 5, "nobody in control")
    chat = await context.new_page()
    await chat.goto(stack.url + "/")
    await chat.wait_for_selector("#conversation-title:has-text('Team')")
    await chat.locator("#dock-button").click()
    answers: list[tuple[int, Any]] = []

    async def agent_loop() -> None:  # a scripted agent: it types until it is refused
        while True:
            answers.append(await agent.screen(action="type", text=SLOW_TEXT))
            if answers[-1][0] != 200:
                return

    loop = asyncio.create_task(agent_loop())
    await wait_until(lambda: parts.control.inflight.count(key) == 1, 20, "a request in flight")
    stop = chat.locator(
        f"tr[data-session='{desktop.desktop_session_id}'] button", has_text="Stop agent"
    )
    await stop.click()
    await asyncio.wait_for(loop, scaled(10))
    status, ended = answers[-1]
    assert (status, ended["error"]["code"]) == (409, "stopped_by_user"), ended
    assert "this request was cancelled" in ended["error"]["message"]
    await chat.wait_for_selector("#dock-message:has-text('Stopped bot')")
    await shot(chat, artifacts_dir, "stopped")
    status, refused = await agent.click()  # the next action, and a new grant: refused
    assert (status, refused["error"]["code"]) == (409, "stopped_by_user"), refused
    assert refused["error"]["retry_after_s"] > 0
    await asyncio.sleep(refused["error"]["retry_after_s"] + 0.3)
    status, clicked = await agent.click()
    assert status == 200, clicked
    rows = [r for r in await parts.store.list_audit() if r.op == "agent.grant"]
    outcomes = [(r.outcome, r.actor, r.reason) for r in rows]
    created = [i for i, o in enumerate(outcomes) if o[:2] == ("created", "bot")]
    revoked = outcomes.index(("revoked", "alice", "stopped_by_user"))
    refusal = outcomes.index(("refused", "bot", "stopped_by_user"), revoked)
    assert created[0] < revoked < refusal < created[-1]
    assert any(r.op == "agent.stop" and r.actor == "alice" for r in await parts.store.list_audit())


async def _idle(parts: Any, key: DesktopKey) -> bool:
    return bool((await parts.control.state(key))["state"] != "person")


async def test_a_view_only_viewer_sends_nothing_and_takes_nothing(
    stack: ViewerStack,
    desktop: Desktop,
    context: BrowserContext,
    agent: Agent,
    recorder: XRecorder,
    artifacts_dir: Path,
) -> None:
    parts = stack.app.state.parts
    key = DesktopKey(stack.relay_id, desktop.desktop_session_id)
    await wait_until(lambda: _idle(parts, key), IDLE_S + 5, "nobody in control")
    page = await context.new_page()
    await page.goto(stack.url + stack.viewer_path(desktop) + "?view_only=1")
    await page.wait_for_function("() => document.body.dataset.state === 'connected'")
    assert await page.locator("#view-only").is_checked()
    await asyncio.to_thread(recorder.drain)
    await page.focus("#screen canvas")
    await page.keyboard.type("nope")
    await page.mouse.click(300, 300)
    status, clicked = await agent.click()
    assert status == 200, clicked  # the person looked on: the agent kept going
    events = await asyncio.to_thread(recorder.drain)
    assert [e["type"] for e in events if e["type"].startswith("Key")] == []
    assert "view only" in await page.locator("#control").inner_text()
    await shot(page, artifacts_dir, "view-only")
