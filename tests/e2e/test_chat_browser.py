"""The web chat in headless Chromium against the real server, relay and desktops."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import BrowserContext, Page, Route, expect

from server import admin
from server.chat.routes import MAX_MESSAGE_CHARS
from tests.e2e import chat_fixtures
from tests.e2e.chat_fixtures import api_action, last_result, send, shot, sign_in
from tests.e2e.viewer_stack import ViewerStack, paint_root
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

# The shared fixtures, made visible to this module's tests.
browser = chat_fixtures.browser
chat_stack = chat_fixtures.chat_stack
context = chat_fixtures.context
chat_page = chat_fixtures.chat_page


async def live_sessions(stack: ViewerStack, slot: str) -> list[str]:
    status, body = await api_action(stack, "desktop_list_active")
    assert status == 200, body
    return [
        row["desktop_session_id"]
        for row in body["desktops"]
        if row["slot"] == slot and row["state"] == "running"
    ]


async def viewer_connected(viewer: Page) -> None:
    await viewer.wait_for_url("**/vnc/**")
    await viewer.wait_for_function(
        "() => document.body.dataset.state === 'connected'", timeout=scaled(20) * 1000
    )
    await viewer.wait_for_function(
        "() => { const c = document.querySelector('#screen canvas');"
        " return c && c.width >= 640 && c.height >= 400; }",
        timeout=scaled(10) * 1000,
    )


async def paint_desktop(stack: ViewerStack, session: str) -> None:
    status = await stack.relays.request(stack.relay_id, "desktop.status", {}, 10.0)
    row = next(d for d in status["desktops"] if d["desktop_session_id"] == session)
    await asyncio.to_thread(paint_root, row["display"])


async def canvas_is_painted(viewer: Page) -> bool:
    """The root's painted bands (never black) reach the canvas through the whole chain."""
    colours = await viewer.evaluate(
        "() => { const c = document.querySelector('#screen canvas');"
        " const g = c.getContext('2d'); const out = [];"
        " for (const y of [60, 400, 700]) { const d = g.getImageData(20, y, 1, 1).data;"
        " out.push(d[0] + d[1] + d[2]); } return out; }"
    )
    return all(total > 40 for total in colours)


async def test_login_desktop_list_and_close(
    context: BrowserContext, chat_stack: ViewerStack, artifacts_dir: Path
) -> None:
    page = await context.new_page()
    await page.goto(chat_stack.url + "/")
    await page.wait_for_selector("body[data-view='login']")
    await shot(page, artifacts_dir, "01-login")
    await sign_in(page, chat_stack)
    await shot(page, artifacts_dir, "02-conversation")

    await page.get_by_label("Message", exact=True).fill("/desk")
    await expect(page.locator("#suggestions")).to_be_visible()
    await shot(page, artifacts_dir, "03-autocomplete")

    async with context.expect_page() as opened:
        await send(page, "/desktop")
    viewer = await opened.value
    await viewer_connected(viewer)
    result = await last_result(page)
    assert await result.get_attribute("data-outcome") in {"started", "attached"}
    [session] = await live_sessions(chat_stack, "main")
    await paint_desktop(chat_stack, session)
    await wait_until(lambda: canvas_is_painted(viewer), 10, "the canvas to show the desktop")
    await shot(viewer, artifacts_dir, "04-viewer")

    await send(page, "/desktop list")
    listed = await last_result(page, "listed")
    await expect(listed.locator(f"tr[data-session='{session}']")).to_contain_text("running")
    await shot(page, artifacts_dir, "05-list")

    await send(page, "/desktop close")
    closed = await last_result(page, "close_viewer")
    await expect(closed).to_contain_text("keep running")
    await wait_until(viewer.is_closed, 5, "the viewer tab to close")
    assert await live_sessions(chat_stack, "main") == [session]
    await shot(page, artifacts_dir, "06-closed")
    await page.close()


