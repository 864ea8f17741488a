"""The accessibility tools on a real Qt 5 app: in-process server, a real relay process, a real
desktop running the tests' Qt form (``tests/support/a11y_qt_app.py``) beside the GTK form,
read and driven over the real accessibility bus.

What the Qt app really did is read from the state file it writes on every change, not from
the tools under test. Where Qt differs from GTK (its windows' role and bounds, its action
names, no cache, no ``Component.ScrollTo``), the tests say what an agent sees.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio

from tests.support.a11y_stack import FORM, QT_FORM, A11yStack, a11y_stack, x_window_geometry
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

APP = "a11y_qt_app.py"
WINDOW = "relaydesk qt form"
STATE = "qt-form.json"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[A11yStack]:
    root = tmp_path_factory.mktemp("a11y-qt")
    async with a11y_stack(root, [QT_FORM, FORM]) as stack:
        await wait_until(lambda: stack.state(STATE) != {}, scaled(30), "the Qt form to start")
        await stack.wait_app(APP)
        yield stack


async def _find_one(stack: A11yStack, selector: str) -> dict[str, Any]:
    found = await stack.ok("desktop_find", selector=selector, app=APP)
    assert found["count"] == 1, found
    match: dict[str, Any] = found["matches"][0]
    return match


async def _focused_window(stack: A11yStack) -> str:
    listed = await stack.ok("desktop_apps")
    focused = [str(w["name"]) for a in listed["running"] for w in a["windows"] if w["focused"]]
    return focused[0] if focused else ""


async def _text(stack: A11yStack, ref: str) -> str:
    return str((await stack.ok("desktop_read", ref=ref))["text"])


async def _becomes(read: Callable[[], Awaitable[str]], expected: str) -> None:
    """Until ``read()`` answers ``expected`` (physical input reaches an app a moment later)."""
    deadline = time.monotonic() + scaled(10)
    while (seen := await read()) != expected:
        assert time.monotonic() < deadline, (seen, expected)
        await asyncio.sleep(0.2)


async def test_the_qt_app_is_listed_with_its_window_at_its_client_area(stack):
    app = await stack.wait_app(APP)
    assert isinstance(app["pid"], int) and app["command"] == "python3"
    window = next(w for w in app["windows"] if w["name"] == WINDOW)
    # A plain top-level QWidget is a "filler" (GTK's windows are frames).
    assert window["role"] == "filler" and window["showing"] is True
    geometry = await asyncio.to_thread(x_window_geometry, stack.display, WINDOW)
    assert geometry is not None
    # Qt's window bounds are its client area: the window manager's frame is not included.
    assert all(abs(a - g) <= 2 for a, g in zip(window["bounds"], geometry, strict=True)), (
        window["bounds"],
        geometry,
    )


async def test_observe_lists_the_forms_controls_by_name_and_role(stack):
    seen = await stack.ok("desktop_observe", window=WINDOW, format="both")
    text = seen["text"]
    assert seen["source"] == "a11y" and seen["window"] == WINDOW
    for expected in (
        'filler "relaydesk qt form"',
        'text "Name"',
        'check_box "Remember me"',
        'push_button "Save"',
        'label "Not saved"',
    ):
        assert expected in text, text
    # Qt lists manage their items: the list is shown with its item count, not its items.
    line = next(li for li in text.splitlines() if 'list "Colours"' in li)
    assert line.endswith("(3 children, not listed)"), line
    assert '"Red"' not in text
    save = next(e for e in seen["elements"] if e["name"] == "Save")
    _x, _y, width, height = save["bounds"]
    assert save["role"] == "push_button" and width > 0 and height > 0


async def test_find_returns_one_ref_and_click_presses_the_button(stack):
    before = stack.state(STATE)["clicks"]
    save = await _find_one(stack, 'push_button[name="Save"]')
    clicked = await stack.ok("desktop_click", ref=save["ref"])
    # Qt names its actions "Press", "Toggle", "SetFocus"
    assert (clicked["method"], clicked["native"]) == ("native", "Press")
    await wait_until(lambda: stack.state(STATE)["clicks"] == before + 1, scaled(10), "the click")
    status = await _find_one(stack, 'label[name^="Saved:"]')
    read = await stack.ok("desktop_read", ref=status["ref"])
    assert read["name"] == f"Saved: {stack.state(STATE)['saved']}"


async def test_type_sets_the_line_edit_exactly_and_save_keeps_it(stack):
    name = await _find_one(stack, 'text[name="Name"]')
    typed = await stack.ok("desktop_type", ref=name["ref"], text="Zoë 日本 ☃")
    assert typed["method"] == "native" and typed["text"] == "Zoë 日本 ☃"
    # Qt counts inserted text in UTF-16 code units: an emoji is two of them.
    appended = await stack.ok("desktop_type", ref=name["ref"], text="😀x", mode="append")
    assert appended["method"] == "native" and appended["text"] == "Zoë 日本 ☃😀x"
    read = await stack.ok("desktop_read", ref=name["ref"])
    assert read["text"] == "Zoë 日本 ☃😀x" and read["role"] == "text"
    assert {"EditableText", "Text"} <= set(read["interfaces"])
    save = await _find_one(stack, 'push_button[name="Save"]')
    await stack.ok("desktop_click", ref=save["ref"])
    await wait_until(lambda: stack.state(STATE)["saved"] == "Zoë 日本 ☃😀x", scaled(10), "the save")


async def test_click_on_the_check_box_toggles_it(stack):
    box = await _find_one(stack, 'check_box[name="Remember me"]')
    was = stack.state(STATE)["remember"]
    clicked = await stack.ok("desktop_click", ref=box["ref"])
    assert clicked["native"] == "Toggle"
    await wait_until(lambda: stack.state(STATE)["remember"] is (not was), scaled(10), "the toggle")
    read = await stack.ok("desktop_read", ref=box["ref"])
    assert ("checked" in read["states"]) is (not was)


async def test_keys_reach_a_qt_field_whose_window_is_not_the_active_one(stack):
    gtk_entry = (await stack.ok("desktop_find", selector='text[name="Name"]', app="a11y_app.py"))[
        "matches"
    ][0]
    await stack.ok("desktop_type", ref=gtk_entry["ref"], text="gtk")
    # GTK activates its window when one of its widgets takes the focus.
    await stack.ok("desktop_focus", ref=gtk_entry["ref"])
    await _becomes(lambda: _focused_window(stack), "relaydesk form")
    name = await _find_one(stack, 'text[name="Name"]')
    await stack.ok("desktop_type", ref=name["ref"], text="abc")
    await stack.ok("desktop_key", ref=name["ref"], keys="End")
    pressed = await stack.ok("desktop_key", ref=name["ref"], keys="BackSpace")
    assert pressed["method"] == "physical"
    await _becomes(lambda: _text(stack, name["ref"]), "ab")
    assert await _focused_window(stack) == WINDOW
    assert await _text(stack, gtk_entry["ref"]) == "gtk"
    await stack.ok("desktop_click", ref=(await _find_one(stack, 'push_button[name="Save"]'))["ref"])
    await wait_until(lambda: stack.state(STATE)["saved"] == "ab", scaled(10), "the save")


async def test_scrolling_into_view_is_refused_with_the_reason(stack):
    save = await _find_one(stack, 'push_button[name="Save"]')
    status, body = await stack.act("desktop_scroll", ref=save["ref"], into_view=True)
    assert (status, body["error"]["code"]) == (422, "action_failed"), body
    assert "ScrollTo" in body["error"]["message"] and body["error"]["suggestion"]
    assert (await stack.ok("desktop_read", ref=save["ref"]))["name"] == "Save"


async def test_reading_every_element_leaves_the_app_running(stack):
    app = await stack.wait_app(APP)
    seen = await stack.ok("desktop_observe", app=APP, view="all", format="json")
    everything = await stack.ok("desktop_find", selector="*", app=APP, limit=200)
    assert everything["count"] >= seen["nodes"] >= 7
    for element in seen["elements"]:
        await stack.ok("desktop_read", ref=element["ref"])
    os.kill(app["pid"], 0)  # still running
    again = await stack.ok("desktop_observe", window=WINDOW)
    assert 'push_button "Save"' in again["text"]
