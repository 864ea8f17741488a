"""Acting on a snapshot's element in the page: found again live, then clicked, filled,
pressed into, hovered or scrolled with the browser's own input events (``Input.*``: they reach
the page, not the desktop's pointer); a ``<select>``'s option is picked in the page itself, as
choosing it from the list does."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Final

from relay.browser.cdp import CdpError
from relay.browser.snapshot import Element, Tree, role_of
from relay.browser.tabs import Browser
from wire.errors import ErrorCode, InvalidArgs, OpError

# Scrolled only when not wholly in view (then centred), so an act on what shows moves nothing.
_INTO_VIEW: Final = (
    "if(this.scrollIntoViewIfNeeded){this.scrollIntoViewIfNeeded(true);}"
    "else{this.scrollIntoView({block:'center',inline:'center'});}"
)
_CENTRE: Final = (
    "function(){"
    + _INTO_VIEW
    + "const r=this.getBoundingClientRect();return [r.left+r.width/2,r.top+r.height/2,"
    "r.width,r.height];}"
)
_FOCUS: Final = (
    "function(){this.focus();"
    "if(this.select&&('value' in this)){this.select();}"
    "else if(this.isContentEditable){const r=document.createRange();r.selectNodeContents(this);"
    "const s=getSelection();s.removeAllRanges();s.addRange(r);}"
    "return document.activeElement===this||this.contains(document.activeElement);}"
)
# Picks the option whose value (or label: its text) is ``wanted``, as a person's choice
# would: the page hears ``input`` and ``change`` when the selection moved.
_SELECT: Final = (
    "function(by,wanted){if(this.tagName!=='SELECT'){return {error:'not_select'};}"
    "const all=Array.from(this.options);"
    "const o=all.find(o=>by==='value'?o.value===wanted:"
    "(o.label===wanted||o.text.trim()===wanted));"
    "if(!o){return {error:'no_option',options:all.slice(0,20).map(o=>o.label)};}"
    "if(o.disabled){return {error:'disabled'};}"
    "this.focus();if(!o.selected){o.selected=true;"
    "this.dispatchEvent(new Event('input',{bubbles:true}));"
    "this.dispatchEvent(new Event('change',{bubbles:true}));}"
    "return {value:o.value,label:o.label};}"
)
_PAGE_SCROLL: Final = "[Math.round(scrollX),Math.round(scrollY)]"
_VALUE: Final = "function(){return ('value' in this)?String(this.value):this.innerText;}"
# A wheel's scroll may glide: its end is read every 50 ms, for at most a second.
SCROLL_SETTLE_S: Final = 0.05
SCROLL_SETTLE_READS: Final = 20
PRESS_RELEASE: Final = ("mousePressed", "mouseReleased")
MODIFIERS: Final = {"alt": 1, "ctrl": 2, "control": 2, "meta": 4, "super": 4, "shift": 8}


@dataclass(frozen=True)
class Key:
    key: str
    code: str
    key_code: int
    text: str = ""


NAMED_KEYS: Final[dict[str, Key]] = {
    "enter": Key("Enter", "Enter", 13, "\r"),
    "return": Key("Enter", "Enter", 13, "\r"),
    "tab": Key("Tab", "Tab", 9),
    "escape": Key("Escape", "Escape", 27),
    "esc": Key("Escape", "Escape", 27),
    "backspace": Key("Backspace", "Backspace", 8),
    "delete": Key("Delete", "Delete", 46),
    "space": Key(" ", "Space", 32, " "),
    "arrowup": Key("ArrowUp", "ArrowUp", 38),
    "up": Key("ArrowUp", "ArrowUp", 38),
    "arrowdown": Key("ArrowDown", "ArrowDown", 40),
    "down": Key("ArrowDown", "ArrowDown", 40),
    "arrowleft": Key("ArrowLeft", "ArrowLeft", 37),
    "left": Key("ArrowLeft", "ArrowLeft", 37),
    "arrowright": Key("ArrowRight", "ArrowRight", 39),
    "right": Key("ArrowRight", "ArrowRight", 39),
    "home": Key("Home", "Home", 36),
    "end": Key("End", "End", 35),
    "pageup": Key("PageUp", "PageUp", 33),
    "pagedown": Key("PageDown", "PageDown", 34),
    **{f"f{n}": Key(f"F{n}", f"F{n}", 111 + n) for n in range(1, 13)},
}


def parse_keys(keys: str) -> tuple[Key, int]:
    """``ctrl+a``, ``Enter``, ``shift+Tab``: the key and the modifier bits."""
    *mods, name = keys.split("+") if keys != "+" else ["+"]
    bits = 0
    for mod in mods:
        if mod.lower() not in MODIFIERS:
            raise InvalidArgs("keys", f"unknown modifier {mod!r}")
        bits |= MODIFIERS[mod.lower()]
    if name.lower() in NAMED_KEYS:
        return NAMED_KEYS[name.lower()], bits
    if len(name) != 1:
        raise InvalidArgs("keys", f"unknown key {name!r}")
    upper = name.upper()
    code = (
        f"Key{upper}"
        if upper.isalpha() and upper.isascii()
        else (f"Digit{name}" if name.isdigit() else "")
    )
    return Key(name, code, ord(upper) if upper.isascii() else 0, name), bits


async def resolve(browser: Browser, tab: str, element: Element, checked: bool = True) -> str:
    """A live handle (object id) on the element: its DOM node while it is connected, else the
    one node of the page with its role and name; ``stale_ref`` when there is none.
    ``checked=False``: the node's handle unchecked (the caller's first call on it checks that
    it is still in the page, and calls :func:`relocate` when it is not)."""
    object_id = await _object(browser, tab, element.backend_node_id)
    if object_id is not None and (
        not checked or await _call(browser, tab, object_id, "function(){return this.isConnected;}")
    ):
        return object_id
    return await relocate(browser, tab, element)


async def relocate(browser: Browser, tab: str, element: Element) -> str:
    """The one node of the page with the element's role and name; ``stale_ref`` if none."""
    tree = Tree.of(await browser.send(tab, "Accessibility.getFullAXTree"))
    same = [
        n
        for n in tree.nodes.values()
        if not n.get("ignored")
        and n.get("backendDOMNodeId") is not None
        and role_of(n) == element.role
        and str((n.get("name") or {}).get("value", "")) == element.name
    ]
    if len(same) == 1:
        found = await _object(browser, tab, int(same[0]["backendDOMNodeId"]))
        if found is not None:
            return found
    raise stale(element)


