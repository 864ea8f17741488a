"""The baseline of ``bench_a11y``: a naive accessibility-tree walk, one call at a time.

Run inside a desktop (as its user, with its environment) by the system's Python with
libatspi's bindings: ``python3 a11y_walk.py APP_NAME ROUNDS [BUTTON]``. For each round it walks
the app's whole tree the way a straightforward client does — role, name, states, child count,
extents and each child, one D-Bus call after another, with libatspi's cache off so every read
goes to the app — and, with BUTTON, also finds the push button named so by a depth-first search
that stops at the first match. Prints one JSON line: per-round walk and find times (ms), the
node count and the calls made.
"""

import contextlib
import json
import sys
import time
from typing import Any

import gi

gi.require_version("Atspi", "2.0")
from gi.repository import Atspi  # noqa: E402

CALLS = [0]


def _children(node: Any) -> list[Any]:
    CALLS[0] += 1
    count = node.get_child_count()
    out = []
    for i in range(count):
        CALLS[0] += 1
        child = node.get_child_at_index(i)
        if child is not None:
            out.append(child)
    return out


def walk(node: Any, limit: int = 5000) -> int:
    """Every node below ``node``: role, name, states and extents of each, one call each."""
    seen = 0
    stack = [node]
    while stack and seen < limit:
        current = stack.pop()
        seen += 1
        current.get_role_name()
        current.get_name()
        current.get_state_set()
        with contextlib.suppress(Exception):  # an object without extents
            current.get_extents(Atspi.CoordType.SCREEN)
        CALLS[0] += 4
        if current.get_state_set().contains(Atspi.StateType.MANAGES_DESCENDANTS):
            continue
        stack.extend(reversed(_children(current)))
    return seen


def find(node: Any, role: str, name: str) -> Any:
    stack = [node]
    while stack:
        current = stack.pop()
        CALLS[0] += 2
        if current.get_role_name() == role and current.get_name() == name:
            return current
        stack.extend(reversed(_children(current)))
    return None


def main() -> None:
    app_name, rounds = sys.argv[1], int(sys.argv[2])
    button = sys.argv[3] if len(sys.argv) > 3 else None
    Atspi.set_timeout(250, 2000)
    desktop = Atspi.get_desktop(0)
    app = next(
        desktop.get_child_at_index(i)
        for i in range(desktop.get_child_count())
        if desktop.get_child_at_index(i).get_name() == app_name
    )
    app.set_cache_mask(Atspi.Cache.NONE)
    walks, finds, nodes = [], [], 0
    for _ in range(rounds):
        app.clear_cache()
        started = time.perf_counter()
        nodes = walk(app)
        walks.append((time.perf_counter() - started) * 1000)
        if button:
            app.clear_cache()
            started = time.perf_counter()
            found = find(app, "push button", button)
            finds.append((time.perf_counter() - started) * 1000)
            assert found is not None, button
    print(json.dumps({"walk_ms": walks, "find_ms": finds, "nodes": nodes, "calls": CALLS[0]}))


if __name__ == "__main__":
    main()
