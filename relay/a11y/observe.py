"""What the desktop shows: the apps with their windows, and one window's tree as text or JSON.

``observe`` walks the window (its showing elements, ``depth`` levels, ``max_nodes`` elements at
most) and lists, in the default "interactive" view, the controls and the named context around
them, one element a line, indented by nesting, each with a ref:

    @s8f3k2p9:e4 push_button "Save" [focused] @410,300 80x30
"""

from __future__ import annotations

import json
from typing import Any, Final

from relay.a11y.apps import App
from relay.a11y.nodes import Details, Key, Node, Tree
from relay.a11y.protocol import A11yError
from relay.a11y.refs import Element, Locator, Snapshot, Step, locator
from relay.a11y.session import Session
from relay.a11y.toolkits import renderer_fills, renderer_missing
from relay.a11y.trees import (
    HUGE,
    PAGE_ROLE,
    TEXT_PREVIEW,
    Walked,
    Walker,
    page_routed,
    path_to,
    walker_for,
)

# What the default ("interactive") view lists: controls, and named context around them.
INTERACTIVE_ROLES: Final = frozenset(
    {
        "push_button",
        "toggle_button",
        "check_box",
        "radio_button",
        "menu_item",
        "check_menu_item",
        "radio_menu_item",
        "combo_box",
        "text",
        "entry",
        "password_text",
        "spin_button",
        "slider",
        "link",
        "page_tab",
        "list_item",
        "tree_item",
        "table_cell",
        "push_button_menu",
        "menu",
        "scroll_bar",
        "dial",
        "color_chooser",
        "date_editor",
        "icon",
    }
)
CONTEXT_ROLES: Final = frozenset(
    {
        "frame",
        "dialog",
        "window",
        "alert",
        "heading",
        "page_tab_list",
        "tool_bar",
        "menu_bar",
        "status_bar",
        "document_web",
        "document_frame",
        "form",
        "list",
        "list_box",
        "table",
        "tree",
        "tree_table",
        "notification",
        "info_bar",
        "grouping",
        "label",
        "static",
    }
)
LISTED_STATES: Final = (
    "focusable",
    "focused",
    "checked",
    "indeterminate",
    "selected",
    "expanded",
    "collapsed",
    "pressed",
    "editable",
    "read_only",
    "modal",
    "required",
    "active",
)


def list_apps(session: Session, params: dict[str, Any]) -> dict[str, Any]:
    """The ``apps`` call: every app on the bus with its top-level windows (as refs), and
    what the policy lets agents do with it."""
    snapshot = session.snapshots.new()
    listed = []
    running = session.apps.running()
    allowed = [app for app in running if session.policy.refusal(app, acting=False) is None]
    every = session.windows(allowed)
    for app in running:
        refusal = session.policy.refusal(app, acting=False)
        entry: dict[str, Any] = {"name": app.name, "pid": app.pid, "command": app.command}
        if refusal is not None:
            listed.append(entry | {"policy": "denied", "reason": refusal, "windows": []})
            continue
        windows = every.get(app.bus, [])
        entry["responsive"] = not session.skipped(app)
        if (why := session.policy.refusal(app, acting=True)) is not None:
            entry |= {"policy": "read_only", "reason": why}
        entry["windows"] = [
            {
                "id": snapshot.add(
                    Element(w.key, Locator(app.name, ((w.role, w.name, 0),)), w.role, w.name)
                ),
                "name": w.name,
                "role": w.role,
                "bounds": w.bounds,
                "focused": w.focused,
                "showing": "showing" in w.states,
            }
            for w in windows
        ]
        listed.append(entry)
    return {"snapshot": snapshot.id, "apps": listed}


def observe(session: Session, params: dict[str, Any]) -> dict[str, Any]:
    """The ``observe`` call: the scope's window as text, one element a line, or as JSON."""
    max_depth = int(params.get("depth", 24))
    budget = int(params.get("max_nodes", 400))
    view = params.get("view", "interactive")
    fmt = params.get("format", "text")
    (app, tree, root), *_ = session.scope(params)
    snapshot = session.snapshots.new()
    walker = walker_for(session.bus, app.pid, params)
    chosen, cut_budget, cut_depth = _choose(walker, tree, root, max_depth, budget, view)
    extras = session.trees.details([w.node for w, _ in chosen])
    docs = [(w.node, b) for (w, _), (b, _) in zip(chosen, extras, strict=True)]
    routed = page_routed(app.pid, params)
    if not routed and renderer_missing(app.ids(), docs):
        if params.get("_retried") or not renderer_fills(
            session.bus, [n for n, _ in docs if n.role in ("document_web", "frame")]
        ):
            raise _no_renderer(app)
        return observe(session, params | {"_retried": True})
    lines, items = _render(snapshot, app, tree, chosen, extras, fmt)
    result: dict[str, Any] = {
        "snapshot": snapshot.id,
        "app": app.name,
        "window": root.name,
        "nodes": len(chosen),
        "view": view,
        "truncated": {"budget": cut_budget, "depth": cut_depth},
    }
    if fmt in ("text", "both"):
        result["text"] = "\n".join(lines)
    if fmt in ("json", "both"):
        result["elements"] = items
    if cut_budget:
        result["note"] = (
            f"the tree was cut at {budget} elements: observe a window or raise max_nodes for more"
        )
    if routed:
        result["pages"] = _pages(chosen, root, renderer_missing(app.ids(), docs))
    return result


