"""The accessibility tools end to end: in-process server, a real relay process, a real desktop
running real GTK apps (the tests' own form, ``tests/support/a11y_app.py``, and GTK's widget
factory), read and driven over the real accessibility bus.

What the app really did is read from the state file the form writes on every change, not from
the tools under test.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.support.a11y_stack import FORM, A11yStack, a11y_stack, x_window_geometry
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

SNAPSHOT_TTL_S = 6


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[A11yStack]:
    env = {
        "RELAYDESK_A11Y_SNAPSHOT_TTL_S": str(SNAPSHOT_TTL_S),
        # observed but never acted on
        "RELAYDESK_A11Y_READ_ONLY_APPS": "gtk3-widget-factory",
    }
    root = tmp_path_factory.mktemp("a11y")
    async with a11y_stack(root, [FORM, "gtk3-widget-factory"], env) as stack:
        await wait_until(lambda: stack.state() != {}, scaled(30), "the form to start")
        yield stack


async def _wait_app(stack: A11yStack, name: str) -> dict[str, Any]:
    return await stack.wait_app(name)


async def _find_one(stack: A11yStack, selector: str, **scope: Any) -> dict[str, Any]:
    found = await stack.ok("desktop_find", selector=selector, **scope)
    assert found["count"] == 1, found
    match: dict[str, Any] = found["matches"][0]
    return match


def _error(status: int, body: dict[str, Any], code: str, http: int) -> dict[str, Any]:
    assert (status, body["ok"], body["error"]["code"]) == (http, False, code), body
    assert body["error"]["suggestion"], body
    error: dict[str, Any] = body["error"]
    return error


# -- apps and observe --------------------------------------------------------------------------


async def test_running_apps_are_listed_with_their_windows(stack):
    form = await _wait_app(stack, "a11y_app.py")
    factory = await _wait_app(stack, "gtk3-widget-factory")
    titles = {w["name"] for w in form["windows"]}
    assert "relaydesk form" in titles
    window = next(w for w in form["windows"] if w["name"] == "relaydesk form")
    assert window["id"].startswith("@") and window["role"] == "frame"
    _x, _y, width, height = window["bounds"]
    assert width >= 200 and height >= 100
    assert isinstance(form["pid"], int) and isinstance(factory["pid"], int)
    listed = await stack.ok("desktop_apps")
    assert listed["a11y"] == {"available": True}


async def test_observe_lists_the_forms_controls_by_name(stack):
    await _wait_app(stack, "a11y_app.py")
    seen = await stack.ok("desktop_observe", window="relaydesk form")
    text = seen["text"]
    assert seen["source"] == "a11y"
    for expected in (
        'push_button "Save"',
        'check_box "Remember me"',
        'push_button "Open details"',
        'text "Name"',
    ):
        assert expected in text, text
    line = next(li for li in text.splitlines() if 'push_button "Save"' in li)
    ref = line.split()[0]
    assert ref.startswith(f"@{seen['snapshot']}:e")
    assert seen["truncated"] == {"budget": False, "depth": False}


async def test_observe_of_the_widget_factory_is_compact_and_complete(stack):
    await _wait_app(stack, "gtk3-widget-factory")
    seen = await stack.ok("desktop_observe", app="gtk3-widget-factory")
    everything = await stack.ok("desktop_observe", app="gtk3-widget-factory", view="all")
    assert len(seen["text"].encode()) <= 4096, seen["text"]
    assert everything["nodes"] > seen["nodes"]
    # every showing control of the full view is in the compact one
    controls = ("push_button", "check_box", "radio_button", "toggle_button", "spin_button")
    full = {
        li.strip().split(" ", 1)[1]
        for li in everything["text"].splitlines()
        if li.split()[1] in controls
    }
    compact = {li.strip().split(" ", 1)[1] for li in seen["text"].splitlines()}
    assert full and full <= compact


async def test_observe_json_carries_the_same_elements(stack):
    seen = await stack.ok("desktop_observe", window="relaydesk form", format="both")
    assert len(seen["elements"]) == seen["nodes"] == len(seen["text"].splitlines())
    save = next(e for e in seen["elements"] if e["name"] == "Save")
    assert save["role"] == "push_button" and len(save["bounds"]) == 4


async def test_a_budget_cut_is_said(stack):
    seen = await stack.ok("desktop_observe", app="gtk3-widget-factory", view="all", max_nodes=10)
    assert seen["nodes"] == 10
    assert seen["truncated"]["budget"] is True and "max_nodes" in seen["note"]


# -- find, read, act ---------------------------------------------------------------------------


async def test_find_returns_one_ref_and_click_presses_the_button(stack):
    before = stack.state()["clicks"]
    save = await _find_one(stack, 'push_button[name="Save"]', window="relaydesk form")
    clicked = await stack.ok("desktop_click", ref=save["ref"])
    assert clicked["method"] == "native"
    await wait_until(lambda: stack.state()["clicks"] == before + 1, scaled(10), "the Save click")


async def test_type_sets_the_entry_exactly_and_click_saves_it(stack):
    name = await _find_one(stack, 'text[name="Name"]', window="relaydesk form")
    typed = await stack.ok("desktop_type", ref=name["ref"], text="Zoë 日本 ☃")
    assert typed["method"] == "native" and typed["text"] == "Zoë 日本 ☃"
    read = await stack.ok("desktop_read", ref=name["ref"])
    assert read["text"] == "Zoë 日本 ☃" and read["role"] == "text"
    save = await _find_one(stack, 'button"Save"'.replace('"Save"', '[name="Save"]'))
    await stack.ok("desktop_click", ref=save["ref"])
    await wait_until(lambda: stack.state()["saved"] == "Zoë 日本 ☃", scaled(10), "the save")
    status = await _find_one(stack, 'label[name^="Saved:"]', window="relaydesk form")
    assert status["name"] == "Saved: Zoë 日本 ☃"


async def test_append_adds_any_unicode_after_the_text(stack):
    name = await _find_one(stack, 'text[name="Name"]', window="relaydesk form")
    await stack.ok("desktop_type", ref=name["ref"], text="Zoë")
    # GTK counts inserted text in bytes: "é日😀" is 9 of them for 3 characters.
    appended = await stack.ok("desktop_type", ref=name["ref"], text=" é日😀x", mode="append")
    assert appended["method"] == "native" and appended["text"] == "Zoë é日😀x"
    assert (await stack.ok("desktop_read", ref=name["ref"]))["text"] == "Zoë é日😀x"


async def test_click_on_a_check_box_changes_its_state(stack):
    box = await _find_one(stack, 'check_box[name="Remember me"]')
    was = stack.state()["remember"]
    await stack.ok("desktop_click", ref=box["ref"])
    await wait_until(lambda: stack.state()["remember"] is (not was), scaled(10), "the toggle")
    read = await stack.ok("desktop_read", ref=box["ref"])
    assert ("checked" in read["states"]) is (not was)


async def test_wait_and_a_ref_to_a_closed_window(stack):
    opener = await _find_one(stack, 'push_button[name="Open details"]')
    await stack.ok("desktop_click", ref=opener["ref"])
    waited = await stack.ok(
        "desktop_wait", selector='push_button[name="Close"]', app="a11y_app.py", timeout_ms=10000
    )
    assert waited["satisfied"] is True
    close = waited["matches"][0]
    await stack.ok("desktop_click", ref=close["ref"])
    gone = await stack.ok(
        "desktop_wait",
        selector='push_button[name="Close"]',
        app="a11y_app.py",
        condition="gone",
        timeout_ms=10000,
    )
    assert gone["satisfied"] is True
    assert stack.state()["details_open"] is False
    status, body = await stack.act("desktop_click", ref=close["ref"])
    _error(status, body, "element_not_found", 404)


async def test_a_wait_that_is_never_satisfied_times_out(stack):
    status, body = await stack.act("desktop_wait", selector='"No such thing"', timeout_ms=300)
    _error(status, body, "timeout", 504)


# -- errors ------------------------------------------------------------------------------------


async def test_refs_expire_and_unknown_snapshots_are_named(stack):
    save = await _find_one(stack, 'push_button[name="Save"]', window="relaydesk form")
    status, body = await stack.act("desktop_read", ref="@abcdef12:e1")
    _error(status, body, "snapshot_not_found", 404)
    await asyncio.sleep(SNAPSHOT_TTL_S + 0.5)
    status, body = await stack.act("desktop_read", ref=save["ref"])
    _error(status, body, "stale_ref", 409)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"selector": 'push_button[colour="x"]'}, "selector"),
        ({"selector": ""}, "selector"),
        ({"selector": "a" * 600}, "selector"),
        ({"selector": "push_button", "limit": 0}, "limit"),
    ],
)
async def test_bad_find_arguments_are_400_naming_the_field(stack, body, field):
    status, result = await stack.act("desktop_find", **body)
    assert status == 400, result
    assert result["error"]["code"] == "invalid_args"
    assert field in json.dumps(result["error"])


@pytest.mark.parametrize(
    ("name", "body", "field"),
    [
        ("desktop_click", {"ref": "Save"}, "ref"),
        ("desktop_click", {}, "ref"),
        ("desktop_type", {"ref": "@abcdef12:e1"}, "text"),
        ("desktop_observe", {"max_nodes": 1}, "max_nodes"),
        ("desktop_scroll", {"ref": "@abcdef12:e1", "direction": "sideways"}, "direction"),
        ("desktop_wait", {"selector": "text", "timeout_ms": 999999}, "timeout_ms"),
    ],
)
async def test_bad_action_arguments_are_400_naming_the_field(stack, name, body, field):
    status, result = await stack.act(name, **body)
    assert status == 400, result
    assert result["error"]["code"] == "invalid_args"
    assert field in json.dumps(result["error"])


async def test_an_unknown_app_is_app_not_found(stack):
    status, body = await stack.act("desktop_observe", app="no-such-app")
    _error(status, body, "app_not_found", 404)


async def test_a_stopped_app_times_out_within_the_bound_while_others_answer(stack):
    form = await _wait_app(stack, "a11y_app.py")
    os.kill(form["pid"], signal.SIGSTOP)
    try:
        started = time.monotonic()
        status, body = await stack.act("desktop_observe", app="a11y_app.py")
        elapsed = time.monotonic() - started
        _error(status, body, "timeout", 504)
        assert elapsed < scaled(5), elapsed
        other = await stack.ok("desktop_observe", app="gtk3-widget-factory")
        assert other["nodes"] > 10
    finally:
        os.kill(form["pid"], signal.SIGCONT)


async def test_a_read_only_app_is_observed_but_not_acted_on(stack):
    factory = await _wait_app(stack, "gtk3-widget-factory")
    assert factory["policy"] == "read_only" and "read-only" in factory["reason"]
    button = (
        await stack.ok(
            "desktop_find", selector='radio_button[name="Page 2"]', app="gtk3-widget-factory"
        )
    )["matches"][0]
    status, body = await stack.act("desktop_click", ref=button["ref"])
    _error(status, body, "policy_denied", 403)
    read = await stack.ok("desktop_read", ref=button["ref"])
    assert "checked" not in read["states"]


async def test_keys_go_physically_to_the_element_and_can_be_refused(stack):
    name = await _find_one(stack, 'text[name="Name"]', window="relaydesk form")
    await stack.ok("desktop_type", ref=name["ref"], text="abc")
    # Focusing a GTK entry selects its text: End leaves the caret after it, unselected.
    await stack.ok("desktop_key", ref=name["ref"], keys="End")
    pressed = await stack.ok("desktop_key", ref=name["ref"], keys="BackSpace")
    assert pressed["method"] == "physical" and set(pressed["at"]) == {"x", "y"}
    read = await stack.ok("desktop_read", ref=name["ref"])
    assert read["text"] == "ab"
    status, body = await stack.act("desktop_key", ref=name["ref"], keys="BackSpace", physical=False)
    _error(status, body, "policy_denied", 403)
    assert (await stack.ok("desktop_read", ref=name["ref"]))["text"] == "ab"


async def test_a_read_member_may_neither_observe_nor_act(stack):
    from server import admin
    from server.db.records import parse_role
    from server.db.store import Store

    store = await Store.open(stack.seed.database_url)
    try:
        user = await admin.create_user(store, "reader")
        token = (await admin.create_token(store, "reader"))["token"]
        await store.add_member(stack.seed.conversation_id, user["user_id"], parse_role("read"))
    finally:
        await store.close()
    save = await _find_one(stack, 'push_button[name="Save"]', window="relaydesk form")
    clicks = stack.state()["clicks"]
    headers = {"Authorization": f"Bearer {token}"}
    body = {"conversation_id": stack.seed.conversation_id, "ref": save["ref"]}
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(30)) as client:
        refused = await client.post("/api/v1/actions/desktop_click", json=body, headers=headers)
        unread = await client.post("/api/v1/actions/desktop_read", json=body, headers=headers)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    # The tree is desktop content: reading it needs write too (docs/http-api.md).
    assert unread.status_code == 403 and unread.json()["error"]["code"] == "forbidden"
    assert stack.state()["clicks"] == clicks


async def test_window_bounds_match_the_x_servers_geometry(stack):
    form = await _wait_app(stack, "a11y_app.py")
    window = next(w for w in form["windows"] if w["name"] == "relaydesk form")
    geometry = await asyncio.to_thread(x_window_geometry, stack.display, "relaydesk form")
    assert geometry is not None
    # The accessible frame is the window with its title bar and border (the window manager's
    # frame): it holds the client window, a few pixels larger on each side.
    ax, ay, aw, ah = window["bounds"]
    gx, gy, gw, gh = geometry
    assert ax <= gx and ay <= gy and ax + aw >= gx + gw and ay + ah >= gy + gh, (ax, ay, aw, ah)
    assert max(gx - ax, gy - ay, aw - gw, ah - gh) <= 40, ((ax, ay, aw, ah), geometry)


async def test_a_person_in_control_refuses_agent_acts_but_not_reads(stack):
    save = await _find_one(stack, 'push_button[name="Save"]', window="relaydesk form")
    clicks = stack.state()["clicks"]
    await stack.ok("desktop_take_control", person=True, desktop_session_id=stack.session_id)
    try:
        status, body = await stack.act("desktop_click", ref=save["ref"])
        assert (status, body["error"]["code"]) == (423, "takeover_active"), body
        # reads go on
        assert (await stack.ok("desktop_read", ref=save["ref"]))["name"] == "Save"
    finally:
        await stack.ok("desktop_hand_back", person=True, desktop_session_id=stack.session_id)
    assert stack.state()["clicks"] == clicks  # no input reached the app
    await stack.ok("desktop_click", ref=save["ref"])
    await wait_until(lambda: stack.state()["clicks"] == clicks + 1, scaled(10), "the click")


async def test_the_accessibility_bus_dying_is_reported_and_the_desktop_keeps_running(stack):
    # A desktop of its own (its apps write the shared state file too: this test reads none).
    started = await stack.ok("desktop_start", slot="bus", geometry="1024x768", profile="minimal")
    session = started["desktop"]["desktop_session_id"]
    try:
        listed = await stack.ok("desktop_apps", desktop_session_id=session)
        assert listed["a11y"] == {"available": True}
        state = json.loads((stack.seed.data_dir / "relay-state" / "desktops.json").read_text())
        record = next(d for d in state["desktops"] if d["desktop_session_id"] == session)
        bus = next(p for p in record["processes"] if p["name"] == "a11y-bus")
        os.killpg(bus["pid"], signal.SIGKILL)  # the launcher and the bus daemon it started
        await wait_until(
            lambda: "accessibility bus exited" in stack.relay_log.log_tail(),
            scaled(20),
            "the watchdog's report",
        )
        # The tools answer again at once: at most one call says the bus went away, then a new
        # worker finds the bus the session's D-Bus starts again. (Apps that were connected to
        # the old bus do not reconnect: GTK 3 does not.)
        deadline = time.monotonic() + scaled(30)
        while True:
            status, body = await stack.act("desktop_apps", desktop_session_id=session)
            assert status == 200, body
            if body["a11y"] == {"available": True}:
                break
            assert "went away" in body["a11y"]["reason"], body
            assert time.monotonic() < deadline, body
            await asyncio.sleep(0.5)
        rows = (await stack.ok("desktop_status"))["desktops"]
        assert any(r["desktop_session_id"] == session and r["state"] == "running" for r in rows)
    finally:
        stopped = await stack.ok(
            "desktop_stop_confirm",
            relay=stack.seed.relay["name"],
            slot="bus",
            desktop_session_id=session,
        )
        assert stopped["stopped"] is True, stopped


async def test_acts_say_whether_they_took_effect(stack):
    """A native act is confirmed by an accessibility event of its app, a physical one by the
    screen; focusing what already has the focus changes nothing."""
    box = await _find_one(stack, 'check_box[name="Remember me"]')
    toggled = await stack.ok("desktop_click", ref=box["ref"])
    assert (toggled["method"], toggled["effect"]) == ("native", "changed"), toggled
    assert toggled["effect_ms"] >= 0
    # The click's and the first focus's own events may still be on their way (a loaded
    # machine delivers them late, to whichever act is being judged): once they have landed,
    # focusing what has the focus is judged to change nothing.
    verdicts = []
    for _ in range(10):
        again = await stack.ok("desktop_focus", ref=box["ref"])
        verdicts.append((again["method"], again["effect"]))
        if verdicts[-1] == ("native", "no_visible_change"):
            break
        await asyncio.sleep(0.5)
    assert verdicts[-1] == ("native", "no_visible_change"), verdicts
    name = await _find_one(stack, 'text[name="Name"]', window="relaydesk form")
    typed = await stack.ok("desktop_type", ref=name["ref"], text="effect")
    assert typed["effect"] == "changed", typed
    await stack.ok("desktop_key", ref=name["ref"], keys="End")
    pressed = await stack.ok("desktop_key", ref=name["ref"], keys="BackSpace")
    assert (pressed["method"], pressed["effect"]) == ("physical", "changed"), pressed
