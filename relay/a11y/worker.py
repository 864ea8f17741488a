"""The accessibility worker: observes and acts on one desktop's accessibility tree (AT-SPI).

One worker runs per desktop, started on first use by the relay (``relay/a11y/client.py``) as
the desktop's user, with the desktop's environment (its display and session bus), under the
system's Python: the GObject bindings it needs are the distribution's, built for that
interpreter only. It imports nothing of relaydesk but ``relay.a11y.atspi`` and the pure
selector parser (``wire.a11y_selector``).

Protocol: JSON lines. In: ``{"id", "call", "params"}``; out: ``{"id", "ok": true, "result"}``
or ``{"id", "ok": false, "error": {"code", "message", "suggestion"}}``. The first line out is
``{"ready": true}`` or ``{"ready": false, "reason"}``. Calls run one at a time.

Calls: ``apps``, ``observe``, ``find``, ``read``, ``act``, ``text`` (an element's text, read
back after physical typing) and ``wait`` (docs/accessibility.md). Elements come back as
qualified refs ``@<snapshot>:<element>``; a snapshot lives ``RELAYDESK_A11Y_SNAPSHOT_TTL_S``
in a bounded LRU, and every ref keeps the locator that found it, so it is re-resolved against
the live tree right before any action.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import secrets
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from relay.a11y.atspi import (
    ACCESSIBLE,
    COMPONENT,
    COORD_SCREEN,
    ROOT_PATH,
    Bus,
    Call,
    CallFailed,
    Details,
    Key,
    Node,
    Tree,
    first_failure,
    role_token,
    state_tokens,
    unwrap,
)
from wire import a11y_selector as selectors
from wire.errors import ErrorCode, RelaydeskError

CALL_TIMEOUT_MS: Final = int(os.environ.get("RELAYDESK_A11Y_CALL_TIMEOUT_MS", "250"))
SNAPSHOT_TTL_S: Final = float(os.environ.get("RELAYDESK_A11Y_SNAPSHOT_TTL_S", "120"))
SNAPSHOTS_KEPT: Final = 64
# A container with more children than this is not descended into (Calc's sheet has 2^31).
HUGE: Final = 500
MAX_LINE: Final = 1 << 20
TEXT_PREVIEW: Final = 40
READ_TEXT_MAX: Final = 4000
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
MAX_KEPT_TREES: Final = 16
# A kept tree is read again after this long even without an event (what is showing changes
# on scrolling without one).
TREE_MAX_AGE_S: Final = 1.0
# A listing of the apps is reused this long unless the registry announces a change.
APPS_MAX_AGE_S: Final = 2.0
# Children of nodes out of view one find may list beyond what the apps cached.
HIDDEN_FILL_BUDGET: Final = 2000
# Nodes a walk's level-by-level listing of uncached children looks at, at most (deeper or
# later ones are listed one by one as the walk reaches them).
PREFILL_NODES: Final = 5000
# How long a browser's empty documents may take to fill before they are called missing.
RENDERER_GRACE_S: Final = 2.0
SCROLL_ANYWHERE: Final = 6  # AtspiScrollType
# How long an element may take to say it is focused after GrabFocus (Chromium's renderer moves
# the focus in ~35 ms); one that does not is clicked before physical keys reach it.
FOCUS_WAIT_S: Final = 0.3
ACTION: Final = "org.a11y.atspi.Action"
CLICK_ACTIONS: Final = ("click", "press", "activate", "toggle", "jump", "open", "select")
SECRET_ROLES: Final = frozenset({"password_text"})
SUGGESTIONS: Final[dict[str, str]] = {
    "stale_ref": "the snapshot expired; call desktop_observe or desktop_find again for fresh refs",
    "snapshot_not_found": "use a ref from a recent desktop_observe or desktop_find answer",
    "element_not_found": "the element is gone (window closed or content changed); observe again",
    "app_not_found": "call desktop_apps to see the running apps and their windows",
    "policy_denied": "this relay does not let agents use that app; pick another app",
    "action_failed": "read the element with desktop_read, or fall back to a screenshot and a "
    "guarded click",
    "a11y_unavailable": "use the screen tool (screenshot, then a guarded click) instead",
    "timeout": "the app is busy or stopped; try again later or use the screen tool",
    "invalid_args": "fix the named argument and call again",
}


class A11yError(RelaydeskError):
    """An answer the worker gives as ``{code, message, suggestion, …}``."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        self.code = ErrorCode(code)
        self.details = details
        super().__init__(message)

    def body(self) -> dict[str, Any]:
        suggestion = self.details.pop("suggestion", None) or SUGGESTIONS.get(self.code.value, "")
        return {
            "code": self.code.value,
            "message": self.message,
            "suggestion": suggestion,
            **self.details,
        }


def failed(err: CallFailed, what: str) -> A11yError:
    if err.kind == "closed":
        return A11yError("a11y_unavailable", f"{what}: {err}; it is started again on the next "
                         "call", suggestion="retry once")  # fmt: skip
    if err.kind == "timeout":
        return A11yError(
            "timeout",
            f"{what}: the app did not answer within "
            f"{CALL_TIMEOUT_MS} ms; it is marked unresponsive for a while",
        )
    if err.kind == "gone":
        return A11yError("element_not_found", f"{what}: {err}")
    return A11yError("action_failed", f"{what}: {err}")


# -- policy ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """Which apps agents may observe and act on (relay settings, docs/accessibility.md)."""

    allow: frozenset[str] | None = None
    deny: frozenset[str] = frozenset()
    read_only: frozenset[str] = frozenset()

    @classmethod
    def from_env(cls) -> Policy:
        raw = json.loads(os.environ.get("RELAYDESK_A11Y_POLICY") or "{}")

        def names(key: str) -> frozenset[str]:
            return frozenset(str(n).lower() for n in raw.get(key) or ())

        return cls(names("allow") if raw.get("allow") else None, names("deny"), names("read_only"))

    def refusal(self, app: App, acting: bool) -> str | None:
        """Why agents may not observe (or, ``acting``, act on) ``app``; None: they may."""
        ids = app.ids()
        if ids & self.deny:
            return "denied by this relay's accessibility policy"
        if self.allow is not None and not ids & self.allow:
            return "not in this relay's list of allowed apps"
        if acting and ids & self.read_only:
            return "read-only under this relay's accessibility policy"
        return None


