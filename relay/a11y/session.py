"""What one worker holds of its desktop between calls, and what a call is about.

The worker keeps the bus, the relay's policy, the apps as last listed, the apps' trees and the
snapshots it handed out. Every call that looks at windows starts from its scope: the window it
names (by title or by ref), the app it names, else the focused window (``find`` and ``wait``:
else every app the policy allows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from relay.a11y.apps import App, Apps, Policy, Window, app_of
from relay.a11y.bus import Bus
from relay.a11y.nodes import (
    ACCESSIBLE,
    COMPONENT,
    COORD_SCREEN,
    ROOT_PATH,
    Call,
    CallFailed,
    Key,
    Node,
    Tree,
    as_bounds,
    unwrap,
)
from relay.a11y.protocol import A11yError
from relay.a11y.refs import SNAPSHOT_TTL_S, SNAPSHOTS_KEPT, Snapshots, live_node
from relay.a11y.roles import role_token, state_tokens
from relay.a11y.trees import Trees

# What a call looks at: an app, its tree, and the node it starts from (a window, or the root).
Scoped = tuple[App, Tree, Node]


class Session:
    """One worker's bus, policy, apps, kept trees and snapshots."""

    def __init__(self, bus: Bus, policy: Policy) -> None:
        self.bus = bus
        self.policy = policy
        self.snapshots = Snapshots(SNAPSHOT_TTL_S, SNAPSHOTS_KEPT)
        self.apps = Apps(bus)
        self.trees = Trees(bus)

    def windows(self, apps: Sequence[App], bounds: bool = True) -> dict[str, list[Window]]:
        """Each app's top-level windows (role, name, states and, with ``bounds``, bounds):
        from its kept tree while that is valid and bounds are not wanted, else read for all
        the apps at once in two pipelined batches. Apps that do not answer have none."""
        out: dict[str, list[Window]] = {}
        live: list[App] = []
        for app in apps:
            kept = None if bounds else self.trees.kept(app)
            if kept is not None:
                out[app.bus] = [
                    Window(n.key, n.role, n.name, n.states, None)
                    for n in kept.children(kept.nodes[kept.root])
                ]
            elif not self.skipped(app):
                live.append(app)
        roots = self.bus.many([Call(a.bus, ROOT_PATH, ACCESSIBLE, "GetChildren") for a in live])
        keys = {
            a.bus: [(str(b), str(p)) for b, p in unwrap(r, [])]
            for a, r in zip(live, roots, strict=True)
        }
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
                out[app.bus].append(
                    Window(
                        key,
                        role_token(unwrap(role, 0, int)),
                        unwrap(name, "", str),
                        state_tokens(unwrap(states, [])),
                        as_bounds(extents),
                    )
                )
        return out

    def skipped(self, app: App) -> bool:
        """Whether the app is marked unresponsive and still does not answer."""
        try:
            self.bus.check_responsive(app.bus)
        except CallFailed:
            return True
        return False

    def scope(self, params: dict[str, Any], acting: bool = False) -> list[Scoped]:
        """The (app, tree, root) triples a call looks at: the named window, the named app,
        else the focused window (else every allowed app for ``find``/``wait``)."""
        window, app_name = params.get("window"), params.get("app")
        apps = self.apps.running()
        if isinstance(window, str) and window.startswith("@"):
            return [self._window_by_ref(window, apps)]
        allowed = self._allowed(app_name, apps, acting)
        pairs = self._scoped(allowed, window, app_name, everything=bool(params.get("_all")))
        if not pairs and window is not None:
            raise A11yError("app_not_found", f"no window named {str(window)[:64]!r}")
        if not pairs and window is None and app_name is None and not params.get("_all"):
            raise A11yError(
                "app_not_found",
                "no window has the focus; name an app or a window",
                suggestion="call desktop_apps, then pass app or window",
            )
        return pairs

    def _window_by_ref(self, window: str, apps: list[App]) -> Scoped:
        """A window named by a ref (from ``apps`` or ``observe``), found in its live tree."""
        element = self.snapshots.element(window, "window")
        app = app_of(element, apps)
        tree = self.trees.tree(app)
        node = live_node(self.bus, tree, element)
        return (app, tree, node)

    def _allowed(self, app_name: object, apps: list[App], acting: bool) -> list[App]:
        """The named app, else every app; those the policy refuses are left out (a named one
        is refused), and unresponsive ones when no app is named."""
        candidates = [self.apps.find(app_name, apps)] if app_name is not None else apps
        allowed: list[App] = []
        for app in candidates:
            if (why := self.policy.refusal(app, acting)) is not None:
                if app_name is not None:
                    raise A11yError("policy_denied", f"{app.name!r}: {why}")
                continue
            if app_name is None and self.skipped(app):
                continue
            allowed.append(app)
        return allowed

    def _scoped(
        self, allowed: list[App], window: object, app_name: object, everything: bool
    ) -> list[Scoped]:
        """The windows of ``allowed`` that a call means, with their apps' trees: the one named
        ``window`` or the focused one; the root of a named app; with ``everything`` (and
        nothing named), every window."""
        whole_app = app_name is not None and window is None
        everything = window is None and app_name is None and everything
        windows: dict[str, list[Window]] = {}
        if not (whole_app or everything):
            # Which window is meant is read cheaply (names and states of the top-level
            # windows, of all apps at once): only the app that has it is read whole.
            windows = self.windows(allowed, bounds=False)
        pairs: list[Scoped] = []
        for app in allowed:
            wanted: set[Key] = set()
            if not (whole_app or everything):
                wanted = {
                    w.key
                    for w in windows.get(app.bus, [])
                    if (w.name == window if window is not None else w.focused)
                }
                if not wanted:
                    continue
            try:
                tree = self.trees.tree(app)
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
        return pairs
