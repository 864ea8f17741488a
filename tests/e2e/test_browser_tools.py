"""The browser tools through the HTTP API on the desktop's own Chromium (started by the relay,
reached over its DevTools pipe), against pages of the tests' own HTTP server: tabs, opening,
history, the page's accessibility tree with refs, clicks, fills and keys, waits, screenshots;
a person's takeover and Stop refuse what acts and leave the reads; bad input names its field."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
import websockets

from tests.support.a11y_stack import A11yStack
from tests.support.browser_stack import DOWNLOADS, browser_stack, form_tab_shown, page_server
from tests.support.processes import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with page_server() as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory, base_url: str
) -> AsyncIterator[A11yStack]:
    async with browser_stack(tmp_path_factory.mktemp("browser"), base_url) as stack:
        await form_tab_shown(stack)
        yield stack


async def _form(stack: A11yStack, base_url: str) -> dict[str, Any]:
    """The form page, freshly loaded in the showing tab, and its snapshot."""
    opened = await stack.ok("browser_open", url=f"{base_url}/form.html")
    assert opened["tab"]["title"] == "Order form" and opened["tab"]["loading"] is False
    return await stack.ok("browser_snapshot", max_nodes=1000)


def _ref(snapshot: dict[str, Any], line_part: str) -> str:
    for line in snapshot["text"].splitlines():
        if line_part in line:
            return str(line.split()[0])
    raise AssertionError(f"{line_part!r} not in:\n{snapshot['text']}")


async def test_tabs_list_the_page_the_browser_shows(stack, base_url):
    tabs = (await stack.ok("browser_tabs"))["tabs"]
    assert len(tabs) == 1, tabs
    tab = tabs[0]
    assert tab["url"] == f"{base_url}/form.html"
    assert (tab["title"], tab["active"], tab["loading"]) == ("Order form", True, False)


async def test_the_snapshot_lists_the_page_with_browser_refs(stack, base_url):
    seen = await _form(stack, base_url)
    assert seen["backend"] == "cdp"
    text = seen["text"]
    for expected in (
        'heading "Order form"',
        'entry "Customer"',
        'check_box "Gift wrap"',
        'push_button "Place order"',
        'link "Next page"',
        'table "Items"',
        # rows below the fold are in the page's tree too
        'table_cell "Item 60"',
    ):
        assert expected in text, text
    assert all(line.strip().startswith("@b") for line in text.splitlines())
    both = await stack.ok("browser_snapshot", format="json", max_nodes=10)
    assert len(both["elements"]) == 10 and both["truncated"]["budget"] is True
    assert "max_nodes" in both["note"]
    first = both["elements"][0]
    assert first["ref"].startswith("@b") and {"role", "name", "states"} <= set(first)


async def test_fill_and_click_submit_the_form(stack, base_url):
    seen = await _form(stack, base_url)
    filled = await stack.ok("browser_fill", ref=_ref(seen, 'entry "Customer"'), text="Ada")
    assert filled["value"] == "Ada" and filled["effect"] == "changed"
    again = await stack.ok("browser_fill", ref=_ref(seen, 'entry "Customer"'), text="Ada")
    assert again["value"] == "Ada" and again["effect"] == "no_visible_change"
    clicked = await stack.ok("browser_click", ref=_ref(seen, 'push_button "Place order"'))
    assert clicked["backend"] == "cdp" and clicked["effect"] == "changed"
    done = await stack.ok("browser_wait", **{"for": "selector"}, value='"Ordered: Ada"')
    assert done["satisfied"] is True
    after = await stack.ok("browser_snapshot", view="all", max_nodes=2000)
    assert '"Ordered: Ada"' in after["text"]


async def test_press_enter_in_a_field_submits_it(stack, base_url):
    seen = await _form(stack, base_url)
    field = _ref(seen, 'entry "Customer"')
    await stack.ok("browser_fill", ref=field, text="Grace")
    pressed = await stack.ok("browser_press", ref=field, keys="Enter")
    assert pressed["effect"] == "changed"
    done = await stack.ok("browser_wait", **{"for": "selector"}, value='"Ordered: Grace"')
    assert done["satisfied"] is True


async def test_select_picks_an_option_by_value_or_label(stack, base_url):
    seen = await _form(stack, base_url)
    size = _ref(seen, 'combo_box "Size"')
    by_label = await stack.ok("browser_select", ref=size, label="Large")
    assert by_label["selected"] == {"value": "l", "label": "Large"}, by_label
    assert by_label["backend"] == "cdp" and by_label["effect"] == "changed"
    await stack.ok("browser_wait", **{"for": "selector"}, value='"Size: l"')
    by_value = await stack.ok("browser_select", ref=size, value="m")
    assert by_value["selected"] == {"value": "m", "label": "Medium"}, by_value
    await stack.ok("browser_wait", **{"for": "selector"}, value='"Size: m"')
    again = await stack.ok("browser_select", ref=size, value="m")
    assert again["effect"] == "no_visible_change", again
    status, body = await stack.act("browser_select", ref=size, label="Huge")
    assert (status, body["error"]["code"]) == (422, "action_failed"), body
    assert "'Large'" in body["error"]["message"], body  # the options it offers
    status, body = await stack.act("browser_select", ref=_ref(seen, 'entry "Customer"'), value="x")
    assert (status, body["error"]["code"]) == (422, "action_failed"), body
    status, body = await stack.act("browser_select", ref=size)
    assert (status, body["error"]["field"]) == (400, "value"), body
    status, body = await stack.act("browser_select", ref=size, value="m", label="Medium")
    assert (status, body["error"]["field"]) == (400, "value"), body


async def test_hover_moves_the_pointer_onto_an_element(stack, base_url):
    seen = await _form(stack, base_url)
    hovered = await stack.ok("browser_hover", ref=_ref(seen, 'push_button "Hover for a tip"'))
    assert hovered["effect"] == "changed" and hovered["at"]["x"] > 0, hovered
    await stack.ok("browser_wait", **{"for": "selector"}, value="css:#tip:not(:empty)")
    shown = await stack.ok("browser_find", selector='"Tip shown"')
    assert shown["count"] == 1, shown


async def test_scroll_by_wheel_and_into_view(stack, base_url):
    seen = await _form(stack, base_url)
    down = await stack.ok("browser_scroll", dy=400)
    assert down["effect"] == "changed" and down["scroll"]["y"] > 0, down
    up = await stack.ok("browser_scroll", dy=-100000)
    assert up["scroll"] == {"x": 0, "y": 0}, up
    last = await stack.ok("browser_scroll", ref=_ref(seen, 'table_cell "Item 60"'))
    assert last["effect"] == "changed" and last["scroll"]["y"] > down["scroll"]["y"], last
    again = await stack.ok("browser_scroll", ref=_ref(seen, 'table_cell "Item 60"'))
    assert again["effect"] == "no_visible_change" and again["scroll"] == last["scroll"], again
    # A click on what shows moves nothing: its effect is the click's, not a scroll's.
    clicked = await stack.ok("browser_click", ref=_ref(seen, 'table_cell "Item 59"'))
    assert clicked["effect"] == "no_visible_change", clicked
    status, body = await stack.act("browser_scroll")
    assert (status, body["error"]["field"]) == (400, "ref"), body
    status, body = await stack.act("browser_scroll", dy=10**7)
    assert (status, body["error"]["field"]) == (400, "dy"), body


async def test_the_new_acts_find_a_ref_again_or_call_it_stale(stack, base_url):
    seen = await _form(stack, base_url)
    size, tip = _ref(seen, 'combo_box "Size"'), _ref(seen, 'push_button "Hover for a tip"')
    await stack.ok("browser_reload")
    assert (await stack.ok("browser_select", ref=size, label="Small"))["selected"]["value"] == "s"
    await stack.ok("browser_open", url=f"{base_url}/second.html")
    for name, args in (
        ("browser_select", {"ref": size, "value": "s"}),
        ("browser_hover", {"ref": tip}),
        ("browser_scroll", {"ref": tip}),
    ):
        status, body = await stack.act(name, **args)
        assert (status, body["error"]["code"]) == (409, "stale_ref"), (name, body)
        assert "browser_snapshot" in body["error"]["suggestion"]


async def test_a_ref_of_a_page_gone_is_stale(stack, base_url):
    seen = await _form(stack, base_url)
    gift = _ref(seen, 'check_box "Gift wrap"')
    await stack.ok("browser_open", url=f"{base_url}/second.html")
    status, body = await stack.act("browser_click", ref=gift)
    assert status == 409, body
    assert body["error"]["code"] == "stale_ref"
    assert "browser_snapshot" in body["error"]["suggestion"]
    status, body = await stack.act("browser_click", ref="@bzzzzzzz:e1")
    assert (status, body["error"]["code"]) == (404, "snapshot_not_found"), body


async def test_a_ref_is_found_again_after_a_reload(stack, base_url):
    seen = await _form(stack, base_url)
    button = _ref(seen, 'push_button "Place order"')
    await stack.ok("browser_reload")
    # The node behind the ref went with the old document; the one button of that name is used.
    await stack.ok("browser_fill", ref=_ref(seen, 'entry "Customer"'), text="Linus")
    await stack.ok("browser_click", ref=button)
    await stack.ok("browser_wait", **{"for": "selector"}, value='"Ordered: Linus"')


async def test_history_goes_back_and_forward(stack, base_url):
    await _form(stack, base_url)
    await stack.ok("browser_open", url=f"{base_url}/second.html")
    back = await stack.ok("browser_back")
    assert back["tab"]["url"] == f"{base_url}/form.html"
    forward = await stack.ok("browser_forward")
    assert forward["tab"]["url"] == f"{base_url}/second.html"
    assert forward["tab"]["title"] == "Second page"


async def test_new_tabs_open_and_close(stack, base_url):
    await _form(stack, base_url)
    opened = await stack.ok("browser_open", url=f"{base_url}/second.html", new_tab=True)
    tabs = (await stack.ok("browser_tabs"))["tabs"]
    assert len(tabs) == 2, tabs
    assert [t["active"] for t in tabs if t["id"] == opened["tab"]["id"]] == [True]
    left = await stack.ok("browser_close_tab", tab=opened["tab"]["id"])
    assert [t["title"] for t in left["tabs"]] == ["Order form"]


async def test_waits_for_an_element_a_url_and_the_network(stack, base_url):
    await stack.ok("browser_open", url=f"{base_url}/late.html")
    arrived = await stack.ok(
        "browser_wait", **{"for": "selector"}, value='push_button[name="Arrived"]', timeout_s=10
    )
    assert arrived["satisfied"] is True
    await stack.ok("browser_wait", **{"for": "selector"}, value="css:#arrived")
    await stack.ok("browser_wait", **{"for": "url"}, value="*/late.html")
    await stack.ok("browser_wait", **{"for": "network_idle"}, timeout_s=10)
    await stack.ok("browser_wait", **{"for": "load"})
    status, body = await stack.act(
        "browser_wait", **{"for": "selector"}, value="css:#never", timeout_s=0.5
    )
    assert (status, body["error"]["code"]) == (504, "timeout"), body


async def test_screenshots_are_pngs_of_the_page(stack, base_url):
    await _form(stack, base_url)
    shot = await stack.ok("browser_screenshot")
    data = base64.b64decode(shot["image"])
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot["width"] > 200 and shot["height"] > 200
    full = await stack.ok("browser_screenshot", full_page=True)
    assert full["height"] > shot["height"]  # the table runs below the fold


def _gift_checked(snapshot: dict[str, Any]) -> bool:
    line = next(x for x in snapshot["text"].splitlines() if 'check_box "Gift wrap"' in x)
    return "checked" in line


async def test_an_act_on_a_stale_screenshot_is_refused_and_does_nothing(stack, base_url):
    seen = await _form(stack, base_url)
    gift = _ref(seen, 'check_box "Gift wrap"')
    shot = await stack.ok("browser_screenshot")
    assert shot["revision"].startswith("bs"), shot
    clicked = await stack.ok("browser_click", ref=gift, expected_revision=shot["revision"])
    assert clicked["guard"]["checked"] is True and clicked["guard"]["stale"] is False, clicked
    assert _gift_checked(await stack.ok("browser_snapshot", max_nodes=1000))
    # The box is ticked now: the screenshot no longer shows what is there.
    status, body = await stack.act("browser_click", ref=gift, expected_revision=shot["revision"])
    assert (status, body["error"]["code"]) == (409, "stale_screen"), body
    assert body["error"]["difference"] > body["error"]["threshold"], body
    assert "browser_screenshot" in body["error"]["suggestion"]
    assert _gift_checked(await stack.ok("browser_snapshot", max_nodes=1000))  # not clicked
    fresh = await stack.ok("browser_screenshot")
    await stack.ok("browser_click", ref=gift, expected_revision=fresh["revision"])
    assert not _gift_checked(await stack.ok("browser_snapshot", max_nodes=1000))


async def test_a_screenshot_guards_only_what_it_shows(stack, base_url):
    seen = await _form(stack, base_url)
    last = _ref(seen, 'table_cell "Item 60"')
    shown = await stack.ok("browser_screenshot")
    status, body = await stack.act("browser_hover", ref=last, expected_revision=shown["revision"])
    assert (status, body["error"]["code"]) == (409, "stale_screen"), body
    assert "does not show" in body["error"]["message"], body
    whole = await stack.ok("browser_screenshot", full_page=True)
    assert whole["page_region"]["height"] > shown["page_region"]["height"], whole
    hovered = await stack.ok("browser_hover", ref=last, expected_revision=whole["revision"])
    assert hovered["guard"]["stale"] is False, hovered
    # Scrolled since: the element still looks as in the whole page's image.
    await stack.ok("browser_click", ref=last, expected_revision=whole["revision"])
    status, body = await stack.act(
        "browser_click", ref=last, expected_revision="bs0123456789abcdef"
    )
    assert (status, body["error"]["code"]) == (409, "revision_expired"), body
    status, body = await stack.act("browser_click", ref=last, expected_revision="sr1.x.y")
    assert (status, body["error"]["field"]) == (400, "expected_revision"), body


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "file:///etc/passwd"}, "url"),
        ({"url": "javascript:alert(1)"}, "url"),
        ({"url": "chrome://settings"}, "url"),
        ({"url": "http://"}, "url"),
        ({"url": 5}, "url"),
        ({}, "url"),
        ({"url": "about:blank", "timeout_s": 600}, "timeout_s"),
        ({"url": "about:blank", "surprise": 1}, "surprise"),
    ],
)
async def test_bad_open_arguments_name_the_field(stack, body, field):
    status, answer = await stack.act("browser_open", **body)
    assert status == 400, answer
    assert answer["error"]["field"] == field, answer


async def test_bad_refs_tabs_and_selectors_are_refused_by_name(stack):
    status, body = await stack.act("browser_click", ref="@s1234567:e1")
    assert (status, body["error"]["field"]) == (400, "ref"), body
    status, body = await stack.act("browser_close_tab", tab="0123456789ABCDEF")
    assert (status, body["error"]["code"], body["error"]["field"]) == (404, "not_found", "tab")
    status, body = await stack.act("browser_wait", **{"for": "selector"}, value='button[name="x')
    assert (status, body["error"]["field"]) == (400, "value"), body
    status, body = await stack.act("browser_wait", **{"for": "url"})
    assert (status, body["error"]["field"]) == (400, "value"), body
    status, body = await stack.act("browser_press", keys="hyper+q")
    assert (status, body["error"]["field"]) == (400, "keys"), body


async def test_a_persons_takeover_refuses_acts_and_leaves_reads(stack, base_url):
    seen = await _form(stack, base_url)
    await stack.ok("desktop_take_control", person=True)
    try:
        status, body = await stack.act("browser_click", ref=_ref(seen, 'check_box "Gift wrap"'))
        assert (status, body["error"]["code"]) == (423, "takeover_active"), body
        status, body = await stack.act("browser_scroll", dy=300)
        assert (status, body["error"]["code"]) == (423, "takeover_active"), body
        status, body = await stack.act("browser_open", url=f"{base_url}/second.html")
        assert (status, body["error"]["code"]) == (423, "takeover_active"), body
        assert (await stack.ok("browser_snapshot"))["text"]
        assert (await stack.ok("browser_screenshot"))["image"]
    finally:
        await stack.ok("desktop_hand_back", person=True)
    tabs = (await stack.ok("browser_tabs"))["tabs"]
    assert [t["title"] for t in tabs] == ["Order form"]  # nothing was opened


async def test_acts_are_audited(stack, base_url):
    seen = await _form(stack, base_url)
    await stack.ok("browser_click", ref=_ref(seen, 'check_box "Gift wrap"'))
    await stack.ok("browser_select", ref=_ref(seen, 'combo_box "Size"'), value="l")
    await stack.ok("browser_hover", ref=_ref(seen, 'check_box "Gift wrap"'))
    await stack.ok("browser_scroll", dy=10)
    rows = await stack.app.state.parts.store.list_audit(relay_id=stack.relay_id)
    ops = [(row.op, row.outcome) for row in rows]
    assert ("desktop.browser.click", "click") in ops, ops
    for act in ("select", "hover", "scroll"):
        assert (f"desktop.browser.{act}", act) in ops, ops
    assert ("desktop.browser.open", "open") in ops, ops
    assert f"{base_url}" not in repr([row.details for row in rows])  # never the URL


async def test_find_by_accessibility_and_css_selectors(stack, base_url):
    await _form(stack, base_url)
    found = await stack.ok("browser_find", selector='push_button[name="Place order"]')
    assert found["count"] == 1 and found["matches"][0]["role"] == "push_button", found
    by_css = await stack.ok("browser_find", selector="css:#customer")
    assert [(m["role"], m["name"]) for m in by_css["matches"]] == [("entry", "Customer")]
    await stack.ok("browser_fill", ref=by_css["matches"][0]["ref"], text="Barbara")
    await stack.ok("browser_click", ref=found["matches"][0]["ref"])
    await stack.ok("browser_wait", **{"for": "selector"}, value='"Ordered: Barbara"')
    cells = await stack.ok("browser_find", selector="css:td", limit=200)
    assert cells["count"] == 120, cells["count"]
    status, body = await stack.act("browser_find", selector='push_button[name="Place')
    assert (status, body["error"]["field"]) == (400, "selector"), body
    assert "column" in body["error"]["message"], body
    status, body = await stack.act("browser_find", selector="css:#[")
    assert (status, body["error"]["field"]) == (400, "selector"), body
    status, body = await stack.act("browser_find", selector="css:")
    assert (status, body["error"]["field"]) == (400, "selector"), body


async def test_evaluate_is_off_unless_the_relay_allows_it(stack, base_url):
    status, body = await stack.act("browser_evaluate", expression="document.title")
    assert (status, body["error"]["code"]) == (403, "forbidden"), body
    assert "RELAYDESK_BROWSER_EVALUATE=1" in body["error"]["message"]


async def test_downloads_land_in_the_desktops_downloads_folder(stack, base_url):
    seen = await _form(stack, base_url)
    await stack.ok("browser_click", ref=_ref(seen, 'link "Download the prices"'))
    deadline = time.monotonic() + scaled(30)
    while True:
        listed = (await stack.ok("browser_downloads"))["downloads"]
        done = [d for d in listed if d["file"] == "prices.csv" and d["state"] == "completed"]
        if done:
            break
        assert time.monotonic() < deadline, listed
        await asyncio.sleep(0.3)
    assert done[0]["received_bytes"] == len(DOWNLOADS["/prices.csv"])
    folder = await stack.ok("desktop_files_list", path="Downloads")
    assert [(e["name"], e["size"]) for e in folder["entries"]] == [
        ("prices.csv", len(DOWNLOADS["/prices.csv"]))
    ], folder
    read = await stack.ok("desktop_file_read", path="Downloads/prices.csv")
    assert read["content"].startswith("item,price\nItem 1,3\n"), read


async def test_stop_refuses_the_browser_acts(stack, base_url):
    # Last: Stop refuses agent input for a while afterwards.
    seen = await _form(stack, base_url)
    await stack.ok("agent_stop", person=True)
    status, body = await stack.act("browser_click", ref=_ref(seen, 'check_box "Gift wrap"'))
    assert (status, body["error"]["code"]) == (409, "stopped_by_user"), body
    assert (await stack.ok("browser_tabs"))["tabs"]


async def test_the_cdp_endpoint_refuses_script_on_a_relay_that_refuses_it(stack):
    # This relay runs without RELAYDESK_BROWSER_EVALUATE=1: reads pass, script is refused.
    cid = stack.seed.conversation_id
    path = f"/api/v1/conversations/{cid}/cdp/{stack.relay_id}/virtual/main"
    headers = {"Authorization": f"Bearer {stack.seed.api_token}"}
    async with websockets.connect(
        "ws" + stack.url.removeprefix("http") + path, additional_headers=headers
    ) as socket:
        await socket.send(json.dumps({"id": 1, "method": "Runtime.evaluate", "params": {}}))
        refused = json.loads(await asyncio.wait_for(socket.recv(), scaled(30)))
        await socket.send(json.dumps({"id": 2, "method": "Browser.getVersion"}))
        version = json.loads(await asyncio.wait_for(socket.recv(), scaled(30)))
    assert refused["id"] == 1, refused
    assert refused["error"]["message"].startswith("forbidden: script"), refused
    assert "RELAYDESK_BROWSER_EVALUATE=1" in refused["error"]["message"]
    assert "Chrome" in version["result"]["product"], version
