"""A page's accessibility tree from the browser (``Accessibility.getFullAXTree``), in the same
forms as ``desktop_observe``: text, one element a line, or JSON items, with a budget and cut
markers; each listed element gets a ref ``@b<snapshot>:e<n>`` kept by :class:`Snapshots`.

Roles are spelled as ``desktop_observe`` spells them (Chromium's ``button`` is
``push_button``, ``textbox`` is ``entry``), so one selector language serves both.
"""

from __future__ import annotations

import json
import secrets
import string
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from wire.errors import ErrorCode, OpError

ROLES: Final[dict[str, str]] = {
    "button": "push_button",
    "textbox": "entry",
    "searchbox": "entry",
    "checkbox": "check_box",
    "radio": "radio_button",
    "combobox": "combo_box",
    "listbox": "list_box",
    "option": "list_item",
    "listitem": "list_item",
    "cell": "table_cell",
    "gridcell": "table_cell",
    "row": "table_row",
    "columnheader": "column_header",
    "rowheader": "row_header",
    "grid": "table",
    "menuitem": "menu_item",
    "menuitemcheckbox": "check_menu_item",
    "menuitemradio": "radio_menu_item",
    "menubar": "menu_bar",
    "tab": "page_tab",
    "tablist": "page_tab_list",
    "spinbutton": "spin_button",
    "switch": "toggle_button",
    "StaticText": "static",
    "RootWebArea": "document_web",
    "WebArea": "document_web",
    "img": "image",
    "image": "image",
    "LabelText": "label",
    "generic": "section",
    "toolbar": "tool_bar",
    "statusbar": "status_bar",
    "alertdialog": "dialog",
    "tree": "tree",
    "treeitem": "tree_item",
}
INTERACTIVE: Final = frozenset(
    {
        "push_button",
        "toggle_button",
        "check_box",
        "radio_button",
        "menu_item",
        "check_menu_item",
        "radio_menu_item",
        "combo_box",
        "entry",
        "spin_button",
        "slider",
        "link",
        "page_tab",
        "list_item",
        "tree_item",
        "table_cell",
        "column_header",
        "row_header",
    }
)
CONTEXT: Final = frozenset(
    {
        "document_web",
        "dialog",
        "alert",
        "heading",
        "page_tab_list",
        "tool_bar",
        "menu_bar",
        "status_bar",
        "form",
        "list",
        "list_box",
        "table",
        "tree",
        "label",
        "static",
        "image",
        "navigation",
        "main",
        "region",
    }
)
# Properties shown as states, when true.
STATE_PROPERTIES: Final = ("focused", "checked", "selected", "expanded", "required", "readonly")
SNAPSHOTS_KEPT: Final = 32
NAME_MAX: Final = 120
VALUE_MAX: Final = 200
_ALPHABET: Final = string.ascii_lowercase + string.digits


@dataclass(frozen=True)
class Element:
    """What a ref stands for: the DOM node behind it, and how to find it again."""

    backend_node_id: int
    role: str
    name: str


@dataclass
class Snapshot:
    """One snapshot's elements (``e1``, ``e2``, …) in one tab of one desktop's browser."""

    id: str
    desktop_session_id: str
    tab: str
    elements: list[Element] = field(default_factory=list)

    def add(self, element: Element) -> str:
        self.elements.append(element)
        return f"@b{self.id}:e{len(self.elements)}"