def stale(element: Element) -> OpError:
    return OpError(
        ErrorCode.STALE_REF,
        f"the {element.role} {element.name[:60]!r} is no longer on the page",
        {"field": "ref", "suggestion": "take a new browser_snapshot and use its refs"},
    )


async def _object(browser: Browser, tab: str, backend_node_id: int) -> str | None:
    try:
        answer = await browser.send(tab, "DOM.resolveNode", {"backendNodeId": backend_node_id})
    except CdpError:
        return None
    object_id = answer.get("object", {}).get("objectId")
    return str(object_id) if object_id else None


async def _call(browser: Browser, tab: str, object_id: str, function: str, *args: Any) -> Any:
    answer = await browser.send(
        tab,
        "Runtime.callFunctionOn",
        {
            "objectId": object_id,
            "functionDeclaration": function,
            "arguments": [{"value": a} for a in args],
            "returnByValue": True,
        },
    )
    if "exceptionDetails" in answer:
        raise OpError(ErrorCode.ACTION_FAILED, "the page refused the action")
    return answer.get("result", {}).get("value")


async def _centre(browser: Browser, tab: str, object_id: str) -> dict[str, float]:
    """The element's centre in the viewport (CSS pixels), scrolled into view first."""
    x, y, width, height = await _call(browser, tab, object_id, _CENTRE)
    if width <= 0 or height <= 0:
        raise OpError(
            ErrorCode.ACTION_FAILED,
            "the element has no size on the page (hidden?)",
            {"suggestion": "take a new browser_snapshot"},
        )
    return {"x": x, "y": y}


async def click(browser: Browser, tab: str, object_id: str) -> dict[str, Any]:
    """A left click at the element's centre (scrolled into view first)."""
    return await click_at(browser, tab, await _centre(browser, tab, object_id))


async def click_at(browser: Browser, tab: str, point: dict[str, float]) -> dict[str, Any]:
    """A left click at ``point`` of the viewport: move, press, release, sent together (the
    browser runs one session's commands in order)."""
    events: list[dict[str, Any]] = [
        {"type": "mouseMoved", **point},
        *({"type": kind, "button": "left", "clickCount": 1, **point} for kind in PRESS_RELEASE),
    ]
    await asyncio.gather(*(browser.send(tab, "Input.dispatchMouseEvent", e) for e in events))
    return {"at": {"x": round(point["x"]), "y": round(point["y"])}}


async def prepared(
    browser: Browser, tab: str, object_id: str, state: str
) -> tuple[Any, dict[str, float]] | None:
    """In one call on the element: the page's ``state`` (an expression, read before anything
    moves), then the element's centre once scrolled into view; None when the element has
    left the page."""
    function = (
        f"function(){{if(!this.isConnected){{return null;}}const s={state};"
        + _INTO_VIEW
        + "const r=this.getBoundingClientRect();"
        "return [s,r.left+r.width/2,r.top+r.height/2,r.width,r.height];}"
    )
    answer = await _call(browser, tab, object_id, function)
    if answer is None:
        return None
    page_state, x, y, width, height = answer
    if width <= 0 or height <= 0:
        raise OpError(
            ErrorCode.ACTION_FAILED,
            "the element has no size on the page (hidden?)",
            {"suggestion": "take a new browser_snapshot"},
        )
    return page_state, {"x": x, "y": y}


