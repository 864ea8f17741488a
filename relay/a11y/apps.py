"""The apps on a desktop's accessibility bus, their windows, and which of them agents may use.

An app is known by its bus name, and named by what it says (its name) and by its command
(``/proc/<pid>/comm``), as ``relay/policy.py`` names every app agents may be denied; the
relay's policy (``RELAYDESK_A11Y_POLICY``) allows, denies or makes read-only apps by those
names.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Final

from relay.a11y.bus import Bus
from relay.a11y.nodes import ACCESSIBLE, Key, unwrap
from relay.a11y.protocol import A11yError
from relay.a11y.refs import Element
from relay.policy import DENIED_MESSAGE, DeniedApps, app_ids, command_of

# A listing of the apps is reused this long unless the registry announces a change.
APPS_MAX_AGE_S: Final = 2.0


@dataclass(frozen=True)
class Policy:
    """Which apps agents may observe and act on (relay settings, docs/accessibility.md)."""

    allow: frozenset[str] | None = None
    deny: DeniedApps = field(default_factory=DeniedApps)
    read_only: frozenset[str] = frozenset()

    @classmethod
    def from_env(cls) -> Policy:
        raw = json.loads(os.environ.get("RELAYDESK_A11Y_POLICY") or "{}")

        def names(key: str) -> frozenset[str]:
            return frozenset(str(n).lower() for n in raw.get(key) or ())

        allow = names("allow") if raw.get("allow") else None
        return cls(allow, DeniedApps(names("deny")), names("read_only"))

    def refusal(self, app: App, acting: bool) -> str | None:
        """Why agents may not observe (or, ``acting``, act on) ``app``; None: they may."""
        ids = app.ids()
        if self.deny.denies(ids):
            return DENIED_MESSAGE
        if self.allow is not None and not ids & self.allow:
            return "not in this relay's list of allowed apps"
        if acting and ids & self.read_only:
            return "read-only under this relay's accessibility policy"
        return None


@dataclass
class App:
    """An app on the bus: its bus name, the name it says, its process."""

    bus: str
    name: str
    pid: int | None
    command: str | None

    def ids(self) -> frozenset[str]:
        """The names the policy and ``find`` know the app by, lower case."""
        return app_ids((self.name,), self.command)


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


class Apps:
    """The apps on the bus, as last listed."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.names: dict[str, str] = {}  # bus name → the app's name, as it last said it
        self._known: dict[str, App] = {}  # bus name → app, as last listed
        self._listed_at = -APPS_MAX_AGE_S
        self._registry: str | None = None

    def running(self) -> list[App]:
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
        apps = self._list()
        self._listed_at = time.monotonic()
        return apps

    def _list(self) -> list[App]:
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
            apps.append(App(key[0], name, pid, command_of(pid)))
        self._known = {app.bus: app for app in apps}
        return apps

    def of_element(self, element: Element) -> App:
        """The app of an element: from the last listing when its bus is still connected
        (one call fewer before every action), else from a new listing."""
        app = self._known.get(element.key[0])
        if app is not None and app.pid is not None and _alive(app.pid):
            return app
        return app_of(element, self.running())

    def find(self, wanted: object, apps: list[App] | None = None) -> App:
        """The app named ``wanted`` (its name, command, bus name or pid)."""
        apps = self.running() if apps is None else apps
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


def app_of(element: Element, apps: list[App]) -> App:
    """The app of an element among ``apps``: by its bus name, else by the name it had."""
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


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")