class Snapshots:
    """The latest snapshots of every desktop's browser (the oldest are forgotten)."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, Snapshot] = OrderedDict()

    def new(self, desktop_session_id: str, tab: str) -> Snapshot:
        snap_id = "".join(secrets.choice(_ALPHABET) for _ in range(7))
        snapshot = Snapshot(snap_id, desktop_session_id, tab)
        self._kept[snap_id] = snapshot
        while len(self._kept) > SNAPSHOTS_KEPT:
            self._kept.popitem(last=False)
        return snapshot

    def element(self, ref: str, desktop_session_id: str) -> tuple[Snapshot, Element]:
        """The snapshot and element of ``ref``; ``snapshot_not_found`` for one forgotten or of
        another desktop, ``element_not_found`` for a number it never had."""
        snap_id, _, number = ref[2:].partition(":e")
        snapshot = self._kept.get(snap_id)
        if snapshot is None or snapshot.desktop_session_id != desktop_session_id:
            raise OpError(
                ErrorCode.SNAPSHOT_NOT_FOUND,
                f"no snapshot {snap_id!r} of this desktop's browser",
                {"field": "ref", "suggestion": "take a new browser_snapshot"},
            )
        index = int(number) - 1
        if not 0 <= index < len(snapshot.elements):
            raise OpError(
                ErrorCode.ELEMENT_NOT_FOUND,
                f"snapshot {snap_id!r} has no element e{number}",
                {"field": "ref", "suggestion": "take a new browser_snapshot"},
            )
        return snapshot, snapshot.elements[index]


def role_of(node: dict[str, Any]) -> str:
    raw = str((node.get("role") or {}).get("value", ""))
    return ROLES.get(raw) or raw.lower()


def _text(node: dict[str, Any], key: str) -> str:
    value = (node.get(key) or {}).get("value")
    return "" if value is None else str(value)


def states(node: dict[str, Any]) -> list[str]:
    """enabled or disabled, then the true ones of ``STATE_PROPERTIES``."""
    props = {p["name"]: (p.get("value") or {}).get("value") for p in node.get("properties", [])}
    shown = ["disabled" if props.get("disabled") else "enabled"]
    for name in STATE_PROPERTIES:
        value = props.get(name)
        if value is True or value in ("true", "mixed"):
            shown.append(name if value != "mixed" else "mixed")
    if props.get("focusable"):
        shown.append("focusable")
    return shown


@dataclass
class Tree:
    """The nodes of one ``getFullAXTree`` answer, by id."""

    nodes: dict[str, dict[str, Any]]
    root: dict[str, Any] | None

    @classmethod
    def of(cls, answer: dict[str, Any]) -> Tree:
        nodes = {str(n["nodeId"]): n for n in answer.get("nodes", [])}
        root = next((n for n in nodes.values() if not n.get("parentId")), None)
        return cls(nodes, root)

    def walk(self, max_depth: int) -> Iterator[tuple[dict[str, Any], str | None, bool]]:
        """(node, its nearest shown ancestor's id, cut) for every node that is not ignored,
        depth-first in page order; ignored nodes pass their children up. ``cut``: children
        left out by the depth."""
        if self.root is None:
            return
        nodes = self.nodes
        stack: list[tuple[dict[str, Any], int, str | None]] = [(self.root, 0, None)]
        while stack:
            node, depth, parent = stack.pop()
            ignored = bool(node.get("ignored"))
            below, above = (depth, parent) if ignored else (depth + 1, str(node["nodeId"]))
            child_ids = node.get("childIds")
            children = [nodes[c] for c in reversed(child_ids) if c in nodes] if child_ids else []
            cut = below > max_depth and bool(children)
            if not ignored:
                yield node, parent, cut
            if children and not cut:
                stack.extend([(c, below, above) for c in children])


def listed(node: dict[str, Any], role: str, view: str) -> bool:
    if view == "all":
        return role not in ("section", "none", "") or bool(_text(node, "name"))
    if role in INTERACTIVE:
        return True
    if role == "static":
        return False  # a text leaf: its parent carries the name
    return role in CONTEXT and bool(_text(node, "name"))


def render(
    tree: Tree, snapshot: Snapshot, max_depth: int, budget: int, view: str, fmt: str
) -> dict[str, Any]:
    """The listed elements of ``tree`` added to ``snapshot``, as text and/or JSON."""
    lines: list[str] = []
    items: list[dict[str, Any]] = []
    cut_budget = cut_depth = False
    levels: dict[str | None, int] = {None: -1}
    for node, parent, cut in tree.walk(max_depth):
        cut_depth = cut_depth or cut
        role = role_of(node)
        depth = levels.get(parent, -1)
        levels[str(node["nodeId"])] = depth
        if not listed(node, role, view) or node.get("backendDOMNodeId") is None:
            continue
        depth += 1
        levels[str(node["nodeId"])] = depth
        if len(snapshot.elements) >= budget:
            cut_budget = True
            break
        name = _text(node, "name")
        ref = snapshot.add(Element(int(node["backendDOMNodeId"]), role, name))
        value = _text(node, "value")
        shown = states(node)
        lines.append("  " * depth + _line(ref, role, name, value, shown))
        if fmt != "text":
            item: dict[str, Any] = {"ref": ref, "role": role, "name": name, "states": shown}
            item |= {"value": value} if value else {}
            items.append(item | {"depth": depth, "bounds": None})
    result: dict[str, Any] = {
        "snapshot": snapshot.id,
        "nodes": len(snapshot.elements),
        "view": view,
        "truncated": {"budget": cut_budget, "depth": cut_depth},
    }
    if fmt in ("text", "both"):
        result["text"] = "\n".join(lines)
    if fmt in ("json", "both"):
        result["elements"] = items
    if cut_budget:
        result["note"] = f"the page was cut at {budget} elements: raise max_nodes for more"
    return result


def _line(ref: str, role: str, name: str, value: str, shown: list[str]) -> str:
    parts = [ref, role]
    if name:
        parts.append(json.dumps(name[:NAME_MAX], ensure_ascii=False))
    if value:
        parts.append("value=" + json.dumps(value[:VALUE_MAX], ensure_ascii=False))
    brief = [s for s in shown if s not in ("enabled", "focusable")]
    if brief:
        parts.append("[" + " ".join(brief) + "]")
    return " ".join(parts)


def plain(tree: Tree) -> list[dict[str, Any]]:
    """The tree as the selector matcher reads nodes (``wire.a11y_match``): role, name, value,
    states and children, ignored nodes left out (their children moved up)."""
    made: dict[str, dict[str, Any]] = {}
    roots: list[dict[str, Any]] = []
    for node, parent, _ in tree.walk(10_000):
        item = {
            "role": role_of(node),
            "name": _text(node, "name"),
            "value": _text(node, "value"),
            "description": _text(node, "description"),
            # Every node of a page's tree counts as showing (what is scrolled away included).
            "states": [*states(node), "showing", "visible"],
            "children": [],
            "node": node,
        }
        made[str(node["nodeId"])] = item
        (made[parent]["children"] if parent in made else roots).append(item)
    return roots