def _pages(chosen: list[tuple[Walked, int]], root: Node, missing: bool) -> list[dict[str, Any]]:
    """Where the relay puts the pages it reads over DevTools: in place of each page's root
    (``replace``), or after the window's last line when the browser's renderer has no tree on
    the bus (its pages are read over DevTools all the same)."""
    pages = [
        {"line": i, "level": level, "window": root.name, "replace": True}
        for i, (walked, level) in enumerate(chosen)
        if walked.node.role == PAGE_ROLE
    ]
    if not pages and missing:
        pages = [{"line": len(chosen), "level": 1, "window": root.name, "replace": False}]
    return pages


def _choose(
    walker: Walker, tree: Tree, root: Node, max_depth: int, budget: int, view: object
) -> tuple[list[tuple[Walked, int]], bool, bool]:
    """The elements the view lists, each with its level of indentation (its nearest listed
    ancestor's, plus one); whether the budget and whether the depth cut the walk short."""
    chosen: list[tuple[Walked, int]] = []
    cut_budget = cut_depth = False
    included_depth: dict[Key, int] = {}
    for walked in walker.walk(tree, root, max_depth, path_to(tree, root)):
        node = walked.node
        if walked.depth >= max_depth and node.child_count:
            cut_depth = True
        parent_level = next(
            (included_depth[p.key] for p in reversed(walked.path[:-1]) if p.key in included_depth),
            -1,
        )
        if node is root and node.role == "application":
            continue  # the answer names the app; its windows start at the left margin
        parent = walked.path[-2] if len(walked.path) > 1 else None
        if view != "all" and parent is not None and _repeats(node, parent):
            continue
        if node is root or view == "all" or _listed(node):
            if len(chosen) >= budget:
                cut_budget = True
                break
            included_depth[node.key] = parent_level + 1
            chosen.append((walked, parent_level + 1))
    return chosen, cut_budget, cut_depth


def _render(
    snapshot: Snapshot,
    app: App,
    tree: Tree,
    chosen: list[tuple[Walked, int]],
    extras: list[Details],
    fmt: object,
) -> tuple[list[str], list[dict[str, Any]]]:
    """The chosen elements added to ``snapshot``, as lines of text and (unless only text is
    asked for) as JSON items."""
    lines, items = [], []
    memo: dict[Key, Step] = {}
    for (walked, level), (bounds, value) in zip(chosen, extras, strict=True):
        node = walked.node
        found_by = locator(app.name, walked.path, tree, memo)
        ref = snapshot.add(Element(node.key, found_by, node.role, node.name))
        lines.append("  " * level + _line(ref, node, bounds, value))
        if fmt != "text":
            items.append(item(ref, node, bounds, value, level))
    return lines, items


def _listed(node: Node) -> bool:
    """Whether the default (interactive) view lists the node."""
    if node.role in INTERACTIVE_ROLES or node.has("EditableText"):
        return True
    if node.has("Action") and node.role not in ("label", "static", "image", "filler", "panel"):
        return True
    return bool(node.name) and node.role in CONTEXT_ROLES


def _repeats(node: Node, parent: Node) -> bool:
    """A text leaf that only repeats its parent's name (a table cell's or a heading's)."""
    return (
        node.role in ("static", "label")
        and node.child_count == 0
        and bool(node.name)
        and node.name == parent.name
    )


def states(node: Node) -> list[str]:
    """The states an answer lists: enabled or disabled, then the ``LISTED_STATES`` it has."""
    enabled = "enabled" in node.states or "sensitive" in node.states
    return ["enabled" if enabled else "disabled", *(s for s in LISTED_STATES if s in node.states)]


def _brief_states(node: Node) -> list[str]:
    """The states a line of text shows: what differs from a usual control (enabled and
    focusable are left out)."""
    return [s for s in states(node) if s not in ("enabled", "focusable")]


def _line(ref: str, node: Node, bounds: list[int] | None, value: str | None) -> str:
    """An element as a line of the text answer: ref, role, name, value, states, bounds."""
    parts = [ref, node.role]
    if node.name:
        parts.append(json.dumps(node.name[:120], ensure_ascii=False))
    if value:
        parts.append("value=" + json.dumps(value[:TEXT_PREVIEW], ensure_ascii=False))
    if states := _brief_states(node):
        parts.append("[" + " ".join(states) + "]")
    if bounds is not None:
        parts.append(f"@{bounds[0]},{bounds[1]} {bounds[2]}x{bounds[3]}")
    if node.child_count > HUGE or "manages_descendants" in node.states:
        parts.append(f"({node.child_count} children, not listed)")
    return " ".join(parts)


def item(
    ref: str, node: Node, bounds: list[int] | None, value: str | None, depth: int | None
) -> dict[str, Any]:
    """An element as a JSON answer lists it."""
    item: dict[str, Any] = {
        "ref": ref,
        "role": node.role,
        "name": node.name,
        "states": states(node),
        "bounds": bounds,
    }
    if value is not None:
        item["value"] = value
    if depth is not None:
        item["depth"] = depth
    return item


def _no_renderer(app: App) -> A11yError:
    """What a browser whose pages have no accessibility tree is answered with."""
    return A11yError(
        "a11y_unavailable",
        f"{app.name} exposes its window but not the page: its renderer's accessibility is off "
        "(started without --force-renderer-accessibility, or with "
        "--disable-renderer-accessibility), so its web content has no accessibility tree",
        suggestion="use the screen tool for this window, or start the browser from the "
        "desktop's profile (desktop_launch), which sets the flag",
    )
