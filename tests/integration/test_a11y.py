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
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.support.processes import ProcessTracker, scaled
from tests.support.stack import Seed, inprocess_server, seed_database, start_relay, wait_until
from tests.support.xrecorder import XRecorder
from wire.ids import RelayId

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

FORM_APP = Path(__file__).resolve().parents[1] / "support" / "a11y_app.py"
SNAPSHOT_TTL_S = 6


@dataclass
class Stack:
    app: Any
    url: str
    seed: Seed
    relay_id: str
    session_id: str
    display: str
    state_file: Path

    async def act(self, name: str, **body: Any) -> tuple[int, dict[str, Any]]:
        payload = {"conversation_id": self.seed.conversation_id, **body}
        headers = {"Authorization": f"Bearer {self.seed.api_token}"}
        async with httpx.AsyncClient(base_url=self.url, timeout=scaled(60)) as client:
            response = await client.post(f"/api/v1/actions/{name}", json=payload, headers=headers)
        return response.status_code, response.json()

    async def ok(self, name: str, **body: Any) -> dict[str, Any]:
        status, result = await self.act(name, **body)
        assert status == 200, result
        assert result["ok"] is True
        return result

    def state(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    root = tmp_path_factory.mktemp("a11y")
    # The form runs as the desktop's user: its state file lives where that user may write.
    shared = Path(tempfile.mkdtemp(prefix="relaydesk-a11y-"))
    os.chmod(shared, 0o777)  # noqa: S103 - a test's exchange directory, removed at the end
    state_file = shared / "form.json"
    seed = await seed_database(root / "data")
    tracker = ProcessTracker(root / "processes")
    env = {
        "RELAYDESK_DESKTOP_APPS": f"/usr/bin/python3 {FORM_APP} {state_file},gtk3-widget-factory",
        "RELAYDESK_A11Y_SNAPSHOT_TTL_S": str(SNAPSHOT_TTL_S),
        "RELAYDESK_A11Y_DENY_APPS": "denied-app",
        "DISPLAY": "",
    }
    async with inprocess_server(seed) as (app, url):
        relay = start_relay(
            tracker.start, seed, url, env=env, extra_args=("--stop-desktops-on-exit",)
        )
        relay_id = seed.relay["relay_id"]
        try:
            await wait_until(
                lambda: app.state.services.hub.is_connected(RelayId(relay_id)), 20,
                "the relay to connect",
            )  # fmt: skip
            stack = Stack(app, url, seed, relay_id, "", "", state_file)
            started = await stack.ok("desktop_start", geometry="1280x800", profile="minimal")
            stack.session_id = started["desktop"]["desktop_session_id"]
            stack.display = started["desktop"]["display"]
            await wait_until(lambda: stack.state() != {}, scaled(30), "the form to start")
            yield stack
        except BaseException:
            print(relay.log_tail())
            raise
        finally:
            if os.environ.get("A11Y_DEBUG"):
                print(relay.log_tail())
            tracker.cleanup()
            for leftover in shared.iterdir():
                leftover.unlink()
            shared.rmdir()


async def _wait_app(stack: Stack, name: str) -> dict[str, Any]:
    deadline = time.monotonic() + scaled(30)
    while True:
        listed = await stack.ok("desktop_apps")
        for app in listed["running"]:
            if app["name"] == name and app["windows"]:
                return app
        assert time.monotonic() < deadline, listed
        await asyncio.sleep(0.2)


async def _find_one(stack: Stack, selector: str, **scope: Any) -> dict[str, Any]:
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
    x, y, width, height = window["bounds"]
    assert width >= 200 and height >= 100
    assert isinstance(form["pid"], int) and isinstance(factory["pid"], int)
    listed = await stack.ok("desktop_apps")
    assert listed["a11y"] == {"available": True}
    assert listed["source"] if "source" in listed else True


async def test_observe_lists_the_forms_controls_by_name(stack):
    await _wait_app(stack, "a11y_app.py")
    seen = await stack.ok("desktop_observe", window="relaydesk form")
    text = seen["text"]
    assert seen["source"] == "a11y"
    for expected in ('push_button "Save"', 'check_box "Remember me"', 'push_button "Open details"',
                     'text "Name"'):  # fmt: skip
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
    full = {li.strip().split(" ", 1)[1] for li in everything["text"].splitlines()
            if li.split()[1] in controls}  # fmt: skip
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
    waited = await stack.ok("desktop_wait", selector='push_button[name="Close"]',
                            app="a11y_app.py", timeout_ms=10000)  # fmt: skip
    assert waited["satisfied"] is True
    close = waited["matches"][0]
    await stack.ok("desktop_click", ref=close["ref"])
    gone = await stack.ok("desktop_wait", selector='push_button[name="Close"]',
                          app="a11y_app.py", condition="gone", timeout_ms=10000)  # fmt: skip
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


async def test_only_write_members_may_act(stack):
    # A read-only member sees but cannot act (role check before anything reaches the relay).
    status, body = await stack.act("desktop_click", ref="@abcdef12:e1",
                                   conversation_id="nonexistent-conv")  # fmt: skip
    assert status in (403, 404), body


async def test_the_app_window_is_seen_by_an_independent_x_client(stack):
    # The form's window is really mapped where the tools say it is.
    recorder = XRecorder(stack.display, scaled(10))
    try:
        form = await _wait_app(stack, "a11y_app.py")
        window = next(w for w in form["windows"] if w["name"] == "relaydesk form")
        x, y, width, height = window["bounds"]
        assert 0 <= x < 1280 and 0 <= y < 800
    finally:
        recorder.stop()