async def test_badge_is_live_open_from_dock_and_stop_with_confirmation(
    context: BrowserContext, chat_page: Page, chat_stack: ViewerStack, artifacts_dir: Path
) -> None:
    page = chat_page
    badge = page.locator("#dock-count")
    _, listed = await api_action(chat_stack, "desktop_list_active")
    before = len(listed["desktops"])
    await expect(badge).to_have_text(str(before))  # the page's first count has arrived
    status, body = await api_action(chat_stack, "desktop_start", slot="dock", geometry="1280x800")
    assert status == 200, body
    session = body["desktop"]["desktop_session_id"]
    # the second client's start reaches this page's badge over SSE within a second
    await expect(badge).to_have_text(str(before + 1), timeout=scaled(1) * 1000)

    await page.get_by_role("button", name="Active Desktops").click()
    row = page.locator(f"#dock-rows tr[data-session='{session}']")
    await expect(row).to_contain_text("running")
    await shot(page, artifacts_dir, "01-dock")

    async with context.expect_page() as opened:
        await row.get_by_role("button", name="Open").click()
    viewer = await opened.value
    await viewer_connected(viewer)

    await row.get_by_role("button", name="Stop").click()
    dialog = page.locator("#stop-dialog")
    await expect(dialog).to_be_visible()
    await expect(dialog).to_contain_text(session)
    await expect(dialog).to_contain_text("relay-1")
    await shot(page, artifacts_dir, "02-stop-dialog")
    await page.get_by_role("button", name="Stop desktop").click()
    await expect(dialog).to_be_hidden()
    await expect(row).to_have_count(0)
    await expect(badge).to_have_text(str(before))
    await viewer.wait_for_function("() => document.body.dataset.state === 'stopped'")
    await expect(viewer.locator("#overlay")).to_be_visible()
    await shot(viewer, artifacts_dir, "03-viewer-stopped")
    await shot(page, artifacts_dir, "04-dock-after-stop")
    await viewer.close()


async def test_a_stale_confirmation_stops_nothing(
    chat_page: Page, chat_stack: ViewerStack, artifacts_dir: Path
) -> None:
    page = chat_page
    status, body = await api_action(chat_stack, "desktop_start", slot="stale", geometry="1280x800")
    old = body["desktop"]["desktop_session_id"]
    await page.get_by_role("button", name="Active Desktops").click()
    row = page.locator(f"#dock-rows tr[data-session='{old}']")
    await row.get_by_role("button", name="Stop").click()
    await expect(page.locator("#stop-dialog")).to_contain_text(old)

    # meanwhile someone else restarts that slot
    status, _ = await api_action(
        chat_stack,
        "desktop_stop_confirm",
        relay="relay-1",
        kind="virtual",
        slot="stale",
        desktop_session_id=old,
    )
    assert status == 200
    status, body = await api_action(chat_stack, "desktop_start", slot="stale", geometry="1280x800")
    new = body["desktop"]["desktop_session_id"]
    assert new != old

    await page.get_by_role("button", name="Stop desktop").click()
    error = page.locator("#stop-error")
    await expect(error).to_contain_text("Nothing was stopped")
    await expect(error).to_contain_text(new[:8])
    await shot(page, artifacts_dir, "01-conflict")
    assert await live_sessions(chat_stack, "stale") == [new]
    await page.get_by_role("button", name="Close", exact=True).click()
    await expect(page.locator(f"#dock-rows tr[data-session='{new}']")).to_contain_text("running")
    status, _ = await api_action(
        chat_stack,
        "desktop_stop_confirm",
        relay="relay-1",
        kind="virtual",
        slot="stale",
        desktop_session_id=new,
    )
    assert status == 200