async def fill(browser: Browser, tab: str, object_id: str, text: str) -> dict[str, Any]:
    """Replace the element's text with ``text`` as typed input; answers the value read back."""
    if not await _call(browser, tab, object_id, _FOCUS):
        raise OpError(ErrorCode.ACTION_FAILED, "the element does not take the focus")
    if text:
        await browser.send(tab, "Input.insertText", {"text": text})
    else:
        await press_key(browser, tab, NAMED_KEYS["delete"], 0)
    return {"value": await _call(browser, tab, object_id, _VALUE)}


async def focus(browser: Browser, tab: str, object_id: str) -> None:
    await _call(browser, tab, object_id, "function(){this.focus();}")


async def press_key(browser: Browser, tab: str, key: Key, modifiers: int) -> None:
    """One key down and up, with its text unless a modifier other than shift is held."""
    event: dict[str, Any] = {
        "key": key.key,
        "code": key.code,
        "windowsVirtualKeyCode": key.key_code,
        "modifiers": modifiers,
    }
    text = key.text if not modifiers & ~8 else ""
    down = {"type": "keyDown", "text": text} if text else {"type": "rawKeyDown"}
    await browser.send(tab, "Input.dispatchKeyEvent", event | down)
    await browser.send(tab, "Input.dispatchKeyEvent", event | {"type": "keyUp"})


async def hover(browser: Browser, tab: str, object_id: str) -> dict[str, Any]:
    """The mouse moved onto the element's centre (scrolled into view first)."""
    point = await _centre(browser, tab, object_id)
    await browser.send(tab, "Input.dispatchMouseEvent", {"type": "mouseMoved", **point})
    return {"at": {"x": round(point["x"]), "y": round(point["y"])}}


async def select(
    browser: Browser, tab: str, object_id: str, by: str, wanted: str
) -> dict[str, Any]:
    """The option of a ``<select>`` whose ``by`` (value or label) is ``wanted``, selected."""
    answer = await _call(browser, tab, object_id, _SELECT, by, wanted)
    error = answer.get("error") if isinstance(answer, dict) else "no_answer"
    if error == "not_select":
        raise OpError(
            ErrorCode.ACTION_FAILED,
            "the element is not a <select>",
            {"suggestion": "for another kind of list, browser_click the list and its option"},
        )
    if error == "no_option":
        shown = ", ".join(repr(o) for o in answer.get("options", []))
        raise OpError(
            ErrorCode.ACTION_FAILED,
            f"the list has no option with that {by}: it offers {shown}",
            {"field": by, "suggestion": "pick one of the options the list offers"},
        )
    if error is not None:
        raise OpError(ErrorCode.ACTION_FAILED, f"the option cannot be selected ({error})")
    return {"selected": {"value": answer["value"], "label": answer["label"]}}


async def into_view(browser: Browser, tab: str, object_id: str) -> dict[str, Any]:
    """The element scrolled into view (centred) unless it is wholly in view already."""
    point = await _centre(browser, tab, object_id)
    return {"at": {"x": round(point["x"]), "y": round(point["y"])}}


async def wheel(
    browser: Browser, tab: str, object_id: str | None, dx: float, dy: float
) -> dict[str, Any]:
    """A mouse wheel turned by ``dx``/``dy`` CSS pixels over the element (scrolling what it
    sits in), or over the middle of the page."""
    if object_id is not None:
        x, y, *_ = await _call(browser, tab, object_id, _CENTRE)
    else:
        metrics = await browser.send(tab, "Page.getLayoutMetrics")
        viewport = metrics.get("cssLayoutViewport") or metrics["layoutViewport"]
        x, y = viewport["clientWidth"] / 2, viewport["clientHeight"] / 2
    event = {"type": "mouseWheel", "x": x, "y": y, "deltaX": dx, "deltaY": dy}
    await browser.send(tab, "Input.dispatchMouseEvent", event)
    return {"at": {"x": round(x), "y": round(y)}}


async def page_scroll(browser: Browser, tab: str) -> dict[str, int]:
    """Where the page is scrolled to, once it has stopped moving (a wheel may glide)."""
    last = None
    for _ in range(SCROLL_SETTLE_READS):
        now = await browser.evaluate(tab, _PAGE_SCROLL)
        if now == last:
            break
        last = now
        await asyncio.sleep(SCROLL_SETTLE_S)
    x, y = last if isinstance(last, list) else (0, 0)
    return {"x": int(x), "y": int(y)}
