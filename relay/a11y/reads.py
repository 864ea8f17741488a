"""An app's tree read off the accessibility bus: its cache in one call, and what it has not
cached listed pipelined.

- one ``org.a11y.atspi.Cache.GetItems`` call per app returns every node the app has exposed
  (role, name, description, states, interfaces, parent, child count) — the apps keep that
  cache only while someone listens for events, so the bus registers a listener first;
- the children an app has not cached yet are listed pipelined, every call sent before any
  reply is read (``fill``; a walk lists a level of the tree at a time, ``relay/a11y/trees.py``);
- a kept tree that only aged is read again with what it had listed beyond the cache carried
  over (``carry``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from relay.a11y.bus import Bus
from relay.a11y.nodes import (
    ACCESSIBLE,
    CACHE_PATH,
    ROOT_PATH,
    Call,
    CallFailed,
    Key,
    Node,
    Tree,
    cache_node,
    first_failure,
    short_interfaces,
)
from relay.a11y.roles import role_token, state_tokens
from relay.a11y.toolkits import answers_get_all, describe, properties


def read_tree(bus: Bus, app: Key) -> Tree:
    """Every node the app has cached, in one call."""
    reply = bus.call_raw(
        Call(app[0], CACHE_PATH, "org.a11y.atspi.Cache", "GetItems"), bus.bulk_timeout_ms
    )
    tree = _cached_tree(app, reply[0])
    if not tree.nodes[tree.root].children:
        # An app that caches nothing (Qt's cache is always empty): its windows are
        # listed the way a walk lists what an app has not cached.
        fill(bus, tree, [tree.nodes[tree.root]])
    return tree


def _cached_tree(app: Key, items: Iterable[Any]) -> Tree:
    """The tree of ``GetItems``' entries: each node's children in order, the app's root
    made up where the app did not list it."""
    nodes: dict[Key, Node] = {}
    for item in items:
        node = cache_node(item)
        if node is not None:
            nodes[node.key] = node
    order: dict[Key, list[tuple[int, Key]]] = {}
    for node in nodes.values():
        if node.parent is not None and node.parent in nodes:
            order.setdefault(node.parent, []).append((node.index, node.key))
    for parent, kids in order.items():
        kids.sort()
        nodes[parent].children = [k for _, k in kids]
        nodes[parent].complete = len(kids) >= nodes[parent].child_count
    for node in nodes.values():
        if node.child_count == 0:
            node.complete = True
    root = (app[0], ROOT_PATH)
    if root not in nodes:
        nodes[root] = Node(
            app[0],
            ROOT_PATH,
            None,
            0,
            0,
            frozenset({"Accessible"}),
            "",
            "application",
            "",
            frozenset(),
        )
    top = [
        n.key
        for n in nodes.values()
        if n.parent == root or (n.parent is not None and n.parent[1] == ROOT_PATH and n.key != root)
    ]
    if not nodes[root].children:
        nodes[root].children = sorted(top, key=lambda k: nodes[k].index)
    return Tree(app[0], nodes, root)


def carry(bus: Bus, old: Tree, new: Tree) -> None:
    """Bring into ``new`` (the app's cache read again, its kept tree having only aged) the
    nodes ``old`` had listed beyond the cache, with their states read again: one call a
    node instead of five. An app announces changes of structure and names, but not every
    change of what is showing (Chromium scrolls without any event): states are what a
    kept tree's age bounds."""
    listed = [node for key, node in old.nodes.items() if key not in new.nodes]
    replies = bus.many([Call(n.bus, n.path, ACCESSIBLE, "GetState") for n in listed])
    for node, reply in zip(listed, replies, strict=True):
        if not isinstance(reply, CallFailed):
            new.nodes[node.key] = replace(
                node, states=state_tokens(reply[0]), children=list(node.children)
            )


def fill(bus: Bus, tree: Tree, parents: Iterable[Node]) -> None:
    """List, pipelined, the children the app had not cached of ``parents``."""
    wanted = [p for p in parents if not p.complete]
    if not wanted:
        return
    replies = bus.many([Call(p.bus, p.path, ACCESSIBLE, "GetChildren") for p in wanted])
    fresh: list[tuple[Node, Key, int]] = []
    for parent, reply in zip(wanted, replies, strict=True):
        parent.complete = True
        if isinstance(reply, CallFailed):
            continue
        keys = [(str(b), str(p)) for b, p in reply[0]]
        parent.children = keys
        fresh.extend((parent, k, i) for i, k in enumerate(keys) if k not in tree.nodes)
    if fresh:
        _describe_new(bus, tree, fresh)


def _describe_new(bus: Bus, tree: Tree, fresh: list[tuple[Node, Key, int]]) -> None:
    """Read role, states, interfaces, name, description and child count of the children
    just listed (``(parent, key, index)``), pipelined, into ``tree``."""
    bulk = answers_get_all(bus, {key[0] for _, key, _ in fresh})
    calls: list[Call] = []
    spans: list[int] = []
    for _, key, _ in fresh:
        asked = describe(bus, key, key[0] in bulk)
        calls.extend(
            (
                Call(key[0], key[1], ACCESSIBLE, "GetRole"),
                Call(key[0], key[1], ACCESSIBLE, "GetState"),
                Call(key[0], key[1], ACCESSIBLE, "GetInterfaces"),
                *asked,
            )
        )
        spans.append(3 + len(asked))
    replies = bus.many(calls)
    parts: list[list[Any]] = []
    at = 0
    for span in spans:
        parts.append(replies[at : at + span])
        at += span
    props = properties(bus, [key for _, key, _ in fresh], [p[3:] for p in parts])
    for n, (parent, key, index) in enumerate(fresh):
        part = parts[n][:3]
        described = props[n]
        if first_failure(part) is not None or described is None:
            continue
        role, states, interfaces = (r[0] for r in part)
        name, description, count = described
        tree.nodes[key] = Node(
            key[0],
            key[1],
            parent.key,
            index,
            count,
            short_interfaces(interfaces),
            name,
            role_token(int(role)),
            description,
            state_tokens(states),
            complete=count == 0,
        )
