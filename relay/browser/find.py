"""``browser_find``: elements of a page by selector — an accessibility selector as
``desktop_find`` takes them, or ``css:`` and a CSS selector — returned as snapshot refs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from relay.browser.cdp import CdpError
from relay.browser.snapshot import Element, Snapshot, Tree, plain, role_of, states
from relay.browser.tabs import Browser
from wire import a11y_match, a11y_selector
from wire import browser as rules
from wire.errors import InvalidArgs


def _item(snapshot: Snapshot, node: dict[str, Any]) -> dict[str, Any]:
    name = str((node.get("name") or {}).get("value", ""))
    role = role_of(node)
    ref = snapshot.add(Element(int(node["backendDOMNodeId"]), role, name))
    return {"ref": ref, "role": role, "name": name, "states": states(node)}


async def find(
    browser: Browser,
    tab: str,
    snapshot: Snapshot,
    selector: str,
    limit: int,
    tree_of: Callable[[], Awaitable[Tree]],
) -> list[dict[str, Any]]:
    """The first ``limit`` matches in page order, added to ``snapshot`` (``tree_of``: the
    page's tree, ``pagetrees.py``)."""
    if selector.startswith(rules.CSS_PREFIX):
        nodes = await _css(browser, tab, selector[len(rules.CSS_PREFIX) :].strip(), limit)
    else:
        try:
            parsed = a11y_selector.parse(selector)
        except a11y_selector.SelectorError as err:
            raise InvalidArgs("selector", str(err)) from None
        tree = await tree_of()
        matched = a11y_match.select(parsed, plain(tree), lambda n: n["children"])
        nodes = [m["node"] for m in matched if m["node"].get("backendDOMNodeId") is not None]
    return [_item(snapshot, node) for node in nodes[:limit]]


async def _css(browser: Browser, tab: str, css: str, limit: int) -> list[dict[str, Any]]:
    """The accessibility nodes of the elements ``css`` selects (an element the tree leaves
    out is listed with the role ``none``)."""
    document = await browser.send(tab, "DOM.getDocument", {"depth": 0})
    try:
        found = await browser.send(
            tab,
            "DOM.querySelectorAll",
            {"nodeId": document["root"]["nodeId"], "selector": css},
        )
    except CdpError as err:
        raise InvalidArgs("selector", f"not a CSS selector the page takes: {css!r}") from err
    nodes: list[dict[str, Any]] = []
    for node_id in found.get("nodeIds", [])[:limit]:
        described = await browser.send(tab, "DOM.describeNode", {"nodeId": node_id})
        backend = described["node"]["backendNodeId"]
        partial = await browser.send(
            tab,
            "Accessibility.getPartialAXTree",
            {"backendNodeId": backend, "fetchRelatives": False},
        )
        ax = next(iter(partial.get("nodes", [])), None) or {"role": {"value": "none"}}
        nodes.append({**ax, "backendDOMNodeId": backend})
    return nodes
