"""Element refs: the snapshots that hand them out, and the locators that find their elements
again.

An answer names elements as qualified refs ``@<snapshot>:<element>``. A snapshot lives
``RELAYDESK_A11Y_SNAPSHOT_TTL_S`` (or until ``SNAPSHOTS_KEPT`` newer ones), and every ref keeps
the locator that found its element, so the element is found again in the live tree right
before anything is done with it.
"""

from __future__ import annotations

import itertools
import os
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from relay.a11y.bus import Bus
from relay.a11y.nodes import Key, Node, Tree
from relay.a11y.protocol import A11yError
from relay.a11y.reads import fill

SNAPSHOT_TTL_S: Final = float(os.environ.get("RELAYDESK_A11Y_SNAPSHOT_TTL_S", "120"))
SNAPSHOTS_KEPT: Final = 64


Step = tuple[str, str, int]


@dataclass(frozen=True)
class Locator:
    """How to find an element again: its app, and the path of (role, name, index among the
    siblings of that role and name) from the app's root."""

    app_name: str
    steps: tuple[Step, ...]


@dataclass
class Element:
    """An element a ref names: its object, how to find it again, what it was."""

    key: Key
    locator: Locator
    role: str
    name: str


@dataclass
class Snapshot:
    """The elements one answer named, by their element id (``e17``)."""

    id: str
    created: float
    elements: dict[str, Element] = field(default_factory=dict)

    def add(self, element: Element) -> str:
        ref = f"@{self.id}:e{len(self.elements) + 1}"
        self.elements[ref.split(":", 1)[1]] = element
        return ref


REF_RE: Final = re.compile(r"^@([a-z0-9]{8}):(e[0-9]{1,6})$")


def _snapshot_id() -> str:
    """Eight hex digits, never starting with ``b``: ``@b…`` refs are a browser page's
    (relay/browser), so the two kinds never share an id."""
    while (snapshot_id := secrets.token_hex(4)).startswith("b"):
        pass
    return snapshot_id


class Snapshots:
    """The snapshots still answered for, newest last."""

    def __init__(self, ttl_s: float, kept: int) -> None:
        self.ttl_s, self.kept = ttl_s, kept
        self._all: OrderedDict[str, Snapshot] = OrderedDict()
        self._expired: OrderedDict[str, None] = OrderedDict()

    def new(self) -> Snapshot:
        self._prune()
        snapshot = Snapshot(_snapshot_id(), time.monotonic())
        self._all[snapshot.id] = snapshot
        while len(self._all) > self.kept:
            old, _ = self._all.popitem(last=False)
            self._forget(old)
        return snapshot

    def _forget(self, snapshot_id: str) -> None:
        self._expired[snapshot_id] = None
        while len(self._expired) > 4096:
            self._expired.popitem(last=False)

    def _prune(self) -> None:
        now = time.monotonic()
        for sid in [s for s, snap in self._all.items() if now - snap.created > self.ttl_s]:
            del self._all[sid]
            self._forget(sid)

    def element(self, ref: object, field_name: str = "ref") -> Element:
        if not isinstance(ref, str) or not (m := REF_RE.match(ref)):
            raise A11yError(
                "invalid_args", f"{field_name} must look like @s8f3k2p9:e17", field=field_name
            )
        self._prune()
        snapshot = self._all.get(m[1])
        if snapshot is None:
            if m[1] in self._expired:
                raise A11yError(
                    "stale_ref",
                    f"snapshot {m[1]} expired (refs live "
                    f"{self.ttl_s:g} s or until {self.kept} newer snapshots)",
                )
            raise A11yError("snapshot_not_found", f"no snapshot {m[1]} on this desktop")
        element = snapshot.elements.get(m[2])
        if element is None:
            raise A11yError("element_not_found", f"snapshot {m[1]} has no element {m[2]}")
        return element


def locator(
    app_name: str, path: Sequence[Node], tree: Tree, memo: dict[Key, Step] | None = None
) -> Locator:
    """``path``'s locator; ``memo`` keeps the steps of one call's elements (they share
    most of their ancestors)."""
    memo = {} if memo is None else memo
    steps = []
    for parent, node in itertools.pairwise(path):
        step = memo.get(node.key)
        if step is None:
            same = [
                c.key for c in tree.children(parent) if c.role == node.role and c.name == node.name
            ]
            step = (node.role, node.name, same.index(node.key) if node.key in same else 0)
            memo[node.key] = step
        steps.append(step)
    return Locator(app_name, tuple(steps))


def live_node(bus: Bus, tree: Tree, element: Element) -> Node:
    """The element in the live tree: by its object, else by its locator."""
    node = tree.nodes.get(element.key) if tree.bus == element.key[0] else None
    if node is None:
        node = _relocate(bus, tree, element.locator)
    if node is None or "defunct" in node.states:
        raise A11yError(
            "element_not_found",
            f"{element.role} {element.name!r} is no longer in its app's accessibility tree",
        )
    return node


def _relocate(bus: Bus, tree: Tree, locator: Locator) -> Node | None:
    """The node ``locator`` leads to from the root, else None."""
    node = tree.nodes[tree.root]
    for role, name, index in locator.steps:
        fill(bus, tree, [node])
        same = [c for c in tree.children(node) if c.role == role and c.name == name]
        if index >= len(same):
            return None
        node = same[index]
    return node
