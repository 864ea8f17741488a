"""``relay.a11y.nodes.Tree.forget_details``: what an app's events take away from the bounds
and values the worker keeps with a tree (the rest is checked end to end in
tests/integration/test_a11y.py)."""

from __future__ import annotations

import pytest

from relay.a11y.nodes import EVERYTHING, Node, Tree

pytestmark = pytest.mark.unit

BUS = ":1.9"


def node(path: str, parent: str | None, *kids: str) -> Node:
    return Node(
        BUS,
        path,
        (BUS, parent) if parent else None,
        0,
        len(kids),
        frozenset(),
        path,
        "panel",
        "",
        frozenset({"showing"}),
        [(BUS, k) for k in kids],
        True,
    )


def tree() -> Tree:
    """root ─ window ─ box ─ spinner, button; window ─ entry"""
    nodes = [
        node("root", None, "window"),
        node("window", "root", "box", "entry"),
        node("box", "window", "spinner", "button"),
        node("spinner", "box"),
        node("button", "box"),
        node("entry", "window"),
    ]
    t = Tree(BUS, {n.key: n for n in nodes}, (BUS, "root"))
    t.details = {n.key: ([0, 0, 1, 1], None) for n in nodes}
    return t


def kept(t: Tree) -> set[str]:
    return {path for _, path in t.details}


def test_a_moved_element_loses_its_bounds_and_its_descendants():
    t = tree()
    t.forget_details({"box"}, set())
    assert kept(t) == {"root", "window", "entry"}


def test_a_spinner_that_keeps_moving_costs_only_its_own_bounds():
    t = tree()
    t.forget_details({"spinner"}, set())
    assert kept(t) == {"root", "window", "box", "button", "entry"}


def test_a_changed_text_or_value_drops_that_element_only():
    t = tree()
    t.forget_details(set(), {"entry"})
    assert kept(t) == {"root", "window", "box", "spinner", "button"}


def test_a_moved_window_drops_everything_below_it():
    t = tree()
    t.forget_details({"window"}, set())
    assert kept(t) == {"root"}


def test_an_element_the_tree_does_not_have_or_too_many_drop_all():
    for moved, touched in (({"new"}, set()), (set(), {EVERYTHING}), ({"root"}, set())):
        t = tree()
        t.forget_details(moved, touched)
        assert kept(t) == set()


def test_nothing_named_keeps_everything():
    t = tree()
    t.forget_details(set(), set())
    assert len(t.details) == 6
