"""AT-SPI objects as the worker holds them: a node, an app's tree of nodes, a D-Bus call made
on one, and a call that failed.

Plain data, and the names of AT-SPI's D-Bus objects and interfaces: the bus
(``relay/a11y/bus.py``) makes the calls, the reads (``relay/a11y/reads.py``) build the trees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from relay.a11y.roles import role_token, state_tokens
from wire.errors import RelaydeskError

REGISTRY: Final = "org.a11y.atspi.Registry"
ROOT_PATH: Final = "/org/a11y/atspi/accessible/root"
CACHE_PATH: Final = "/org/a11y/atspi/cache"
ACCESSIBLE: Final = "org.a11y.atspi.Accessible"
APPLICATION: Final = "org.a11y.atspi.Application"
COMPONENT: Final = "org.a11y.atspi.Component"
PROPERTIES: Final = "org.freedesktop.DBus.Properties"
IFACE_PREFIX: Final = "org.a11y.atspi."
COORD_SCREEN: Final = 0
# What the bus notes for an app whose events named more elements than it keeps: no node has
# that path, so a tree drops all its kept details (``Tree.forget_details``).
EVERYTHING: Final = "*"

Key = tuple[str, str]  # (bus name, object path)


class CallFailed(RelaydeskError):
    """A D-Bus call failed; ``kind`` is ``gone``, ``timeout`` or ``failed``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class Node:
    """One accessible object as the app's cache (or a fill-in read) describes it."""

    bus: str
    path: str
    parent: Key | None
    index: int
    child_count: int
    interfaces: frozenset[str]
    name: str
    role: str
    description: str
    states: frozenset[str]
    children: list[Key] = field(default_factory=list)
    complete: bool = False  # children listed in full

    @property
    def key(self) -> Key:
        return (self.bus, self.path)

    def has(self, interface: str) -> bool:
        return interface in self.interfaces


Bounds = list[int] | None
Details = tuple[Bounds, str | None]  # an element's bounds, and its value or text (preview)


@dataclass
class Tree:
    """One app's nodes, with each node's children in order, and the details (bounds, values)
    read of them while the tree is kept, until an event says one changed."""

    bus: str
    nodes: dict[Key, Node]
    root: Key
    details: dict[Key, Details] = field(default_factory=dict)

    def children(self, node: Node) -> list[Node]:
        return [self.nodes[k] for k in node.children if k in self.nodes]

    def forget_details(self, moved: set[str], touched: set[str]) -> None:
        """Drop the kept details that events said changed: a moved element's and its
        descendants' bounds, a touched element's value or text; all of them when an event
        named an element this tree does not have (or too many)."""
        if not self.details or not (moved or touched):
            return
        for path in touched | moved:
            node = self.nodes.get((self.bus, path))
            if node is None or node.parent is None:
                self.details.clear()
                return
            if path in touched:
                self.details.pop(node.key, None)
        stack = [self.nodes[(self.bus, path)] for path in moved]
        while stack:
            node = stack.pop()
            self.details.pop(node.key, None)
            stack.extend(self.children(node))


@dataclass(frozen=True)
class Call:
    """One D-Bus method call: target, interface, method, arguments (signature, values)."""

    bus: str
    path: str
    interface: str
    method: str
    signature: str | None = None
    values: tuple[Any, ...] = ()


def short_interfaces(interfaces: Iterable[str]) -> frozenset[str]:
    """Interface names without AT-SPI's prefix: ``org.a11y.atspi.Text`` → ``Text``."""
    return frozenset(i.removeprefix(IFACE_PREFIX) for i in interfaces)


def cache_node(item: Sequence[Any]) -> Node | None:
    """A node from one ``GetItems`` entry; both layouts (with a child count since AT-SPI 2.x,
    with a children list before) are read."""
    try:
        if len(item) == 10:
            me, _app, parent, index, count, ifaces, name, role, desc, states = item
        else:
            me, _app, parent, children, ifaces, name, role, desc, states = item
            index, count = -1, len(children)
    except (TypeError, ValueError):
        return None
    parent_key = (str(parent[0]), str(parent[1])) if parent and parent[1] != "/" else None
    return Node(
        str(me[0]),
        str(me[1]),
        parent_key,
        int(index),
        int(count),
        short_interfaces(ifaces),
        str(name),
        role_token(int(role)),
        str(desc),
        state_tokens(states),
    )


def as_bounds(extents: Any) -> Bounds:
    """``Component.GetExtents``' (x, y, width, height), or None where it gave none."""
    if not extents or len(extents) != 4:
        return None
    return [int(v) for v in extents]


def first_failure(replies: Iterable[Any]) -> CallFailed | None:
    return next((r for r in replies if isinstance(r, CallFailed)), None)


def unwrap(reply: Any, default: Any = None, convert: Callable[[Any], Any] | None = None) -> Any:
    """A reply's first value (``default`` for a failed call)."""
    if isinstance(reply, CallFailed) or not reply:
        return default
    value = reply[0]
    return convert(value) if convert is not None else value
