"""The browser's pure parts: DevTools framing on the pipe, the browser's private command line,
key chords, the snapshot's rendering and refs."""

from __future__ import annotations

import pytest

from relay.browser.acts import parse_keys
from relay.browser.cdp import Framer, encode
from relay.browser.pipe import PIPE_FLAG, is_browser, private_argv
from relay.browser.service import home_file_url
from relay.browser.shots import Region
from relay.browser.snapshot import Snapshots, Tree, render
from wire import browser as rules
from wire.errors import InvalidArgs, OpError

pytestmark = pytest.mark.unit


def test_messages_are_split_at_nul_across_chunks():
    framer = Framer()
    data = encode({"id": 1, "result": {}}) + encode({"method": "Page.loadEventFired"})
    assert framer.feed(data[:5]) == []
    assert framer.feed(data[5:20]) == []
    assert framer.feed(data[20:]) == [{"id": 1, "result": {}}, {"method": "Page.loadEventFired"}]
    # not JSON, or not an object: dropped, the next message still arrives
    assert framer.feed(b"nope\0[1]\0" + encode({"id": 2})) == [{"id": 2}]


def test_a_lone_surrogate_the_browser_escapes_still_arrives_and_can_be_sent():
    # What Chromium writes for Runtime.evaluate of 'a\ud800b' (JavaScript strings may hold one).
    written = b'{"id":3,"result":{"result":{"type":"string","value":"a\\ud800b"}}}\0'
    framer = Framer()
    assert framer.feed(written) == [
        {"id": 3, "result": {"result": {"type": "string", "value": "a\ud800b"}}}
    ]
    sent = encode({"id": 4, "method": "Input.insertText", "params": {"text": "a\ud800b"}})
    assert Framer().feed(sent) == [
        {"id": 4, "method": "Input.insertText", "params": {"text": "a\ud800b"}}
    ]


def test_encode_ends_each_message_with_one_nul():
    assert encode({"id": 7, "method": "Target.getTargets", "params": {}}) == (
        b'{"id":7,"method":"Target.getTargets","params":{}}\0'
    )


def test_the_browser_gets_the_pipe_and_loses_any_port():
    argv = private_argv(
        ["chromium", "--remote-debugging-port=9222", "--remote-debugging-address=0.0.0.0", "x"]
    )
    assert argv == ["chromium", PIPE_FLAG, "x"]
    assert is_browser(["/usr/bin/chromium"]) and is_browser(["google-chrome"])
    assert not is_browser(["code"]) and not is_browser(["xterm"]) and not is_browser([])


@pytest.mark.parametrize(
    ("keys", "key", "modifiers", "text"),
    [
        ("Enter", "Enter", 0, "\r"),
        ("ctrl+a", "a", 2, "a"),
        ("shift+Tab", "Tab", 8, ""),
        ("x", "x", 0, "x"),
        ("F5", "F5", 0, ""),
    ],
)
def test_key_chords(keys, key, modifiers, text):
    parsed, bits = parse_keys(keys)
    assert (parsed.key, bits, parsed.text) == (key, modifiers, text)


@pytest.mark.parametrize("keys", ["hyper+a", "Enterr", "ctrl+"])
def test_unknown_keys_name_the_field(keys):
    with pytest.raises(InvalidArgs) as caught:
        parse_keys(keys)
    assert caught.value.details["field"] == "keys"


def _node(
    node_id: int,
    role: str,
    name: str = "",
    children: tuple[int, ...] = (),
    backend: int | None = None,
    ignored: bool = False,
    **props: object,
) -> dict[str, object]:
    return {
        "nodeId": str(node_id),
        "role": {"value": role},
        "name": {"value": name},
        "childIds": [str(c) for c in children],
        "backendDOMNodeId": backend if backend is not None else 100 + node_id,
        "ignored": ignored,
        "properties": [{"name": k, "value": {"value": v}} for k, v in props.items()],
    }


TREE = {
    "nodes": [
        _node(1, "RootWebArea", "Order form", (2, 3)),
        _node(2, "generic", "", (4, 5), ignored=True),
        _node(3, "table", "Items", (6,)),
        _node(4, "textbox", "Customer", focused=True),
        _node(5, "button", "Place order", disabled=True),
        _node(6, "cell", "Item 1", (7,)),
        _node(7, "StaticText", "Item 1"),
    ]
}


def test_the_tree_renders_like_desktop_observe():
    snapshot = Snapshots().new("session", "TAB")
    result = render(Tree.of(TREE), snapshot, 64, 400, "interactive", "both")
    lines = result["text"].splitlines()
    sid = snapshot.id
    assert lines == [
        f'@b{sid}:e1 document_web "Order form"',
        f'  @b{sid}:e2 entry "Customer" [focused]',
        f'  @b{sid}:e3 push_button "Place order" [disabled]',
        f'  @b{sid}:e4 table "Items"',
        f'    @b{sid}:e5 table_cell "Item 1"',
    ]
    assert result["truncated"] == {"budget": False, "depth": False}
    assert result["elements"][1]["states"] == ["enabled", "focused"]
    assert all(rules.REF_RE.match(e["ref"]) for e in result["elements"])


