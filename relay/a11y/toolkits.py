"""What differs between the toolkits' accessibility bridges, and how the worker copes.

- **Qt** crashes (Qt 5.15) or answers an error when sent ``Properties.GetAll``: its nodes are
  described one property at a time (``answers_get_all``, ``describe``, ``properties``). Its
  ``InsertText`` counts UTF-16 code units where ATK's (GTK's) counts bytes
  (``insert_length``). It focuses a widget of a window that is not the active one without
  activating it (``grab``).
- **GTK** selects an entry's text when it gains the focus (``grab`` leaves a focused element
  as it is).
- **Chromium** and the apps built on it expose a page only when their renderer's
  accessibility is on; a page still loading looks the same for a moment
  (``renderer_missing``, ``renderer_fills``).

Each app's toolkit is what it says in ``Application.ToolkitName`` (``Bus.toolkit_names``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any, Final

from relay.a11y.bus import Bus
from relay.a11y.nodes import (
    ACCESSIBLE,
    COMPONENT,
    PROPERTIES,
    Call,
    CallFailed,
    Key,
    Node,
    first_failure,
    unwrap,
)
from relay.a11y.roles import state_tokens

# What a node not in its app's cache is described by (its ``Accessible`` properties).
DESCRIBED: Final = ("Name", "Description", "ChildCount")
# Toolkits (their ``ToolkitName``, lower case) whose bridge must not be sent
# ``Properties.GetAll``: Qt's reads a second argument that GetAll does not carry, and the app
# crashes (Qt 5.15) or answers an error. Their nodes are described one property at a time.
NO_GET_ALL: Final = frozenset({"qt"})
# How long an element may take to say it is focused after GrabFocus (Chromium's renderer moves
# the focus in ~35 ms); one that does not is clicked before physical keys reach it.
FOCUS_WAIT_S: Final = 0.3
# How long a browser's empty documents may take to fill before they are called missing.
RENDERER_GRACE_S: Final = 2.0
BROWSERS: Final = ("chromium", "chrome", "electron", "brave", "msedge")


def answers_get_all(bus: Bus, buses: Iterable[str]) -> set[str]:
    """Those of ``buses`` (apps) whose nodes may be described by one ``GetAll`` each: the
    apps whose toolkit said its name and is not in ``NO_GET_ALL`` (the others are
    described one property at a time)."""
    kits = bus.toolkit_names(buses)
    return {name for name, kit in kits.items() if kit and kit not in NO_GET_ALL}


def describe(bus: Bus, key: Key, bulk: bool) -> list[Call]:
    """The calls that describe a node: its properties in one ``GetAll`` (``bulk``), else
    one ``Get`` each."""
    if bulk:
        return [Call(key[0], key[1], PROPERTIES, "GetAll", "(s)", (ACCESSIBLE,))]
    return [bus.prop(key, ACCESSIBLE, p) for p in DESCRIBED]


def properties(
    bus: Bus, keys: Sequence[Key], answers: Sequence[Sequence[Any]]
) -> list[tuple[str, str, int] | None]:
    """Name, description and child count of each object from the replies to its
    ``describe`` calls; read one by one (pipelined) where an app did not answer
    ``GetAll``."""
    out: list[tuple[str, str, int] | None] = [None] * len(keys)
    retry: list[int] = []
    for i, answer in enumerate(answers):
        if len(answer) == len(DESCRIBED):
            if first_failure(answer) is None:
                name, description, count = (r[0] for r in answer)
                out[i] = (str(name), str(description), int(count))
            continue
        reply = answer[0]
        if isinstance(reply, CallFailed):
            if reply.kind == "failed":
                retry.append(i)
            continue
        values = reply[0] if reply and isinstance(reply[0], dict) else {}
        out[i] = (
            str(values.get("Name", "")),
            str(values.get("Description", "")),
            int(values.get("ChildCount", 0)),
        )
    again = bus.many([c for i in retry for c in describe(bus, keys[i], bulk=False)])
    for n, i in enumerate(retry):
        part = again[n * 3 : n * 3 + 3]
        if first_failure(part) is None:
            name, description, count = (r[0] for r in part)
            out[i] = (str(name), str(description), int(count))
    return out


def insert_length(text: str, toolkit: str) -> int:
    """The length ``EditableText.InsertText`` is given with ``text``: the app inserts that
    much of it, counted in UTF-16 code units by Qt's bridge, in bytes (UTF-8) by ATK's (GTK
    and the other apps whose bridge is ATK's; apps that do not say their toolkit too)."""
    if toolkit == "qt":
        return len(text.encode("utf-16-le")) // 2
    return len(text.encode())


def grab(bus: Bus, node: Node) -> bool:
    """Give the element the focus, unless it has it (GTK selects an entry's text when it
    gains the focus: pressing keys in a focused field must not select anything). True
    only when the element then says it is focused (within ``FOCUS_WAIT_S``): Qt focuses
    a widget of a window that is not the active one without activating it, and keys go
    to the active window."""
    if "focused" in node.states:
        return True
    if not node.has("Component"):
        return False
    state = Call(node.bus, node.path, ACCESSIBLE, "GetState")
    deadline = time.monotonic() + FOCUS_WAIT_S
    try:
        if not bus.call(Call(node.bus, node.path, COMPONENT, "GrabFocus"))[0]:
            return False
        while "focused" not in state_tokens(bus.call(state)[0]):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            bus.wait_event(min(left, 0.05))  # woken by the focus event
    except CallFailed:
        return False
    return True


def renderer_missing(app_ids: frozenset[str], nodes: list[tuple[Node, list[int] | None]]) -> bool:
    """Whether a Chromium-based app shows its window's frame and toolbar but only empty,
    sizeless web documents (its renderer exposes no tree)."""
    if not any(b in i for i in app_ids for b in BROWSERS):
        return False
    docs = [(n, b) for n, b in nodes if n.role == "document_web"]
    if not docs:
        # A browser's main window without any document: its renderer never joined the bus.
        return len(nodes) <= 3 and bool(nodes) and nodes[0][0].role == "frame"
    return all(n.child_count == 0 and not n.name and (not b or b[2] * b[3] == 0) for n, b in docs)


def renderer_fills(bus: Bus, docs: list[Node]) -> bool:
    """A page still loading looks like a browser without a renderer tree for a moment:
    whether its documents fill within ``RENDERER_GRACE_S``."""
    deadline = time.monotonic() + RENDERER_GRACE_S
    while time.monotonic() < deadline:
        bus.wait_event(0.1)
        counts = bus.many([bus.prop(d.key, ACCESSIBLE, "ChildCount") for d in docs])
        if any(unwrap(c, 0, int) > 0 for c in counts):
            return True
    return False