@dataclass
class App:
    bus: str
    name: str
    pid: int | None
    command: str | None

    def ids(self) -> frozenset[str]:
        return frozenset(x.lower() for x in (self.name, self.command or "") if x)


# -- snapshots ---------------------------------------------------------------------------------


Step = tuple[str, str, int]


@dataclass(frozen=True)
class Locator:
    """How to find an element again: its app, and the path of (role, name, index among the
    siblings of that role and name) from the app's root."""

    app_name: str
    steps: tuple[Step, ...]


@dataclass
class Element:
    key: Key
    locator: Locator
    role: str
    name: str


@dataclass
class Snapshot:
    id: str
    created: float
    elements: dict[str, Element] = field(default_factory=dict)

    def add(self, element: Element) -> str:
        ref = f"@{self.id}:e{len(self.elements) + 1}"
        self.elements[ref.split(":", 1)[1]] = element
        return ref


REF_RE: Final = re.compile(r"^@([a-z0-9]{8}):(e[0-9]{1,6})$")


class Snapshots:
    def __init__(self, ttl_s: float, kept: int) -> None:
        self.ttl_s, self.kept = ttl_s, kept
        self._all: OrderedDict[str, Snapshot] = OrderedDict()
        self._expired: OrderedDict[str, None] = OrderedDict()

    def new(self) -> Snapshot:
        self._prune()
        snapshot = Snapshot(secrets.token_hex(4), time.monotonic())
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


# -- the worker --------------------------------------------------------------------------------


@dataclass
class Walked:
    node: Node
    depth: int
    path: list[Node]


@dataclass(frozen=True)
class Window:
    """A top-level window of an app."""

    key: Key
    role: str
    name: str
    states: frozenset[str]
    bounds: list[int] | None

    @property
    def focused(self) -> bool:
        return "active" in self.states


