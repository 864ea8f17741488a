"""One element by its ref: found as it is now, read in full, its text.

A ref is checked against the live element right before it is used: one pipelined batch asks
the object itself for its states, role, name and interfaces; only where that object is gone
is the app's tree read and the element found again by its locator (``relay/a11y/refs.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from relay.a11y.apps import App
from relay.a11y.bus import Bus
from relay.a11y.nodes import (
    ACCESSIBLE,
    COMPONENT,
    COORD_SCREEN,
    Call,
    CallFailed,
    Key,
    Node,
    as_bounds,
    first_failure,
    unwrap,
)
from relay.a11y.protocol import A11yError, failed
from relay.a11y.refs import live_node
from relay.a11y.roles import role_token, state_tokens
from relay.a11y.session import Session
from relay.a11y.trees import SECRET_ROLES

READ_TEXT_MAX: Final = 4000


def resolve(
    session: Session, params: dict[str, Any], acting: bool, prefetch: Sequence[tuple[str, str]] = ()
) -> tuple[App, Node, dict[str, Any]]:
    """The ref's app and its element as it is now; ``prefetch``: (interface, method) calls
    on the element sent along with its live check (their replies by method, when the
    object itself was found)."""
    element = session.snapshots.element(params.get("ref"))
    app = session.apps.of_element(element)
    if (why := session.policy.refusal(app, acting)) is not None:
        raise A11yError("policy_denied", f"{app.name!r}: {why}")
    if app.bus == element.key[0]:
        checked = _checked(session.bus, app, element.key, prefetch)
        if checked is not None:
            return app, checked[0], checked[1]
    tree = session.trees.tree(app)
    return app, live_node(session.bus, tree, element), {}


def _checked(
    bus: Bus, app: App, key: Key, prefetch: Sequence[tuple[str, str]]
) -> tuple[Node, dict[str, Any]] | None:
    """The element's object checked live (one call, no tree read): the element with the
    ``prefetch`` replies, or None where the object is gone (it is then found by its
    locator)."""
    try:
        reply = bus.many(
            [
                Call(key[0], key[1], ACCESSIBLE, "GetState"),
                Call(key[0], key[1], ACCESSIBLE, "GetInterfaces"),
                Call(key[0], key[1], ACCESSIBLE, "GetRole"),
                bus.prop(key, ACCESSIBLE, "Name"),
                bus.prop(key, ACCESSIBLE, "ChildCount"),
                bus.prop(key, ACCESSIBLE, "Description"),
                *(Call(key[0], key[1], i, m) for i, m in prefetch),
            ]
        )
    except CallFailed as err:
        raise failed(err, "reading the element") from None
    failure = first_failure(reply[:6])
    if failure is not None:
        if failure.kind == "timeout":
            raise failed(failure, f"{app.name!r}")
        return None
    states = state_tokens(reply[0][0])
    if "defunct" in states:
        return None
    node = Node(
        key[0],
        key[1],
        None,
        0,
        int(reply[4][0]),
        frozenset(i.removeprefix("org.a11y.atspi.") for i in reply[1][0]),
        str(reply[3][0]),
        role_token(int(reply[2][0])),
        str(reply[5][0]),
        states,
    )
    return node, {m: r for (_, m), r in zip(prefetch, reply[6:], strict=True)}


DOCUMENT: Final = "org.a11y.atspi.Document"


def read(session: Session, params: dict[str, Any]) -> dict[str, Any]:
    """The ``read`` call: one element in full."""
    app, node, _ = resolve(session, params, acting=False)
    k = node.key
    calls = [Call(k[0], k[1], COMPONENT, "GetExtents", "(u)", (COORD_SCREEN,))]
    if node.has("Text"):
        calls.append(Call(k[0], k[1], "org.a11y.atspi.Text", "GetText", "(ii)", (0, READ_TEXT_MAX)))
    if node.has("Action"):
        calls.append(Call(k[0], k[1], "org.a11y.atspi.Action", "GetActions"))
    if node.has("Value"):
        calls.extend(
            session.bus.prop(k, "org.a11y.atspi.Value", p)
            for p in ("CurrentValue", "MinimumValue", "MaximumValue")
        )
    if node.has("Document"):
        calls.append(Call(k[0], k[1], DOCUMENT, "GetAttributes"))
    replies = session.bus.many(calls)
    result: dict[str, Any] = {
        "app": app.name,
        "role": node.role,
        "name": node.name,
        "description": node.description,
        "states": sorted(node.states),
        "interfaces": sorted(node.interfaces),
        "children": node.child_count,
        "bounds": as_bounds(unwrap(replies[0])),
        "ref": params.get("ref"),
    }
    at = 1
    if node.has("Text"):
        text = unwrap(replies[at], "", str)
        result["text"] = "•" * min(len(text), 8) if node.role in SECRET_ROLES else text
        at += 1
    if node.has("Action"):
        result["actions"] = [a[0] for a in unwrap(replies[at], [])]
        at += 1
    if node.has("Value"):
        result["value"] = {
            n: unwrap(replies[at + i], None, float)
            for i, n in enumerate(("current", "minimum", "maximum"))
        }
        at += 3
    elif "text" in result:
        result["value"] = result["text"]
    if node.has("Document"):
        result["document"] = _document(unwrap(replies[at], {}))
    return result


def _document(attributes: Any) -> dict[str, str]:
    """A document's attributes (its address, type, MIME type), named the same across toolkits:
    ``url`` is Chromium's ``URI`` and Gecko's ``DocURL``."""
    if not isinstance(attributes, dict):
        return {}
    named = {str(k): str(v) for k, v in attributes.items()}
    url = named.get("URI") or named.get("DocURL")
    return {**named, "url": url} if url else named


def text(session: Session, params: dict[str, Any]) -> dict[str, Any]:
    """The ``text`` call: an element's text (read back after physical typing)."""
    _, node, _ = resolve(session, params, acting=False)
    return {"text": text_of(session.bus, node)}


def text_of(bus: Bus, node: Node) -> str | None:
    """The element's whole text; None where it has none or does not answer."""
    if not node.has("Text"):
        return None
    try:
        reply = bus.call(
            Call(node.bus, node.path, "org.a11y.atspi.Text", "GetText", "(ii)", (0, -1))
        )
    except CallFailed:
        return None
    return str(reply[0])
