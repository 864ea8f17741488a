"""Each app's tree as the worker keeps it between calls, the details read of its elements, and
walks over it.

An app's tree is kept until the app announces a change of structure, names or states, and at
most ``TREE_MAX_AGE_S``: apps do not announce every change of what is showing. The bounds and
values read of its elements are kept with it until an event names them (``Tree.details``). A
walk visits what is showing (or, for ``find``, also what is scrolled out of view), never
descends into huge or self-managed containers, and lists the children an app has not cached a
level at a time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from relay.a11y.apps import App
from relay.a11y.bus import Bus
from relay.a11y.nodes import (
    COMPONENT,
    COORD_SCREEN,
    ROOT_PATH,
    Call,
    CallFailed,
    Details,
    Node,
    Tree,
    as_bounds,
    first_failure,
    unwrap,
)
from relay.a11y.protocol import failed
from relay.a11y.reads import carry, fill, read_tree

# A container with more children than this is not descended into (Calc's sheet has 2^31).
HUGE: Final = 500
TEXT_PREVIEW: Final = 40
SECRET_ROLES: Final = frozenset({"password_text"})
MAX_KEPT_TREES: Final = 16
# A kept tree is read again after this long even without an event (what is showing changes
# on scrolling without one).
TREE_MAX_AGE_S: Final = 1.0
# Children of nodes out of view one find may list beyond what the apps cached.
HIDDEN_FILL_BUDGET: Final = 2000
# Nodes a walk's level-by-level listing of uncached children looks at, at most (deeper or
# later ones are listed one by one as the walk reaches them).
PREFILL_NODES: Final = 5000


class Trees:
    """The apps' trees kept (the last ``MAX_KEPT_TREES`` read), with their details."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._trees: dict[str, tuple[float, Tree]] = {}  # bus name → (read at, tree)

    def kept(self, app: App) -> Tree | None:
        """The app's kept tree while it is valid: no event announced a change of structure,
        names or states since it was read, and it is younger than ``TREE_MAX_AGE_S`` (apps do
        not announce everything: Chromium scrolls without any event). Its kept details lose
        what the app's bounds, text and value events named."""
        self.bus.drain()
        kept = self._trees.get(app.bus)
        if (
            kept is None
            or app.bus in self.bus.changed
            or time.monotonic() - kept[0] >= TREE_MAX_AGE_S
        ):
            return None
        tree = kept[1]
        tree.forget_details(
            self.bus.moved.pop(app.bus, set()), self.bus.touched.pop(app.bus, set())
        )
        return tree

    def tree(self, app: App) -> Tree:
        """The app's tree: the kept one while valid (``kept``), else read again (what was
        listed beyond the app's cache is brought along with its states read again, when
        the kept tree only aged: ``carry``)."""
        kept = self.kept(app)
        if kept is not None:
            return kept
        old = self._trees.get(app.bus)
        aged = old[1] if old is not None and app.bus not in self.bus.changed else None
        self.bus.forget(app.bus)
        try:
            tree = read_tree(self.bus, (app.bus, ROOT_PATH))
            if aged is not None:
                carry(self.bus, aged, tree)
        except CallFailed as err:
            self._trees.pop(app.bus, None)
            raise failed(err, f"reading {app.name!r}") from None
        self._trees[app.bus] = (time.monotonic(), tree)
        if len(self._trees) > MAX_KEPT_TREES:
            self._trees.pop(next(iter(self._trees)))
        return tree

    def drop(self, app: App) -> None:
        """Forget what is kept of an app an act was just performed on: what it shows is
        read again on the next call."""
        self._trees.pop(app.bus, None)
        self.bus.forget(app.bus)

    def details(self, nodes: Sequence[Node]) -> list[Details]:
        """Bounds and values of ``nodes``: those kept with their tree (``Tree.details``),
        the others read, pipelined, and kept."""
        out: list[Details | None] = [None] * len(nodes)
        calls: list[Call] = []
        plan: list[tuple[int, int | None, int | None, str]] = []
        for i, node in enumerate(nodes):
            if (known := self._kept_details(node)) is not None:
                out[i] = known
                continue
            plan.append((i, *self._ask(node, calls)))
        replies = self.bus.many(calls)
        # A stopped app misses every call; a busy machine may make one miss now and then
        # (that element then has no bounds this time).
        if replies and all(isinstance(r, CallFailed) and r.kind == "timeout" for r in replies):
            raise failed(replies[0], "reading bounds and values")
        for i, extents, value, kind in plan:
            out[i] = self._answered(nodes[i], replies, extents, value, kind)
        return [d if d is not None else (None, None) for d in out]

    def _kept_details(self, node: Node) -> Details | None:
        """The node's details kept with its app's tree, when that tree holds this node."""
        kept = self._trees.get(node.bus)
        tree = kept[1] if kept is not None and kept[1].nodes.get(node.key) is node else None
        return tree.details.get(node.key) if tree is not None else None

    def _ask(self, node: Node, calls: list[Call]) -> tuple[int | None, int | None, str]:
        """Add the calls that read the node's bounds and its text or value to ``calls``: their
        indexes (None: not asked), and whether the value is a ``text`` or a ``value``."""
        extents = value = None
        if node.has("Component"):
            extents = len(calls)
            calls.append(Call(node.bus, node.path, COMPONENT, "GetExtents", "(u)", (COORD_SCREEN,)))
        kind = ""
        if node.has("Text") and (node.has("EditableText") or node.role in ("text", "entry")):
            value, kind = len(calls), "text"
            calls.append(
                Call(
                    node.bus,
                    node.path,
                    "org.a11y.atspi.Text",
                    "GetText",
                    "(ii)",
                    (0, TEXT_PREVIEW),
                )
            )
        elif node.has("Value"):
            value, kind = len(calls), "value"
            calls.append(self.bus.prop(node.key, "org.a11y.atspi.Value", "CurrentValue"))
        return extents, value, kind

    def _answered(
        self, node: Node, replies: list[Any], extents: int | None, value: int | None, kind: str
    ) -> Details:
        """The node's details from the replies to ``_ask``'s calls; kept with its tree when
        every call was answered."""
        bounds = as_bounds(unwrap(replies[extents])) if extents is not None else None
        text = None
        if value is not None:
            raw = unwrap(replies[value])
            if raw is not None:
                text = _format_value(raw) if kind == "value" else str(raw)
                if node.role in SECRET_ROLES and text:
                    text = "•" * min(len(text), 8)
        answered = [replies[j] for j in (extents, value) if j is not None]
        kept = self._trees.get(node.bus)
        if (
            first_failure(answered) is None
            and kept is not None
            and kept[1].nodes.get(node.key) is node
        ):
            kept[1].details[node.key] = (bounds, text)
        return (bounds, text)