async def test_html_is_text_and_a_long_message_gets_a_clear_error(
    chat_page: Page, artifacts_dir: Path
) -> None:
    page = chat_page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    attack = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script><b>bold</b>'
    await send(page, attack)
    message = page.locator("#transcript .message-user .message-text").last
    await expect(message).to_have_text(attack)
    assert await message.locator("img, script, b").count() == 0
    assert await page.evaluate("() => window.__xss") is None
    assert dialogs == []

    long_text = "z" * (MAX_MESSAGE_CHARS + 1)
    await send(page, long_text)
    error = page.locator("#composer-error")
    await expect(error).to_contain_text("too long")
    await expect(error).to_contain_text("4,000")
    assert await page.get_by_label("Message", exact=True).input_value() == long_text
    await shot(page, artifacts_dir, "01-xss-and-long")


async def test_an_expired_session_returns_to_login_and_keeps_the_draft(
    chat_page: Page, chat_stack: ViewerStack, artifacts_dir: Path
) -> None:
    page = chat_page
    cookies = await page.context.cookies()
    secret = next(c["value"] for c in cookies if c["name"] == "relaydesk_session")
    draft = "a draft that must survive /desktop"
    composer = page.get_by_label("Message", exact=True)
    await composer.fill(draft)
    await chat_stack.app.state.parts.store.delete_web_session(secret)
    # Sending finds the session gone (unless the event stream noticed first): login either way.
    if await composer.is_visible():
        await composer.press("Enter")
    await page.wait_for_selector("body[data-view='login']")
    await expect(page.locator("#login-note")).to_contain_text("session has ended")
    await shot(page, artifacts_dir, "01-expired")
    await sign_in(page, chat_stack)
    await expect(composer).to_have_value(draft)
    await shot(page, artifacts_dir, "02-restored")


async def test_the_message_box_waits_for_the_conversation_and_keeps_what_is_typed(
    context: BrowserContext, chat_stack: ViewerStack
) -> None:
    page = await context.new_page()
    held = asyncio.Event()
    release = asyncio.Event()

    async def slow_conversation(route: Route) -> None:
        held.set()
        await release.wait()
        await route.continue_()

    cid = chat_stack.seed.conversation_id
    await page.route(f"**/api/v1/conversations/{cid}", slow_conversation)
    await page.goto(chat_stack.url + "/")
    await page.get_by_label("Username").fill(chat_stack.seed.user["username"])
    await page.get_by_label("Password").fill(chat_stack.seed.user["password"])
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_selector("body[data-view='app']")
    await asyncio.wait_for(held.wait(), scaled(15))
    composer = page.get_by_label("Message", exact=True)
    # The conversation is still opening: nothing typed now could be sent, or kept.
    await expect(composer).to_be_disabled()
    await expect(page.get_by_role("button", name="Send")).to_be_disabled()
    release.set()
    await composer.fill("typed as soon as it could be")
    await expect(page.locator("#conversation-title")).to_have_text("Team")
    await expect(composer).to_have_value("typed as soon as it could be")
    await composer.press("Enter")
    await expect(page.locator("#transcript")).to_contain_text("typed as soon as it could be")
    await page.close()


async def test_a_page_whose_script_failed_to_load_loads_again(
    context: BrowserContext, chat_stack: ViewerStack
) -> None:
    """A network change aborts the page's loads in flight, three times in a row (containers
    starting one after another): the page loads again, waiting longer each time, and works."""
    page = await context.new_page()
    failed: list[str] = []

    async def cut_three_times(route: Route) -> None:
        if len(failed) < 3:  # as a network change aborts a load in flight
            failed.append(route.request.url)
            await route.abort("internetdisconnected")
        else:
            await route.continue_()

    await page.route("**/app/viewers.js", cut_three_times)
    await page.goto(chat_stack.url + "/")
    await page.wait_for_selector("body[data-view='login']", timeout=scaled(30) * 1000)
    assert len(failed) == 3, failed
    await expect(page.get_by_label("Username")).to_be_visible()
    await page.close()