def test_the_budget_and_depth_cut_and_say_so():
    cut = render(Tree.of(TREE), Snapshots().new("s", "T"), 64, 2, "interactive", "text")
    assert cut["nodes"] == 2 and cut["truncated"]["budget"] is True and "note" in cut
    shallow = render(Tree.of(TREE), Snapshots().new("s", "T"), 1, 400, "interactive", "text")
    assert shallow["truncated"]["depth"] is True
    assert "table_cell" not in shallow["text"]


def test_refs_of_another_desktop_or_forgotten_snapshots_are_refused():
    snapshots = Snapshots()
    snapshot = snapshots.new("one", "TAB")
    ref = render(Tree.of(TREE), snapshot, 64, 400, "interactive", "text")["text"].split()[0]
    assert snapshots.element(ref, "one")[1].name == "Order form"
    with pytest.raises(OpError) as caught:
        snapshots.element(ref, "two")
    assert caught.value.code.value == "snapshot_not_found"
    with pytest.raises(OpError) as caught:
        snapshots.element(f"@b{snapshot.id}:e99", "one")
    assert caught.value.code.value == "element_not_found"


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://example.org/a?b=c", True),
        ("http://127.0.0.1:8080/", True),
        ("about:blank", True),
        ("file:///etc/passwd", False),
        ("javascript:alert(1)", False),
        ("data:text/html,hi", False),
        ("chrome://settings", False),
        ("example.org", False),
        ("https://", False),
    ],
)
def test_url_schemes(url, ok):
    if ok:
        assert rules.check_url(url) == url
    else:
        with pytest.raises(InvalidArgs) as caught:
            rules.check_url(url)
        assert caught.value.details["field"] == "url"


def test_a_select_names_one_option_by_value_or_label():
    assert rules.check_select({"value": "m"}) == ("value", "m")
    assert rules.check_select({"label": "Medium", "value": None}) == ("label", "Medium")
    for params in ({}, {"value": "m", "label": "Medium"}):
        with pytest.raises(InvalidArgs) as err:
            rules.check_select(params)
        assert err.value.details["field"] == "value"
    with pytest.raises(InvalidArgs) as err:
        rules.check_select({"label": 5})
    assert err.value.details["field"] == "label"


def test_a_scroll_is_into_view_or_by_a_bounded_distance():
    assert rules.check_scroll({"ref": "@b1234567:e1"}) is None
    assert rules.check_scroll({"dy": 300}) == (0.0, 300.0)
    assert rules.check_scroll({"dx": -20.5, "ref": "@b1234567:e1"}) == (-20.5, 0.0)
    for params, field in (
        ({}, "ref"),
        ({"dy": True}, "dy"),
        ({"dx": rules.SCROLL_MAX + 1}, "dx"),
        ({"dy": "down"}, "dy"),
    ):
        with pytest.raises(InvalidArgs) as err:
            rules.check_scroll(params)
        assert err.value.details["field"] == field, params


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("file:///home/u/page.html", None),
        ("file://localhost/home/u/a%20b.html", None),
        ("file:~/notes/page.html", None),
        ("file:~/../other/page.html", "go up"),
        ("file:///home/u/../../etc/passwd", "go up"),
        ("file:///home/u/%2e%2e/x", "go up"),
        ("file://other-host/home/u/x", "another"),
        ("file:relative.html", "from the home"),
    ],
)
def test_file_urls_pass_only_where_allowed_and_never_go_up(url, problem):
    with pytest.raises(InvalidArgs) as refused:
        rules.check_url(url)
    assert "RELAYDESK_BROWSER_ALLOW_FILE=1" in str(refused.value)
    if problem is None:
        assert rules.check_url(url, allow_file=True) == url
    else:
        with pytest.raises(InvalidArgs) as caught:
            rules.check_url(url, allow_file=True)
        assert problem in str(caught.value) and caught.value.details["field"] == "url"


def test_a_home_file_is_followed_to_its_end_and_kept_in_the_home(tmp_path):
    home = tmp_path / "home"
    (home / "site").mkdir(parents=True)
    (home / "site" / "page.html").write_text("<title>x</title>")
    (tmp_path / "secret.txt").write_text("no")
    (home / "out.html").symlink_to(tmp_path / "secret.txt")
    (home / "in.html").symlink_to(home / "site" / "page.html")
    page = (home / "site" / "page.html").as_uri()
    assert home_file_url("file:~/site/page.html", home) == page
    assert home_file_url("file:~/in.html", home) == page  # the link's end, inside
    assert home_file_url(page, home) == page
    for outside in ("file:~/out.html", (tmp_path / "secret.txt").as_uri()):
        with pytest.raises(InvalidArgs) as caught:
            home_file_url(outside, home)
        assert "home" in str(caught.value)
    with pytest.raises(OpError) as missing:
        home_file_url("file:~/site/none.html", home)
    assert missing.value.code.value == "not_found"


def test_a_screenshot_region_holds_and_cuts():
    shown = Region(0, 100, 800, 600)
    assert shown.holds(Region(10, 120, 50, 20))
    assert not shown.holds(Region(10, 690, 50, 20))  # runs past the bottom
    assert shown.within(Region(-20, 90, 60, 40)) == Region(0, 100, 40, 30)
    assert shown.clip() == {"x": 0, "y": 100, "width": 800, "height": 600, "scale": 1.0}
