"""Elements found by a selector (``wire/a11y_selector.py``): ``find``, and ``wait`` for a
condition on what a selector matches.

A find looks at every app the policy allows unless an app or a window is named, and at the
elements scrolled out of view too: the children of hidden nodes are listed up to
``HIDDEN_FILL_BUDGET`` for the whole call. Each element is matched on its own before its
ancestors are.
"""

from __future__ import annotations

import time
from typing import Any

from relay.a11y.apps import App
from relay.a11y.nodes import ACCESSIBLE, Key, Node, Tree, unwrap
from relay.a11y.observe import item
from relay.a11y.protocol import A11yError
from relay.a11y.refs import Element, locator
from relay.a11y.session import Session
from relay.a11y.trees import (
    HIDDEN_FILL_BUDGET,
    PAGE_ROLE,
    Walked,
    page_routed,
    path_to,
    walker_for,
)
from wire import a11y_match
from wire import a11y_selector as selectors


def find(session: Session, params: dict[str, Any]) -> dict[str, Any]:
    """The ``find`` call: what a selector matches, across apps or in the scope, as refs."""
    selector = _selector(params)
    limit = int(params.get("limit", 20))
    found, more = _matches(session, selector, params, limit)
    snapshot = session.snapshots.new()
    pages = _pages(session, params)
    details = session.trees.details([w.node for _, _, w in found])
    matches = []
    for (app, tree, walked), (bounds, value) in zip(found, details, strict=True):
        node = walked.node
        ref = snapshot.add(
            Element(node.key, locator(app.name, walked.path, tree), node.role, node.name)
        )
        matches.append(item(ref, node, bounds, value, None) | {"app": app.name})
    result = {"snapshot": snapshot.id, "matches": matches, "count": len(matches), "more": more}
    return result | ({"pages": pages} if pages else {})


def _pages(session: Session, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The windows in scope of browsers whose pages the relay reads over DevTools (a
    ``find`` leaves those pages to it)."""
    if not params.get("_page_groups"):
        return []
    pages = []
    for app, tree, root in session.scope(params | {"_all": True}, acting=False):
        if page_routed(app.pid, params):
            frames = [root] if root.role == "frame" else tree.children(root)
            pages += [{"app": app.name, "window": f.name} for f in frames if f.role == "frame"]
    return pages


def wait(session: Session, params: dict[str, Any]) -> dict[str, Any]:
    """The ``wait`` call: until what a selector matches is there, gone, visible, enabled or
    focused, woken by the apps' events."""
    selector = _selector(params)
    condition = params.get("condition", "exists")
    timeout_s = float(params.get("timeout_ms", 5000)) / 1000
    started = time.monotonic()
    deadline = started + timeout_s
    checks = 0
    while True:
        checks += 1
        try:
            found, _ = _matches(session, selector, params, 1)
        except A11yError as err:
            if err.code != "app_not_found":
                raise
            found = []
        node = found[0][2].node if found else None
        if _satisfied(condition, node):
            result = {
                "satisfied": True,
                "condition": condition,
                "checks": checks,
                "elapsed_ms": round((time.monotonic() - started) * 1000),
            }
            if node is not None:
                result |= find(session, params | {"limit": 1})
            return result
        left = deadline - time.monotonic()
        if left <= 0:
            raise A11yError(
                "timeout",
                f"{condition} not reached for {selector.text!r} in {timeout_s:g} s",
                checks=checks,
            )
        # Woken by the apps' events where they fire; a check every 250 ms where they do not.
        session.bus.wait_event(min(left, 0.25))


def _matches(
    session: Session, selector: selectors.Selector, params: dict[str, Any], limit: int
) -> tuple[list[tuple[App, Tree, Walked]], bool]:
    """What ``selector`` matches in the scope, in tree order: the ``nth`` match alone, else
    up to ``limit`` and whether there may be more."""
    pairs = session.scope(params | {"_all": True}, acting=False)
    found: list[tuple[App, Tree, Walked]] = []
    needs_value = any(t.name == "value" for c in selector.compounds for t in c.attrs)
    needs_id = any(t.name == "id" for c in selector.compounds for t in c.attrs)
    nth = selector.compounds[-1].nth
    wanted = limit if nth is None else nth + 1
    hidden_budget = HIDDEN_FILL_BUDGET  # for the whole call
    for app, tree, root in pairs:
        walker = walker_for(session.bus, app.pid, params, hidden_budget)
        routed = bool(walker.stop_roles)
        walked_all = list(
            walker.walk(
                tree,
                root,
                64,
                path_to(tree, root) if root.key != tree.root else [],
                hidden=True,
            )
        )
        hidden_budget = walker.hidden_budget
        if routed:  # the page is found over DevTools, its root with it
            walked_all = [w for w in walked_all if w.node.role != PAGE_ROLE]
        extra = _match_fields(session, walked_all, needs_value, needs_id)
        last = selector.compounds[-1]
        for walked in walked_all:
            node = walked.node
            # The element itself first: its ancestors are matched only when it could be.
            if not a11y_match.compound_matches(last, _as_mapping(node, extra.get(node.key))):
                continue
            chain = [_as_mapping(n, extra.get(n.key)) for n in walked.path]
            if a11y_match.match_path(selector, chain):
                found.append((app, tree, walked))
                if len(found) >= wanted:
                    break
        if len(found) >= wanted:
            break
    if nth is not None:
        return (found[nth : nth + 1], False)
    return (found[:limit], len(found) >= limit)


def _match_fields(
    session: Session, walked: list[Walked], value: bool, ident: bool
) -> dict[Key, dict[str, str]]:
    """The value and the accessible id of each walked node, read only when the selector
    asks for them."""
    if not (value or ident):
        return {}
    nodes = [w.node for w in walked]
    out: dict[Key, dict[str, str]] = {n.key: {} for n in nodes}
    if value:
        for node, (_, text) in zip(nodes, session.trees.details(nodes), strict=True):
            out[node.key]["value"] = text or ""
    if ident:
        replies = session.bus.many(
            [session.bus.prop(n.key, ACCESSIBLE, "AccessibleId") for n in nodes]
        )
        for node, reply in zip(nodes, replies, strict=True):
            out[node.key]["id"] = unwrap(reply, "", str)
    return out


def _selector(params: dict[str, Any]) -> selectors.Selector:
    """The call's ``selector``, parsed."""
    try:
        return selectors.parse(str(params.get("selector", "")))
    except selectors.SelectorError as err:
        raise A11yError("invalid_args", f"selector: {err}", field="selector") from None


def _as_mapping(node: Node, extra: dict[str, str] | None) -> dict[str, object]:
    """A node as the selector matches it."""
    return {
        "role": node.role,
        "name": node.name,
        "description": node.description,
        "states": node.states,
        "value": (extra or {}).get("value", ""),
        "id": (extra or {}).get("id", ""),
    }


def _satisfied(condition: object, node: Node | None) -> bool:
    """Whether the first match (``node``; None: nothing matched) meets ``condition``."""
    if condition == "gone":
        return node is None
    if node is None:
        return False
    if condition == "visible":
        return {"showing", "visible"} <= node.states
    if condition == "enabled":
        return "enabled" in node.states or "sensitive" in node.states
    if condition == "focused":
        return "focused" in node.states
    return True