async def test_a_page_whose_scripts_never_load_says_so_after_five_tries(
    context: BrowserContext, chat_stack: ViewerStack
) -> None:
    page = await context.new_page()
    failed: list[str] = []

    async def cut(route: Route) -> None:
        failed.append(route.request.url)
        await route.abort("internetdisconnected")

    await page.route("**/app/viewers.js", cut)
    await page.goto(chat_stack.url + "/")
    alert = page.get_by_role("alert")
    await expect(alert).to_have_text(
        "This page could not load its scripts. Check the connection and reload.",
        timeout=scaled(30) * 1000,
    )
    assert len(failed) == 6, failed  # the first load and five more
    await page.unroute("**/app/viewers.js")
    await page.reload()  # the person's reload: the page works again
    await page.wait_for_selector("body[data-view='login']", timeout=scaled(30) * 1000)
    await page.close()


async def test_narrow_window_is_usable(chat_page: Page, artifacts_dir: Path) -> None:
    await chat_page.set_viewport_size({"width": 420, "height": 800})
    await expect(chat_page.get_by_label("Message", exact=True)).to_be_visible()
    await expect(chat_page.get_by_role("button", name="Active Desktops")).to_be_visible()
    await shot(chat_page, artifacts_dir, "01-narrow")


async def test_desktop_cards_follow_the_inventory(
    context: BrowserContext, chat_page: Page, chat_stack: ViewerStack, artifacts_dir: Path
) -> None:
    page = chat_page
    async with context.expect_page() as opened:
        await send(page, "/desktop")
    viewer = await opened.value
    await last_result(page)
    [session] = await live_sessions(chat_stack, "main")
    cards = page.locator(f"#transcript .desktop-card[data-session='{session}']")
    buttons = page.locator(f"#transcript button.open-viewer[data-session='{session}']")
    card, button = cards.last, buttons.last
    await expect(card).to_contain_text("running")
    await expect(button).to_be_enabled()

    stop = {"relay": "relay-1", "kind": "virtual", "slot": "main", "desktop_session_id": session}
    status, _ = await api_action(chat_stack, "desktop_stop_confirm", **stop)
    assert status == 200
    # The stop reaches the transcript over the event stream: no card offers a dead session.
    await expect(card).to_contain_text("stopped", timeout=scaled(2) * 1000)
    await expect(button).to_be_disabled()
    for index in range(await cards.count()):
        await expect(cards.nth(index)).to_contain_text("stopped")
    await shot(page, artifacts_dir, "01-card-stopped")
    await viewer.close()

    async with context.expect_page() as opened:
        await send(page, "/desktop")
    viewer = await opened.value
    fresh = await last_result(page, "started")
    await expect(fresh.locator(".desktop-card")).to_contain_text("running")
    await expect(fresh.get_by_role("button", name="Open viewer")).to_be_enabled()
    await expect(button).to_be_disabled()
    await viewer.close()

    # A transcript loaded later shows the old session as stopped too.
    await page.reload()
    await expect(cards.first).to_contain_text("stopped", timeout=scaled(5) * 1000)
    for index in range(await buttons.count()):
        await expect(buttons.nth(index)).to_be_disabled()
    await shot(page, artifacts_dir, "02-after-reload")


async def test_each_reply_says_things_once_and_errors_give_a_next_step(
    chat_page: Page, artifacts_dir: Path
) -> None:
    page = chat_page
    await send(page, "/desktop help")
    helped = await last_result(page, "help")
    # The list appears once: as the table, not again as text above it.
    await expect(helped.get_by_text("/desktop list", exact=True)).to_have_count(1)
    await expect(helped.locator(".message-text")).to_have_count(0)

    # This relay has no host helper: the reply says what to do, once, in plain words.
    await send(page, "/desktop local")
    failed = await last_result(page, "error")
    await expect(failed).to_contain_text("does not share its real screen")
    await expect(failed).to_contain_text("relaydesk host-helper")
    await expect(failed).not_to_contain_text("virtual desktop manager")
    await expect(failed.get_by_text("real screen", exact=False)).to_have_count(1)

    await send(page, "/desktop lsit relay-1")
    typo = await last_result(page, "parse_error")
    text = await typo.locator(".message-text").inner_text()
    assert text[0].isupper(), text
    await shot(page, artifacts_dir, "01-replies")