class Worker:
    def __init__(self, bus: Bus, policy: Policy) -> None:
        self.bus = bus
        self.policy = policy
        self.snapshots = Snapshots(SNAPSHOT_TTL_S, SNAPSHOTS_KEPT)
        self.names: dict[str, str] = {}  # bus name → the app's name, as it last said it
        self._hidden_budget = 0  # children of hidden nodes a find may still list
        self._known: dict[str, App] = {}  # bus name → app, as last listed
        self._trees: dict[str, tuple[float, Tree]] = {}  # bus name → (read at, tree)
        self._listed_at = -APPS_MAX_AGE_S
        self._registry: str | None = None

    # -- apps and windows ----------------------------------------------------------------------

    def list_apps(self) -> list[App]:
        """The apps on the bus: listed again when the registry announced a change (an app
        came or went) or ``APPS_MAX_AGE_S`` passed, else the last listing."""
        self.bus.drain()
        if self._registry is None:
            self._registry = self.bus.registry_owner()
        fresh = time.monotonic() - self._listed_at < APPS_MAX_AGE_S
        if fresh and self._registry is not None and self._registry not in self.bus.changed:
            return list(self._known.values())
        if self._registry is not None:
            self.bus.changed.discard(self._registry)
        apps = self._list_apps()
        self._listed_at = time.monotonic()
        return apps

    def _list_apps(self) -> list[App]:
        keys = self.bus.apps()
        replies = self.bus.many(
            [
                c
                for k in keys
                for c in (self.bus.prop(k, ACCESSIBLE, "Name"), self.bus.pid_call(k[0]))
            ]
        )
        apps: list[App] = []
        for i, key in enumerate(keys):
            # A busy or stopped app cannot say its name: it keeps the one it last said.
            name = unwrap(replies[2 * i], "", str) or self.names.get(key[0], "")
            if name:
                self.names[key[0]] = name
            pid = unwrap(replies[2 * i + 1], None, int)
            apps.append(App(key[0], name, pid, _command(pid)))
        self._known = {app.bus: app for app in apps}
        return apps

    def _app_by_bus(self, element: Element) -> App:
        """The app of an element: from the last listing when its bus is still connected
        (one call fewer before every action), else from a new listing."""
        app = self._known.get(element.key[0])
        if app is not None and app.pid is not None and _alive(app.pid):
            return app
        return self._app_of(element, self.list_apps())

    def find_app(self, wanted: object, apps: list[App] | None = None) -> App:
        apps = self.list_apps() if apps is None else apps
        text = str(wanted).strip().lower()
        for app in apps:
            if (
                text in app.ids()
                or text == app.bus
                or (app.pid is not None and text == str(app.pid))
            ):
                return app
        raise A11yError(
            "app_not_found",
            f"no running app {str(wanted)[:64]!r} on the accessibility bus",
            running=[a.name for a in apps][:50],
        )

    def _windows(self, apps: Sequence[App], bounds: bool = True) -> dict[str, list[Window]]:
        """Each app's top-level windows (role, name, states and, with ``bounds``, bounds):
        from its kept tree while that is valid and bounds are not wanted, else read for all
        the apps at once in two pipelined batches. Apps that do not answer have none."""
        out: dict[str, list[Window]] = {}
        live: list[App] = []
        for app in apps:
            kept = None if bounds else self._kept(app)
            if kept is not None:
                out[app.bus] = [Window(n.key, n.role, n.name, n.states, None)
                                for n in kept.children(kept.nodes[kept.root])]  # fmt: skip
            elif not self._skipped(app):
                live.append(app)
        roots = self.bus.many([Call(a.bus, ROOT_PATH, ACCESSIBLE, "GetChildren") for a in live])
        keys = {a.bus: [(str(b), str(p)) for b, p in unwrap(r, [])]
                for a, r in zip(live, roots, strict=True)}  # fmt: skip
        calls: list[Call] = []
        for key in (k for app in live for k in keys[app.bus]):
            calls.extend(
                (
                    Call(key[0], key[1], ACCESSIBLE, "GetRole"),
                    self.bus.prop(key, ACCESSIBLE, "Name"),
                    Call(key[0], key[1], ACCESSIBLE, "GetState"),
                )
            )
            if bounds:
                calls.append(Call(key[0], key[1], COMPONENT, "GetExtents", "(u)", (COORD_SCREEN,)))
        replies = iter(self.bus.many(calls))
        for app in live:
            out[app.bus] = []
            for key in keys[app.bus]:
                role, name, states = next(replies), next(replies), next(replies)
                extents = unwrap(next(replies)) if bounds else None
                out[app.bus].append(Window(key, role_token(unwrap(role, 0, int)),
                                           unwrap(name, "", str),
                                           state_tokens(unwrap(states, [])),
                                           _bounds(extents)))  # fmt: skip
        return out

    def _skipped(self, app: App) -> bool:
        try:
            self.bus.check_responsive(app.bus)
        except CallFailed:
            return True
        return False

    def apps(self, params: dict[str, Any]) -> dict[str, Any]:
        snapshot = self.snapshots.new()
        listed = []
        running = self.list_apps()
        allowed = [app for app in running if self.policy.refusal(app, acting=False) is None]
        every = self._windows(allowed)
        for app in running:
            refusal = self.policy.refusal(app, acting=False)
            entry: dict[str, Any] = {"name": app.name, "pid": app.pid, "command": app.command}
            if refusal is not None:
                listed.append(entry | {"policy": "denied", "reason": refusal, "windows": []})
                continue
            windows = every.get(app.bus, [])
            entry["responsive"] = not self._skipped(app)
            if (why := self.policy.refusal(app, acting=True)) is not None:
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

    # -- trees ---------------------------------------------------------------------------------

    def _kept(self, app: App) -> Tree | None:
        """The app's kept tree while it is valid: no event announced a change of structure,
        names or states since it was read, and it is younger than ``TREE_MAX_AGE_S`` (apps do
        not announce everything: Chromium scrolls without any event). Its kept details lose
        what the app's bounds, text and value events named."""
        self.bus.drain()
        kept = self._trees.get(app.bus)
        if kept is None or app.bus in self.bus.changed or \
                time.monotonic() - kept[0] >= TREE_MAX_AGE_S:  # fmt: skip
            return None
        tree = kept[1]
        tree.forget_details(self.bus.moved.pop(app.bus, set()),
                            self.bus.touched.pop(app.bus, set()))  # fmt: skip
        return tree

    def _tree(self, app: App) -> Tree:
        """The app's tree: the kept one while valid (``_kept``), else read again (what was
        listed beyond the app's cache is brought along with its states read again, when
        the kept tree only aged: ``Bus.carry``)."""
        kept = self._kept(app)
        if kept is not None:
            return kept
        old = self._trees.get(app.bus)
        aged = old[1] if old is not None and app.bus not in self.bus.changed else None
        self.bus.forget(app.bus)
        try:
            tree = self.bus.tree((app.bus, ROOT_PATH))
            if aged is not None:
                self.bus.carry(aged, tree)
        except CallFailed as err:
            self._trees.pop(app.bus, None)
            raise failed(err, f"reading {app.name!r}") from None
        self._trees[app.bus] = (time.monotonic(), tree)
        if len(self._trees) > MAX_KEPT_TREES:
            self._trees.pop(next(iter(self._trees)))
        return tree

    def _drop(self, app: App) -> None:
        """Forget what is kept of an app an act was just performed on: what it shows is
        read again on the next call."""
        self._trees.pop(app.bus, None)
        self.bus.forget(app.bus)

    def _scope(self, params: dict[str, Any], acting: bool = False) -> list[tuple[App, Tree, Node]]:
        """The (app, tree, root) pairs a call looks at: the named window, the named app, else
        the focused window (else every allowed app for ``find``/``wait``)."""
        window, app_name = params.get("window"), params.get("app")
        apps = self.list_apps()
        if isinstance(window, str) and window.startswith("@"):
            element = self.snapshots.element(window, "window")
            app = self._app_of(element, apps)
            tree = self._tree(app)
            node = self._live_node(tree, element)
            return [(app, tree, node)]
        candidates = [self.find_app(app_name, apps)] if app_name is not None else apps
        allowed: list[App] = []
        for app in candidates:
            if (why := self.policy.refusal(app, acting)) is not None:
                if app_name is not None:
                    raise A11yError("policy_denied", f"{app.name!r}: {why}")
                continue
            if app_name is None and self._skipped(app):
                continue
            allowed.append(app)
        whole_app = app_name is not None and window is None
        everything = window is None and app_name is None and bool(params.get("_all"))
        windows: dict[str, list[Window]] = {}
        if not (whole_app or everything):
            # Which window is meant is read cheaply (names and states of the top-level
            # windows, of all apps at once): only the app that has it is read whole.
            windows = self._windows(allowed, bounds=False)
        pairs: list[tuple[App, Tree, Node]] = []
        for app in allowed:
            wanted: set[Key] = set()
            if not (whole_app or everything):
                wanted = {w.key for w in windows.get(app.bus, [])
                          if (w.name == window if window is not None else w.focused)}  # fmt: skip
                if not wanted:
                    continue
            try:
                tree = self._tree(app)
            except A11yError:
                if app_name is not None:
                    raise
                continue
            if whole_app:
                pairs.append((app, tree, tree.nodes[tree.root]))
                continue
            for node in tree.children(tree.nodes[tree.root]):
                if everything or node.key in wanted:
                    pairs.append((app, tree, node))
        if not pairs and window is not None:
            raise A11yError("app_not_found", f"no window named {str(window)[:64]!r}")
        if not pairs and window is None and app_name is None and not params.get("_all"):
            raise A11yError(
                "app_not_found",
                "no window has the focus; name an app or a window",
                suggestion="call desktop_apps, then pass app or window",
            )
        return pairs

    def _app_of(self, element: Element, apps: list[App]) -> App:
        for app in apps:
            if app.bus == element.key[0]:
                return app
        for app in apps:
            if app.name == element.locator.app_name:
                return app
        raise A11yError(
            "element_not_found",
            f"the app {element.locator.app_name!r} of this element is no longer running",
        )

    def _live_node(self, tree: Tree, element: Element) -> Node:
        """The element in the live tree: by its object, else by its locator."""
        node = tree.nodes.get(element.key) if tree.bus == element.key[0] else None
        if node is None:
            node = self._relocate(tree, element.locator)
        if node is None or "defunct" in node.states:
            raise A11yError(
                "element_not_found",
                f"{element.role} {element.name!r} is no longer in its app's accessibility tree",
            )
        return node

    def _relocate(self, tree: Tree, locator: Locator) -> Node | None:
        node = tree.nodes[tree.root]
        for role, name, index in locator.steps:
            self.bus.fill(tree, [node])
            same = [c for c in tree.children(node) if c.role == role and c.name == name]
            if index >= len(same):
                return None
            node = same[index]
        return node

    def _locator(
        self, app: App, path: Sequence[Node], tree: Tree, memo: dict[Key, Step] | None = None
    ) -> Locator:
        """``path``'s locator; ``memo`` keeps the steps of one call's elements (they share
        most of their ancestors)."""
        memo = {} if memo is None else memo
        steps = []
        for parent, node in itertools.pairwise(path):
            step = memo.get(node.key)
            if step is None:
                same = [c.key for c in tree.children(parent)
                        if c.role == node.role and c.name == node.name]  # fmt: skip
                step = (node.role, node.name, same.index(node.key) if node.key in same else 0)
                memo[node.key] = step
            steps.append(step)
        return Locator(app.name, tuple(steps))

    def _walk(
        self, tree: Tree, root: Node, max_depth: int, path_to_root: list[Node],
        hidden: bool = False,
    ) -> Iterator[Walked]:  # fmt: skip
        """Depth-first over showing nodes (``hidden``: also over the cached nodes that are not
        showing, e.g. rows scrolled out of view); never into huge or self-managed containers.
        Children an app has not cached are listed first, level by level, pipelined
        (``_prefill``)."""
        self._prefill(tree, root, max_depth, hidden)
        stack: list[tuple[Node, int, list[Node]]] = [(root, 0, [*path_to_root, root])]
        while stack:
            node, depth, path = stack.pop()
            yield Walked(node, depth, path)
            if not _descends(node, depth, max_depth):
                continue
            if self._wants_fill(node, hidden):  # beyond what the prefill reached
                self.bus.fill(tree, [node])
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
        if hidden and self._hidden_budget >= node.child_count:
            self._hidden_budget -= node.child_count
            return True
        return False

    def _prefill(self, tree: Tree, root: Node, max_depth: int, hidden: bool) -> None:
        """List what the walk will need that the app has not cached, one level of the tree
        per pipelined batch (two round trips a level instead of two a node), up to
        ``PREFILL_NODES`` nodes."""
        level, seen = [(root, 0)], 0
        while level and seen < PREFILL_NODES:
            seen += len(level)
            self.bus.fill(tree, [n for n, d in level if _descends(n, d, max_depth)
                                 and self._wants_fill(n, hidden)])  # fmt: skip
            level = [(k, d + 1) for n, d in level if _descends(n, d, max_depth)
                     for k in _kids(tree, n, hidden)]  # fmt: skip

    def _path_to(self, tree: Tree, node: Node) -> list[Node]:
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

    # -- observe -------------------------------------------------------------------------------

    def observe(self, params: dict[str, Any]) -> dict[str, Any]:
        max_depth = int(params.get("depth", 24))
        budget = int(params.get("max_nodes", 400))
        view = params.get("view", "interactive")
        fmt = params.get("format", "text")
        (app, tree, root), *_ = self._scope(params)
        snapshot = self.snapshots.new()
        chosen: list[tuple[Walked, int]] = []
        cut_budget = cut_depth = False
        included_depth: dict[Key, int] = {}
        for walked in self._walk(tree, root, max_depth, self._path_to(tree, root)):
            node = walked.node
            if walked.depth >= max_depth and node.child_count:
                cut_depth = True
            parent_level = next(
                (
                    included_depth[p.key]
                    for p in reversed(walked.path[:-1])
                    if p.key in included_depth
                ),
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
        extras = self._details([w.node for w, _ in chosen])
        docs = [(w.node, b) for (w, _), (b, _) in zip(chosen, extras, strict=True)]
        if _renderer_missing(app, docs):
            if params.get("_retried") or not self._renderer_fills(
                [n for n, _ in docs if n.role in ("document_web", "frame")]
            ):
                raise _no_renderer(app)
            return self.observe(params | {"_retried": True})
        lines, items = [], []
        memo: dict[Key, Step] = {}
        for (walked, level), (bounds, value) in zip(chosen, extras, strict=True):
            node = walked.node
            locator = self._locator(app, walked.path, tree, memo)
            ref = snapshot.add(Element(node.key, locator, node.role, node.name))
            lines.append("  " * level + _line(ref, node, bounds, value))
            if fmt != "text":
                items.append(_item(ref, node, bounds, value, level))
        text = "\n".join(lines)
        result: dict[str, Any] = {
            "snapshot": snapshot.id,
            "app": app.name,
            "window": root.name,
            "nodes": len(chosen),
            "view": view,
            "truncated": {"budget": cut_budget, "depth": cut_depth},
        }
        if fmt in ("text", "both"):
            result["text"] = text
        if fmt in ("json", "both"):
            result["elements"] = items
        if cut_budget:
            result["note"] = (
                f"the tree was cut at {budget} elements: observe a window or raise "
                "max_nodes for more"
            )
        return result

    def _renderer_fills(self, docs: list[Node]) -> bool:
        """A page still loading looks like a browser without a renderer tree for a moment:
        whether its documents fill within ``RENDERER_GRACE_S``."""
        deadline = time.monotonic() + RENDERER_GRACE_S
        while time.monotonic() < deadline:
            self.bus.wait_event(0.1)
            counts = self.bus.many([self.bus.prop(d.key, ACCESSIBLE, "ChildCount") for d in docs])
            if any(unwrap(c, 0, int) > 0 for c in counts):
                return True
        return False

    def _details(self, nodes: Sequence[Node]) -> list[Details]:
        """Bounds and values of ``nodes``: those kept with their tree (``Tree.details``),
        the others read, pipelined, and kept."""
        out: list[Details | None] = [None] * len(nodes)
        calls: list[Call] = []
        plan: list[tuple[int, int | None, int | None, str]] = []
        for i, node in enumerate(nodes):
            kept = self._trees.get(node.bus)
            tree = kept[1] if kept is not None and kept[1].nodes.get(node.key) is node else None
            if tree is not None and (known := tree.details.get(node.key)) is not None:
                out[i] = known
                continue
            extents = value = None
            if node.has("Component"):
                extents = len(calls)
                calls.append(
                    Call(node.bus, node.path, COMPONENT, "GetExtents", "(u)", (COORD_SCREEN,))
                )
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
            plan.append((i, extents, value, kind))
        replies = self.bus.many(calls)
        # A stopped app misses every call; a busy machine may make one miss now and then
        # (that element then has no bounds this time).
        if replies and all(isinstance(r, CallFailed) and r.kind == "timeout" for r in replies):
            raise failed(replies[0], "reading bounds and values")
        for i, extents, value, kind in plan:
            node = nodes[i]
            bounds = _bounds(unwrap(replies[extents])) if extents is not None else None
            text = None
            if value is not None:
                raw = unwrap(replies[value])
                if raw is not None:
                    text = _format_value(raw) if kind == "value" else str(raw)
                    if node.role in SECRET_ROLES and text:
                        text = "•" * min(len(text), 8)
            out[i] = (bounds, text)
            answered = [replies[j] for j in (extents, value) if j is not None]
            kept = self._trees.get(node.bus)
            if first_failure(answered) is None and kept is not None and \
                    kept[1].nodes.get(node.key) is node:  # fmt: skip
                kept[1].details[node.key] = (bounds, text)
        return [d if d is not None else (None, None) for d in out]

    # -- find and wait -------------------------------------------------------------------------

    def _matches(
        self, selector: selectors.Selector, params: dict[str, Any], limit: int
    ) -> tuple[list[tuple[App, Tree, Walked]], bool]:
        pairs = self._scope(params | {"_all": True}, acting=False)
        found: list[tuple[App, Tree, Walked]] = []
        needs_value = any(t.name == "value" for c in selector.compounds for t in c.attrs)
        needs_id = any(t.name == "id" for c in selector.compounds for t in c.attrs)
        nth = selector.compounds[-1].nth
        wanted = limit if nth is None else nth + 1
        self._hidden_budget = HIDDEN_FILL_BUDGET
        for app, tree, root in pairs:
            walked_all = list(
                self._walk(
                    tree,
                    root,
                    64,
                    self._path_to(tree, root) if root.key != tree.root else [],
                    hidden=True,
                )
            )
            extra = self._match_fields(walked_all, needs_value, needs_id)
            last = selector.compounds[-1]
            for walked in walked_all:
                node = walked.node
                # The element itself first: its ancestors are matched only when it could be.
                if not selectors.compound_matches(last, _as_mapping(node, extra.get(node.key))):
                    continue
                chain = [_as_mapping(n, extra.get(n.key)) for n in walked.path]
                if selectors.match_path(selector, chain):
                    found.append((app, tree, walked))
                    if len(found) >= wanted:
                        break
            if len(found) >= wanted:
                break
        if nth is not None:
            return (found[nth : nth + 1], False)
        return (found[:limit], len(found) >= limit)

    def _match_fields(
        self, walked: list[Walked], value: bool, ident: bool
    ) -> dict[Key, dict[str, str]]:
        if not (value or ident):
            return {}
        nodes = [w.node for w in walked]
        out: dict[Key, dict[str, str]] = {n.key: {} for n in nodes}
        if value:
            for node, (_, text) in zip(nodes, self._details(nodes), strict=True):
                out[node.key]["value"] = text or ""
        if ident:
            replies = self.bus.many(
                [self.bus.prop(n.key, ACCESSIBLE, "AccessibleId") for n in nodes]
            )
            for node, reply in zip(nodes, replies, strict=True):
                out[node.key]["id"] = unwrap(reply, "", str)
        return out

    def _selector(self, params: dict[str, Any]) -> selectors.Selector:
        try:
            return selectors.parse(str(params.get("selector", "")))
        except selectors.SelectorError as err:
            raise A11yError("invalid_args", f"selector: {err}", field="selector") from None

    def find(self, params: dict[str, Any]) -> dict[str, Any]:
        selector = self._selector(params)
        limit = int(params.get("limit", 20))
        found, more = self._matches(selector, params, limit)
        snapshot = self.snapshots.new()
        details = self._details([w.node for _, _, w in found])
        matches = []
        for (app, tree, walked), (bounds, value) in zip(found, details, strict=True):
            node = walked.node
            ref = snapshot.add(
                Element(node.key, self._locator(app, walked.path, tree), node.role, node.name)
            )
            matches.append(_item(ref, node, bounds, value, None) | {"app": app.name})
        return {"snapshot": snapshot.id, "matches": matches, "count": len(matches), "more": more}

    def wait(self, params: dict[str, Any]) -> dict[str, Any]:
        selector = self._selector(params)
        condition = params.get("condition", "exists")
        timeout_s = float(params.get("timeout_ms", 5000)) / 1000
        started = time.monotonic()
        deadline = started + timeout_s
        checks = 0
        while True:
            checks += 1
            try:
                found, _ = self._matches(selector, params, 1)
            except A11yError as err:
                if err.code != "app_not_found":
                    raise
                found = []
            node = found[0][2].node if found else None
            if _satisfied(condition, node):
                result = {
                    "satisfied": True,
                    "condition": condition,
                    "checks": checks,
                    "elapsed_ms": round((time.monotonic() - started) * 1000),
                }
                if node is not None:
                    result |= self.find(params | {"limit": 1})
                return result
            left = deadline - time.monotonic()
            if left <= 0:
                raise A11yError(
                    "timeout",
                    f"{condition} not reached for {selector.text!r} in {timeout_s:g} s",
                    checks=checks,
                )
            # Woken by the apps' events where they fire; a check every 250 ms where they do not.
            self.bus.wait_event(min(left, 0.25))

    # -- one element ---------------------------------------------------------------------------

    def _resolve(
        self, params: dict[str, Any], acting: bool, prefetch: Sequence[tuple[str, str]] = ()
    ) -> tuple[App, Node, dict[str, Any]]:
        """The ref's app and its element as it is now; ``prefetch``: (interface, method) calls
        on the element sent along with its live check (their replies by method, when the
        object itself was found)."""
        element = self.snapshots.element(params.get("ref"))
        app = self._app_by_bus(element)
        if (why := self.policy.refusal(app, acting)) is not None:
            raise A11yError("policy_denied", f"{app.name!r}: {why}")
        key = element.key if app.bus == element.key[0] else None
        if key is not None:
            # Live check of the object itself: one call, no tree read.
            try:
                reply = self.bus.many(
                    [
                        Call(key[0], key[1], ACCESSIBLE, "GetState"),
                        Call(key[0], key[1], ACCESSIBLE, "GetInterfaces"),
                        Call(key[0], key[1], ACCESSIBLE, "GetRole"),
                        self.bus.prop(key, ACCESSIBLE, "Name"),
                        self.bus.prop(key, ACCESSIBLE, "ChildCount"),
                        self.bus.prop(key, ACCESSIBLE, "Description"),
                        *(Call(key[0], key[1], i, m) for i, m in prefetch),
                    ]
                )
            except CallFailed as err:
                raise failed(err, "reading the element") from None
            failure = first_failure(reply[:6])
            if failure is None:
                states = state_tokens(reply[0][0])
                if "defunct" not in states:
                    node = Node(
                        key[0],
                        key[1],
                        None,
                        0,
                        int(reply[4][0]),
                        frozenset(i.removeprefix("org.a11y.atspi.") for i in reply[1][0]),
                        str(reply[3][0]),
                        role_token(int(reply[2][0])),
                        str(reply[5][0]),
                        states,
                    )
                    return app, node, {m: r for (_, m), r in zip(prefetch, reply[6:], strict=True)}
            elif failure.kind == "timeout":
                raise failed(failure, f"{app.name!r}")
        tree = self._tree(app)
        return app, self._live_node(tree, element), {}

    def read(self, params: dict[str, Any]) -> dict[str, Any]:
        app, node, _ = self._resolve(params, acting=False)
        k = node.key
        calls = [Call(k[0], k[1], COMPONENT, "GetExtents", "(u)", (COORD_SCREEN,))]
        if node.has("Text"):
            calls.append(
                Call(k[0], k[1], "org.a11y.atspi.Text", "GetText", "(ii)", (0, READ_TEXT_MAX))
            )
        if node.has("Action"):
            calls.append(Call(k[0], k[1], "org.a11y.atspi.Action", "GetActions"))
        if node.has("Value"):
            calls.extend(
                self.bus.prop(k, "org.a11y.atspi.Value", p)
                for p in ("CurrentValue", "MinimumValue", "MaximumValue")
            )
        replies = self.bus.many(calls)
        result: dict[str, Any] = {
            "app": app.name,
            "role": node.role,
            "name": node.name,
            "description": node.description,
            "states": sorted(node.states),
            "interfaces": sorted(node.interfaces),
            "children": node.child_count,
            "bounds": _bounds(unwrap(replies[0])),
            "ref": params.get("ref"),
        }
        at = 1
        if node.has("Text"):
            text = unwrap(replies[at], "", str)
            result["text"] = "•" * min(len(text), 8) if node.role in SECRET_ROLES else text
            at += 1
        if node.has("Action"):
            result["actions"] = [a[0] for a in unwrap(replies[at], [])]
            at += 1
        if node.has("Value"):
            result["value"] = {
                n: unwrap(replies[at + i], None, float)
                for i, n in enumerate(("current", "minimum", "maximum"))
            }
        elif "text" in result:
            result["value"] = result["text"]
        return result

    def text(self, params: dict[str, Any]) -> dict[str, Any]:
        _, node, _ = self._resolve(params, acting=False)
        return {"text": self._text_of(node)}

    def _text_of(self, node: Node) -> str | None:
        if not node.has("Text"):
            return None
        try:
            reply = self.bus.call(
                Call(node.bus, node.path, "org.a11y.atspi.Text", "GetText", "(ii)", (0, -1))
            )
        except CallFailed:
            return None
        return str(reply[0])

    # -- act -----------------------------------------------------------------------------------

    def act(self, params: dict[str, Any]) -> dict[str, Any]:
        action = params.get("action")
        # A click needs the element's actions: asked for with its live check.
        prefetch = [(ACTION, "GetActions")] if action == "click" else []
        app, node, fetched = self._resolve(params, acting=True, prefetch=prefetch)
        handler = {
            "click": self._click,
            "type": self._type,
            "key": self._key,
            "scroll": self._scroll,
            "focus": self._focus,
        }.get(str(action))
        if handler is None:
            raise A11yError("invalid_args", f"unknown act {str(action)[:32]!r}", field="action")
        try:
            result = handler(node, params | {"_fetched": fetched})
        finally:
            self._drop(app)
        return {"app": app.name, "role": node.role, "name": node.name} | result

    def _center(self, node: Node) -> dict[str, int]:
        """The middle of the element's live bounds (for physical input)."""
        try:
            reply = self.bus.call(
                Call(node.bus, node.path, COMPONENT, "GetExtents", "(u)", (COORD_SCREEN,))
            )
        except CallFailed as err:
            raise failed(err, "reading the element's bounds") from None
        x, y, w, h = (int(v) for v in reply[0])
        if w <= 0 or h <= 0 or x < -10000 or y < -10000:
            raise A11yError(
                "action_failed",
                "the element has no area on the screen",
                suggestion="scroll it into view with desktop_scroll into_view, then retry",
            )
        return {"x": x + w // 2, "y": y + h // 2}

    def _physical(self, node: Node, what: str, why: str, **extra: Any) -> dict[str, Any]:
        return {
            "method": "physical",
            "reason": why,
            "physical": {"action": what, **self._center(node), **extra},
        }

    def _click(self, node: Node, params: dict[str, Any]) -> dict[str, Any]:
        if node.has("Action"):
            try:
                listed = params["_fetched"].get("GetActions")
                if listed is None or isinstance(listed, CallFailed):
                    listed = self.bus.call(Call(node.bus, node.path, ACTION, "GetActions"))
                names = [a[0] for a in listed[0]]
                lowered = [str(n).lower() for n in names]  # Qt's are "Press", "Toggle"
                index = next(
                    (lowered.index(n) for n in CLICK_ACTIONS if n in lowered),
                    0 if names else None,
                )
                if index is not None:
                    done = self.bus.call(
                        Call(node.bus, node.path, ACTION, "DoAction", "(i)", (index,))
                    )[0]
                    if done:
                        return {"method": "native", "native": names[index]}
            except CallFailed as err:
                if err.kind == "timeout":
                    raise failed(err, "clicking") from None
        return self._physical(node, "click", "the element has no usable native action")

    def _type(self, node: Node, params: dict[str, Any]) -> dict[str, Any]:
        text = str(params.get("text", ""))
        replace = params.get("mode", "replace") == "replace"
        if node.has("EditableText"):
            try:
                if replace:
                    ok = self.bus.call(
                        Call(
                            node.bus,
                            node.path,
                            "org.a11y.atspi.EditableText",
                            "SetTextContents",
                            "(s)",
                            (text,),
                        )
                    )[0]
                else:
                    end = self.bus.call(
                        self.bus.prop(node.key, "org.a11y.atspi.Text", "CharacterCount")
                    )[0]
                    toolkit = self.bus.toolkit_names([node.bus])[node.bus]
                    ok = self.bus.call(
                        Call(
                            node.bus,
                            node.path,
                            "org.a11y.atspi.EditableText",
                            "InsertText",
                            "(isi)",
                            (int(end), text, insert_length(text, toolkit)),
                        )
                    )[0]
            except CallFailed as err:
                if err.kind == "timeout":
                    raise failed(err, "typing") from None
                ok = False
            if ok:
                return {"method": "native", "text": self._text_of(node)}
        # No editable text (Chromium's fields): focus it, type physically, read back via Text.
        focused = self._grab(node)
        return {
            "method": "physical",
            "reason": "the element has no editable text interface",
            "physical": {
                "action": "type",
                "text": text,
                "replace": replace,
                "focused": focused,
                **self._center(node),
            },
        }

    def _grab(self, node: Node) -> bool:
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
            if not self.bus.call(Call(node.bus, node.path, COMPONENT, "GrabFocus"))[0]:
                return False
            while "focused" not in state_tokens(self.bus.call(state)[0]):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.bus.wait_event(min(left, 0.05))  # woken by the focus event
        except CallFailed:
            return False
        return True

    def _still_there(self, node: Node) -> bool:
        """Whether the element still answers (a call it failed as "gone" is one its app
        does not implement: toolkits answer both with the same D-Bus errors)."""
        try:
            self.bus.call(Call(node.bus, node.path, ACCESSIBLE, "GetState"))
        except CallFailed:
            return False
        return True

    def _key(self, node: Node, params: dict[str, Any]) -> dict[str, Any]:
        focused = self._grab(node)
        return {
            "method": "physical",
            "reason": "keys have no native accessibility action",
            "physical": {
                "action": "key",
                "keys": str(params.get("keys", "")),
                "focused": focused,
                **self._center(node),
            },
        }

    def _scroll(self, node: Node, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("into_view"):
            try:
                done = self.bus.call(
                    Call(node.bus, node.path, COMPONENT, "ScrollTo", "(u)", (SCROLL_ANYWHERE,))
                )[0]
            except CallFailed as err:
                if err.kind == "gone" and self._still_there(node):
                    raise A11yError(
                        "action_failed",
                        "this app cannot scroll an element into view (it has no "
                        "Component.ScrollTo)",
                        suggestion="scroll its list or page with desktop_scroll direction and "
                        "amount, then find it again",
                    ) from None
                raise failed(err, "scrolling into view") from None
            if done:
                return {"method": "native", "native": "scroll_to"}
            raise A11yError("action_failed", "the app did not scroll the element into view")
        return self._physical(
            node,
            "scroll",
            "scrolling by an amount is physical input",
            direction=str(params.get("direction", "down")),
            amount=int(params.get("amount", 3)),
        )

    def _focus(self, node: Node, params: dict[str, Any]) -> dict[str, Any]:
        if self._grab(node):
            return {"method": "native", "native": "grab_focus"}
        return self._physical(node, "click", "the element did not take the focus natively")


# -- formatting --------------------------------------------------------------------------------


def _descends(node: Node, depth: int, max_depth: int) -> bool:
    """Whether a walk goes below ``node``: not past the depth asked for, never into huge or
    self-managed containers."""
    return depth < max_depth and node.child_count <= HUGE and \
        "manages_descendants" not in node.states  # fmt: skip


def _kids(tree: Tree, node: Node, hidden: bool) -> list[Node]:
    """The children a walk visits: the showing ones (and frames), or all with ``hidden``."""
    return [k for k in tree.children(node) if hidden or "showing" in k.states or k.role == "frame"]


def insert_length(text: str, toolkit: str) -> int:
    """The length ``EditableText.InsertText`` is given with ``text``: the app inserts that
    much of it, counted in UTF-16 code units by Qt's bridge, in bytes (UTF-8) by ATK's (GTK
    and the other apps whose bridge is ATK's; apps that do not say their toolkit too)."""
    if toolkit == "qt":
        return len(text.encode("utf-16-le")) // 2
    return len(text.encode())


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _command(pid: int | None) -> str | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _bounds(extents: Any) -> list[int] | None:
    if not extents or len(extents) != 4:
        return None
    return [int(v) for v in extents]


def _format_value(raw: Any) -> str:
    number = float(raw)
    return str(int(number)) if number.is_integer() else f"{number:g}"


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


def _states(node: Node) -> list[str]:
    enabled = "enabled" in node.states or "sensitive" in node.states
    return ["enabled" if enabled else "disabled", *(s for s in LISTED_STATES if s in node.states)]


def _brief_states(node: Node) -> list[str]:
    """The states a line of text shows: what differs from a usual control (enabled and
    focusable are left out)."""
    return [s for s in _states(node) if s not in ("enabled", "focusable")]


def _line(ref: str, node: Node, bounds: list[int] | None, value: str | None) -> str:
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


def _item(
    ref: str, node: Node, bounds: list[int] | None, value: str | None, depth: int | None
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "ref": ref,
        "role": node.role,
        "name": node.name,
        "states": _states(node),
        "bounds": bounds,
    }
    if value is not None:
        item["value"] = value
    if depth is not None:
        item["depth"] = depth
    return item


def _as_mapping(node: Node, extra: dict[str, str] | None) -> dict[str, object]:
    return {
        "role": node.role,
        "name": node.name,
        "description": node.description,
        "states": node.states,
        "value": (extra or {}).get("value", ""),
        "id": (extra or {}).get("id", ""),
    }


BROWSERS: Final = ("chromium", "chrome", "electron", "brave", "msedge")


def _renderer_missing(app: App, nodes: list[tuple[Node, list[int] | None]]) -> bool:
    """Whether a Chromium-based app shows its window's frame and toolbar but only empty,
    sizeless web documents (its renderer exposes no tree)."""
    if not any(b in i for i in app.ids() for b in BROWSERS):
        return False
    docs = [(n, b) for n, b in nodes if n.role == "document_web"]
    if not docs:
        # A browser's main window without any document: its renderer never joined the bus.
        return len(nodes) <= 3 and bool(nodes) and nodes[0][0].role == "frame"
    return all(n.child_count == 0 and not n.name and (not b or b[2] * b[3] == 0) for n, b in docs)


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


def _satisfied(condition: object, node: Node | None) -> bool:
    if condition == "gone":
        return node is None
    if node is None:
        return False
    if condition == "visible":
        return {"showing", "visible"} <= node.states
    if condition == "enabled":
        return "enabled" in node.states or "sensitive" in node.states
    if condition == "focused":
        return "focused" in node.states
    return True


# -- the loop ----------------------------------------------------------------------------------


def _reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def main() -> None:
    try:
        bus = Bus(CALL_TIMEOUT_MS, max(4 * CALL_TIMEOUT_MS, 1000), skip_s=10.0)
    except CallFailed as err:
        _reply({"ready": False, "reason": str(err)})
        return
    except ImportError as err:
        _reply({"ready": False, "reason": f"no GObject bindings for this Python: {err}"})
        return
    worker = Worker(bus, Policy.from_env())
    calls = {
        "apps": worker.apps,
        "observe": worker.observe,
        "find": worker.find,
        "read": worker.read,
        "act": worker.act,
        "text": worker.text,
        "wait": worker.wait,
    }
    _reply({"ready": True})
    for line in sys.stdin.buffer:
        request_id = None
        if len(line) > MAX_LINE:
            _reply(
                {
                    "id": None,
                    "ok": False,
                    "error": {"code": "invalid_args", "message": "request too large"},
                }
            )
            continue
        try:
            request = json.loads(line)
            request_id = request.get("id")
            handler = calls.get(request.get("call"))
            if handler is None:
                raise A11yError("invalid_args", f"unknown call {str(request.get('call'))[:32]!r}")
            _reply(
                {"id": request_id, "ok": True, "result": handler(dict(request.get("params") or {}))}
            )
        except A11yError as err:
            _reply({"id": request_id, "ok": False, "error": err.body()})
        except CallFailed as err:
            _reply({"id": request_id, "ok": False, "error": failed(err, "accessibility").body()})
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            _reply(
                {
                    "id": request_id,
                    "ok": False,
                    "error": {
                        "code": "action_failed",
                        "message": f"{type(err).__name__}: {err}",
                        "suggestion": SUGGESTIONS["action_failed"],
                    },
                }
            )
        if bus.closed:
            return  # the next call starts a worker on the bus D-Bus starts again


if __name__ == "__main__":
    main()