@dataclass
class Walked:
    """A node a walk reached: how deep, and the path to it from the app's root."""

    node: Node
    depth: int
    path: list[Node]


class Walker:
    """Walks for one call. A ``find`` lists the uncached children of nodes out of view too,
    within ``hidden_budget`` children for all of its walks."""

    def __init__(
        self, bus: Bus, hidden_budget: int = 0, stop_roles: frozenset[str] = frozenset()
    ) -> None:
        self.bus = bus
        self.hidden_budget = hidden_budget
        # Nodes listed but not walked into: a page another backend reads (``PAGE_ROLE``).
        self.stop_roles = stop_roles

    def walk(
        self,
        tree: Tree,
        root: Node,
        max_depth: int,
        path_to_root: list[Node],
        hidden: bool = False,
    ) -> Iterator[Walked]:
        """Depth-first over showing nodes (``hidden``: also over the cached nodes that are not
        showing, e.g. rows scrolled out of view); never into huge or self-managed containers.
        Children an app has not cached are listed first, level by level, pipelined
        (``_prefill``)."""
        self._prefill(tree, root, max_depth, hidden)
        stack: list[tuple[Node, int, list[Node]]] = [(root, 0, [*path_to_root, root])]
        while stack:
            node, depth, path = stack.pop()
            yield Walked(node, depth, path)
            if not _descends(node, depth, max_depth) or node.role in self.stop_roles:
                continue
            if self._wants_fill(node, hidden):  # beyond what the prefill reached
                fill(self.bus, tree, [node])
            kids = _kids(tree, node, hidden)
            stack.extend((k, depth + 1, [*path, k]) for k in reversed(kids))

    def _wants_fill(self, node: Node, hidden: bool) -> bool:
        """Whether the walk lists the children the app has not cached of ``node``: of a
        showing node always; of a hidden one (``hidden`` walks) within the call's budget —
        apps cache little of what is out of view (Chromium's rows below the fold)."""
        if node.complete:
            return False
        if "showing" in node.states or node.role in ("frame", "application"):
            return True
        if hidden and self.hidden_budget >= node.child_count:
            self.hidden_budget -= node.child_count
            return True
        return False

    def _prefill(self, tree: Tree, root: Node, max_depth: int, hidden: bool) -> None:
        """List what the walk will need that the app has not cached, one level of the tree
        per pipelined batch (two round trips a level instead of two a node), up to
        ``PREFILL_NODES`` nodes."""
        level, seen = [(root, 0)], 0
        while level and seen < PREFILL_NODES:
            seen += len(level)
            fill(
                self.bus,
                tree,
                [
                    n
                    for n, d in level
                    if self._enters(n, d, max_depth) and self._wants_fill(n, hidden)
                ],
            )
            level = [
                (k, d + 1)
                for n, d in level
                if self._enters(n, d, max_depth)
                for k in _kids(tree, n, hidden)
            ]

    def _enters(self, node: Node, depth: int, max_depth: int) -> bool:
        return _descends(node, depth, max_depth) and node.role not in self.stop_roles