async def test_a_card_tells_its_story_reuses_its_tab_and_starts_again(
    context: BrowserContext, chat_page: Page, chat_stack: ViewerStack, artifacts_dir: Path
) -> None:
    page = chat_page
    async with context.expect_page() as opened:
        await send(page, "/desktop")
    viewer = await opened.value
    await viewer_connected(viewer)
    card = (await last_result(page)).locator(".desktop-card")
    user = chat_stack.seed.user["username"]
    await expect(card.locator(".card-story")).to_contain_text(f"Started by {user} at")

    # "Open viewer" brings the tab /desktop opened forward: no second viewer.
    pages = len(context.pages)
    await card.get_by_role("button", name="Open viewer").click()
    await asyncio.sleep(1)
    assert len(context.pages) == pages
    assert not viewer.is_closed()
    assert chat_stack.viewers(await card.get_attribute("data-session") or "") == 1

    session = await card.get_attribute("data-session")
    stop = {"relay": "relay-1", "kind": "virtual", "slot": "main", "desktop_session_id": session}
    status, _ = await api_action(chat_stack, "desktop_stop_confirm", **stop)
    assert status == 200
    await expect(card.locator(".card-story")).to_contain_text(f"Stopped by {user} at")
    again = card.get_by_role("button", name="Start again")
    await expect(again).to_be_visible()
    await shot(page, artifacts_dir, "01-stopped-card")
    await viewer.close()

    page_reloaded = page
    await page_reloaded.reload()
    story = page_reloaded.locator(f".desktop-card[data-session='{session}'] .card-story").last
    await expect(story).to_contain_text(f"Stopped by {user} at")  # read later, same story

    again = page_reloaded.locator(f".desktop-card[data-session='{session}']").last.get_by_role(
        "button", name="Start again"
    )
    async with context.expect_page() as opened:
        await again.click()
    viewer = await opened.value
    await viewer_connected(viewer)
    fresh = await last_result(page_reloaded, "started")
    await expect(fresh.locator(".desktop-card")).to_contain_text("running")
    await shot(page_reloaded, artifacts_dir, "02-started-again")
    await viewer.close()


async def test_close_with_nothing_running_says_so(
    chat_page: Page, chat_stack: ViewerStack, artifacts_dir: Path
) -> None:
    _, listed = await api_action(chat_stack, "desktop_list_active")
    for row in listed["desktops"]:
        stop = {key: row[key] for key in ("kind", "slot", "desktop_session_id")}
        await api_action(chat_stack, "desktop_stop_confirm", relay="relay-1", **stop)
    await send(chat_page, "/desktop close")
    closed = await last_result(chat_page, "close_viewer")
    await expect(closed).to_contain_text("No desktop is running")
    await send(chat_page, "/desktop list")
    listed_reply = await last_result(chat_page, "listed")
    await expect(listed_reply).to_contain_text("No desktop is active here.")
    await expect(listed_reply).not_to_contain_text("No desktops.")
    await shot(chat_page, artifacts_dir, "01-nothing-running")


async def test_a_user_without_a_conversation_gets_a_real_empty_state(
    context: BrowserContext, chat_stack: ViewerStack, artifacts_dir: Path
) -> None:
    store = chat_stack.app.state.parts.store
    lonely = await admin.create_user(store, "newcomer")
    page = await context.new_page()
    await page.goto(chat_stack.url + "/")
    await page.get_by_label("Username").fill("newcomer")
    await page.get_by_label("Password").fill(lonely["password"])
    await page.get_by_role("button", name="Sign in").click()
    empty = page.get_by_role("region", name="You are not in a conversation yet")
    await expect(empty).to_be_visible()
    await expect(empty).to_contain_text("--member newcomer:write")
    await expect(page.get_by_label("Message", exact=True)).to_be_hidden()
    await expect(page.get_by_role("button", name="Active Desktops")).to_be_hidden()
    await shot(page, artifacts_dir, "01-empty-desktop")
    await page.set_viewport_size({"width": 390, "height": 844})
    await expect(empty).to_be_visible()
    await shot(page, artifacts_dir, "02-empty-phone")
    await page.close()


