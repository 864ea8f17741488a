"""Acts on one element: click, type, key, scroll, focus.

Each act is done natively where the app's accessibility offers it (an action, editable text,
``GrabFocus``, ``ScrollTo``); where it does not, the answer says what physical input would do
it and at which point of the element's live bounds, and the relay's screen service does it
(``relay/a11y/service.py``). An act drops the app's kept tree: the next call reads what the
act changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from relay.a11y.bus import Bus
from relay.a11y.elements import resolve, text_of
from relay.a11y.nodes import ACCESSIBLE, COMPONENT, COORD_SCREEN, Call, CallFailed, Node
from relay.a11y.protocol import A11yError, failed
from relay.a11y.session import Session
from relay.a11y.toolkits import grab, insert_length

SCROLL_ANYWHERE: Final = 6  # AtspiScrollType
ACTION: Final = "org.a11y.atspi.Action"
CLICK_ACTIONS: Final = ("click", "press", "activate", "toggle", "jump", "open", "select")
# How long after a native act an event of its app is waited for (the screen's settle window).
SETTLE_S: Final = 0.15


def act(session: Session, params: dict[str, Any]) -> dict[str, Any]:
    """The ``act`` call: one action on one element, natively where the app can do it, else
    what physical input would do it and where."""
    action = params.get("action")
    # A click needs the element's actions: asked for with its live check.
    prefetch = [(ACTION, "GetActions")] if action == "click" else []
    app, node, fetched = resolve(session, params, acting=True, prefetch=prefetch)
    handler = ACTS.get(str(action))
    if handler is None:
        raise A11yError("invalid_args", f"unknown act {str(action)[:32]!r}", field="action")
    bus = session.bus
    bus.drain()
    before = bus.sent[node.bus]
    try:
        result = handler(bus, node, params | {"_fetched": fetched})
        if result.get("method") == "native":
            result |= _effect(bus, node.bus, before, str(action))
    finally:
        session.trees.drop(app)
    return {"app": app.name, "role": node.role, "name": node.name} | result


def _effect(bus: Bus, app: str, before: int, action: str) -> dict[str, Any]:
    """A native act's ``effect``: ``changed`` when its app sent an accessibility event after
    it (within :data:`SETTLE_S`), else ``no_visible_change``; a native scroll into view is
    ``unverifiable`` (Chromium scrolls without any event). Physical acts get the screen's
    verdict instead (``relay/a11y/service.py``)."""
    if action == "scroll":
        return {"effect": "unverifiable"}
    start = time.monotonic()
    deadline = start + SETTLE_S
    while True:
        bus.drain()
        if bus.sent[app] > before:
            return {"effect": "changed", "effect_ms": round((time.monotonic() - start) * 1000)}
        left = deadline - time.monotonic()
        if left <= 0:
            return {"effect": "no_visible_change"}
        bus.wait_event(left)


def _center(bus: Bus, node: Node) -> dict[str, int]:
    """The middle of the element's live bounds (for physical input)."""
    try:
        reply = bus.call(Call(node.bus, node.path, COMPONENT, "GetExtents", "(u)", (COORD_SCREEN,)))
    except CallFailed as err:
        raise failed(err, "reading the element's bounds") from None
    x, y, w, h = (int(v) for v in reply[0])
    if w <= 0 or h <= 0 or x < -10000 or y < -10000:
        raise A11yError(
            "action_failed",
            "the element has no area on the screen",
            suggestion="scroll it into view with desktop_scroll into_view, then retry",
        )
    return {"x": x + w // 2, "y": y + h // 2}


def _physical(bus: Bus, node: Node, what: str, why: str, **extra: Any) -> dict[str, Any]:
    """An answer that physical input (``what``, at the element's middle) must do the act."""
    return {
        "method": "physical",
        "reason": why,
        "physical": {"action": what, **_center(bus, node), **extra},
    }


def _click(bus: Bus, node: Node, params: dict[str, Any]) -> dict[str, Any]:
    """The element's first native action of ``CLICK_ACTIONS`` (else its first), else a
    physical click."""
    if node.has("Action"):
        try:
            listed = params["_fetched"].get("GetActions")
            if listed is None or isinstance(listed, CallFailed):
                listed = bus.call(Call(node.bus, node.path, ACTION, "GetActions"))
            names = [a[0] for a in listed[0]]
            lowered = [str(n).lower() for n in names]  # Qt's are "Press", "Toggle"
            index = next(
                (lowered.index(n) for n in CLICK_ACTIONS if n in lowered),
                0 if names else None,
            )
            if index is not None:
                done = bus.call(Call(node.bus, node.path, ACTION, "DoAction", "(i)", (index,)))[0]
                if done:
                    return {"method": "native", "native": names[index]}
        except CallFailed as err:
            if err.kind == "timeout":
                raise failed(err, "clicking") from None
    return _physical(bus, node, "click", "the element has no usable native action")


def _type(bus: Bus, node: Node, params: dict[str, Any]) -> dict[str, Any]:
    """``EditableText`` (the text replaced, or appended), else the element focused and
    typed into physically."""
    text = str(params.get("text", ""))
    replace = params.get("mode", "replace") == "replace"
    if node.has("EditableText") and _edit(bus, node, text, replace):
        return {"method": "native", "text": text_of(bus, node)}
    # No editable text (Chromium's fields): focus it, type physically, read back via Text.
    focused = grab(bus, node)
    return {
        "method": "physical",
        "reason": "the element has no editable text interface",
        "physical": {
            "action": "type",
            "text": text,
            "replace": replace,
            "focused": focused,
            **_center(bus, node),
        },
    }


def _edit(bus: Bus, node: Node, text: str, replace: bool) -> bool:
    """Set (``replace``) or append the text through ``EditableText``; whether the app did."""
    try:
        if replace:
            ok = bus.call(
                Call(
                    node.bus,
                    node.path,
                    "org.a11y.atspi.EditableText",
                    "SetTextContents",
                    "(s)",
                    (text,),
                )
            )[0]
        else:
            end = bus.call(bus.prop(node.key, "org.a11y.atspi.Text", "CharacterCount"))[0]
            toolkit = bus.toolkit_names([node.bus])[node.bus]
            ok = bus.call(
                Call(
                    node.bus,
                    node.path,
                    "org.a11y.atspi.EditableText",
                    "InsertText",
                    "(isi)",
                    (int(end), text, insert_length(text, toolkit)),
                )
            )[0]
    except CallFailed as err:
        if err.kind == "timeout":
            raise failed(err, "typing") from None
        ok = False
    return bool(ok)


def _key(bus: Bus, node: Node, params: dict[str, Any]) -> dict[str, Any]:
    """Keys, pressed physically in the element focused first."""
    focused = grab(bus, node)
    return {
        "method": "physical",
        "reason": "keys have no native accessibility action",
        "physical": {
            "action": "key",
            "keys": str(params.get("keys", "")),
            "focused": focused,
            **_center(bus, node),
        },
    }


def _scroll(bus: Bus, node: Node, params: dict[str, Any]) -> dict[str, Any]:
    """``Component.ScrollTo`` (``into_view``), else a physical scroll by an amount."""
    if params.get("into_view"):
        try:
            done = bus.call(
                Call(node.bus, node.path, COMPONENT, "ScrollTo", "(u)", (SCROLL_ANYWHERE,))
            )[0]
        except CallFailed as err:
            if err.kind == "gone" and _still_there(bus, node):
                raise A11yError(
                    "action_failed",
                    "this app cannot scroll an element into view (it has no Component.ScrollTo)",
                    suggestion="scroll its list or page with desktop_scroll direction and "
                    "amount, then find it again",
                ) from None
            raise failed(err, "scrolling into view") from None
        if done:
            return {"method": "native", "native": "scroll_to"}
        raise A11yError("action_failed", "the app did not scroll the element into view")
    return _physical(
        bus,
        node,
        "scroll",
        "scrolling by an amount is physical input",
        direction=str(params.get("direction", "down")),
        amount=int(params.get("amount", 3)),
    )


def _focus(bus: Bus, node: Node, params: dict[str, Any]) -> dict[str, Any]:
    """``GrabFocus``, else a physical click."""
    if grab(bus, node):
        return {"method": "native", "native": "grab_focus"}
    return _physical(bus, node, "click", "the element did not take the focus natively")


def _still_there(bus: Bus, node: Node) -> bool:
    """Whether the element still answers (a call it failed as "gone" is one its app
    does not implement: toolkits answer both with the same D-Bus errors)."""
    try:
        bus.call(Call(node.bus, node.path, ACCESSIBLE, "GetState"))
    except CallFailed:
        return False
    return True


# An act on an element: the bus, the live element, the call's params (with ``_fetched``).
Act = Callable[[Bus, Node, dict[str, Any]], dict[str, Any]]
ACTS: Final[dict[str, Act]] = {
    "click": _click,
    "type": _type,
    "key": _key,
    "scroll": _scroll,
    "focus": _focus,
}
