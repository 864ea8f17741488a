"""Accessibility selectors evaluated against plain node mappings (``wire.a11y_selector``).

:func:`compound_matches` tests one node, :func:`match_path` a node by its path from the root,
and :func:`select` walks whole trees. Pure and standard-library only, like the grammar: the
AT-SPI worker imports this module under the system Python with nothing else installed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Final, TypeVar

from wire.a11y_selector import (
    ROLE_FAMILIES,
    Combinator,
    Compound,
    Op,
    Pseudo,
    Selector,
    role_token,
)

Node = Mapping[str, object]
NodeT = TypeVar("NodeT", bound=Mapping[str, object])

_OP_TESTS: Final[Mapping[Op, Callable[[str, str], bool]]] = {
    "=": lambda actual, wanted: actual == wanted,
    "^=": lambda actual, wanted: actual.startswith(wanted),
    "$=": lambda actual, wanted: actual.endswith(wanted),
    "*=": lambda actual, wanted: wanted in actual,
    "~=": lambda actual, wanted: wanted.casefold() in actual.casefold(),
}


def _is_enabled(states: Collection[object]) -> bool:
    return "enabled" in states or "sensitive" in states


_PSEUDO_TESTS: Final[Mapping[Pseudo, Callable[[Collection[object]], bool]]] = {
    "visible": lambda states: "showing" in states and "visible" in states,
    "enabled": _is_enabled,
    "disabled": lambda states: not _is_enabled(states),
    "focused": lambda states: "focused" in states,
}


def compound_matches(c: Compound, node: Node) -> bool:
    """True when ``node`` passes the role, attribute and pseudo-class tests of ``c``."""
    role = role_token(_node_string(node, "role"))
    if c.role is not None and c.role != role and role not in ROLE_FAMILIES.get(c.role, ()):
        return False
    for test in c.attrs:
        actual = role if test.name == "role" else _node_string(node, test.name)
        if not _OP_TESTS[test.op](actual, test.value):
            return False
    states = _node_states(node)
    return all(_PSEUDO_TESTS[pseudo](states) for pseudo in c.pseudos)


def _node_string(node: Node, key: str) -> str:
    value = node.get(key)
    return value if isinstance(value, str) else ""


def _node_states(node: Node) -> Collection[object]:
    states = node.get("states")
    if isinstance(states, str | bytes) or not isinstance(states, Collection):
        return ()
    return states


def match_path(sel: Selector, path: Sequence[Node]) -> bool:
    """True when the last node of ``path`` (root first) matches ``sel``; nth is not applied."""
    if not path or not sel.compounds:
        return False
    count = len(sel.compounds)
    # row[k]: this node matches compounds[0..k] ending at compounds[k]; ancestors[k]: some
    # node above it does.
    parent, ancestors = [False] * count, [False] * count
    for node in path:
        row = [
            _continues(compound, k, parent, ancestors) and compound_matches(compound, node)
            for k, compound in enumerate(sel.compounds)
        ]
        ancestors = [above or here for above, here in zip(ancestors, row, strict=True)]
        parent = row
    return parent[-1]


def _continues(compound: Compound, k: int, parent: list[bool], ancestors: list[bool]) -> bool:
    if k == 0:
        return True
    return (parent if compound.combinator == "child" else ancestors)[k - 1]


def select(
    sel: Selector, roots: Iterable[NodeT], children: Callable[[NodeT], Iterable[NodeT]]
) -> list[NodeT]:
    """The nodes of the trees under ``roots`` that ``sel`` matches, in document order.

    Document order is depth-first pre-order, children in the order ``children`` gives them.
    The same nodes as those whose path :func:`match_path` accepts, then the last compound's
    ``nth`` keeps only the nth of them. Each compound is checked once per node.
    """
    if not sel.compounds:
        return []
    nodes, parents = _flatten(roots, children)
    kept: Sequence[int] = range(len(nodes))
    for k, compound in enumerate(sel.compounds):
        context = _context(parents, kept, compound.combinator) if k else None
        kept = [
            i
            for i in range(len(nodes))
            if (context is None or context[i]) and compound_matches(compound, nodes[i])
        ]
    nth = sel.compounds[-1].nth
    if nth is not None:
        kept = kept[nth : nth + 1]
    return [nodes[i] for i in kept]


def _flatten(
    roots: Iterable[NodeT], children: Callable[[NodeT], Iterable[NodeT]]
) -> tuple[list[NodeT], list[int]]:
    """The nodes in document order and the index of each one's parent (-1 for a root)."""
    nodes: list[NodeT] = []
    parents: list[int] = []
    stack: list[tuple[Iterator[NodeT], int]] = [(iter(roots), -1)]
    while stack:
        siblings, parent = stack[-1]
        node = next(siblings, None)
        if node is None:
            stack.pop()
            continue
        nodes.append(node)
        parents.append(parent)
        stack.append((iter(children(node)), len(nodes) - 1))
    return nodes, parents


def _context(
    parents: Sequence[int], kept: Iterable[int], combinator: Combinator | None
) -> list[bool]:
    """Which nodes sit where the next compound may match: under (or just under) a kept one."""
    marked = [False] * len(parents)
    for i in kept:
        marked[i] = True
    if combinator == "child":
        return [p >= 0 and marked[p] for p in parents]
    below = [False] * len(parents)
    for i, p in enumerate(parents):
        # A parent comes before its children in document order, so below[p] is already known.
        below[i] = p >= 0 and (marked[p] or below[p])
    return below