async def test_on_a_phone_the_transcript_keeps_most_of_the_screen(
    context: BrowserContext, chat_stack: ViewerStack, artifacts_dir: Path
) -> None:
    page = await context.new_page()
    await page.set_viewport_size({"width": 390, "height": 844})
    await sign_in(page, chat_stack)
    header = await page.locator("header.bar").bounding_box()
    nav = await page.locator("#conversations").bounding_box()
    transcript = await page.locator("#transcript").bounding_box()
    assert header and nav and transcript
    assert header["height"] + nav["height"] <= 100, (header, nav)
    assert transcript["height"] >= 0.55 * 844, transcript
    picker = page.get_by_label("Conversation", exact=True)
    await expect(picker).to_be_visible()
    await expect(page.get_by_role("button", name="Active Desktops")).to_be_visible()
    await shot(page, artifacts_dir, "01-phone")
    await page.close()


async def openai_call(stack: ViewerStack, slot: str, item: dict[str, Any]) -> dict[str, Any]:
    """One computer_call through the OpenAI door, as an agent's loop sends it."""
    cid = stack.seed.conversation_id
    path = f"/api/v1/conversations/{cid}/computer-use/openai/relay-1/virtual/{slot}"
    headers = {"Authorization": f"Bearer {stack.seed.api_token}"}
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(60)) as client:
        response = await client.post(path, json=item, headers=headers)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_a_model_s_safety_checks_wait_in_the_dock_for_a_person(
    chat_page: Page, chat_stack: ViewerStack, artifacts_dir: Path
) -> None:
    """A computer_call carrying pending_safety_checks runs nothing; the request shows in the
    dock (with what the model saw) at once; the person's Approve lets the same call run."""
    page = chat_page
    status, body = await api_action(chat_stack, "desktop_start", slot="checks")
    assert status == 200, body
    session = body["desktop"]["desktop_session_id"]
    await openai_call(chat_stack, "checks", {"action": {"type": "screenshot"}})
    checks = [{"id": "sc_dock1", "code": "malicious_instructions", "message": "Look twice."}]
    call = {
        "type": "computer_call",
        "call_id": "call_dock",
        "pending_safety_checks": checks,
        "action": {"type": "click", "button": "left", "x": 40, "y": 50},
    }
    refused = await openai_call(chat_stack, "checks", call)
    assert refused["is_error"] is True and refused["message"].startswith("approval_required")

    await expect(page.locator("#dock-button")).to_have_attribute("data-approvals", "1")
    await page.get_by_role("button", name="Active Desktops").click()
    request = page.locator(f"#approval-list li[data-approval='{refused['approval_id']}']")
    await expect(request).to_contain_text("Look twice.")
    await expect(request).to_contain_text("relay-1 virtual checks")
    await shot(page, artifacts_dir, "approval-pending")
    await request.get_by_role("button", name="Approve").click()
    await expect(page.locator("#dock-message")).to_contain_text("approved")
    await expect(page.locator("#approvals")).to_be_hidden()
    await expect(page.locator("#dock-button")).to_have_attribute("data-approvals", "0")

    ran = await openai_call(chat_stack, "checks", call)
    assert "is_error" not in ran and ran["acknowledged_safety_checks"] == checks
    await page.get_by_role("button", name="Close the desktops panel").click()
    status, body = await api_action(
        chat_stack,
        "desktop_stop_confirm",
        relay="relay-1",
        kind="virtual",
        slot="checks",
        desktop_session_id=session,
    )
    assert status == 200, body