# A web page's root in a browser's tree: where a page read over the browser's DevTools
# channel takes over (relay/browser/routing.py).
PAGE_ROLE: Final = "document_web"
# ``_page_groups`` of a call: the process groups of the browsers whose pages the relay reads
# over DevTools; their apps' pages are not walked.
PAGE_GROUPS: Final = "_page_groups"


def page_routed(pid: int | None, params: dict[str, Any]) -> bool:
    """Whether the app of ``pid`` is a browser whose pages the relay reads over DevTools."""
    groups = params.get(PAGE_GROUPS) or ()
    if pid is None or not groups:
        return False
    try:
        return pid in groups or os.getpgid(pid) in groups
    except OSError:
        return False


def walker_for(bus: Bus, pid: int | None, params: dict[str, Any], hidden: int = 0) -> Walker:
    """A walk of an app's tree for one call: a routed browser's pages are left out."""
    stop = frozenset({PAGE_ROLE}) if page_routed(pid, params) else frozenset()
    return Walker(bus, hidden, stop)


def _descends(node: Node, depth: int, max_depth: int) -> bool:
    """Whether a walk goes below ``node``: not past the depth asked for, never into huge or
    self-managed containers."""
    return (
        depth < max_depth and node.child_count <= HUGE and "manages_descendants" not in node.states
    )


def _kids(tree: Tree, node: Node, hidden: bool) -> list[Node]:
    """The children a walk visits: the showing ones (and frames), or all with ``hidden``."""
    return [k for k in tree.children(node) if hidden or "showing" in k.states or k.role == "frame"]


def path_to(tree: Tree, node: Node) -> list[Node]:
    """Ancestors of ``node`` from the app's root (exclusive of ``node``)."""
    chain: list[Node] = []
    current = node.parent
    seen = 0
    while current is not None and current in tree.nodes and seen < 256:
        parent = tree.nodes[current]
        chain.append(parent)
        current = parent.parent
        seen += 1
    chain.reverse()
    if not chain or chain[0].key != tree.root:
        chain.insert(0, tree.nodes[tree.root])
    return chain


def _format_value(raw: Any) -> str:
    """A value as a number is written: ``3``, ``0.5``."""
    number = float(raw)
    return str(int(number)) if number.is_integer() else f"{number:g}"
