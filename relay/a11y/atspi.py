"""AT-SPI over D-Bus: the accessibility bus of one desktop, read in bulk and pipelined.

Used only inside the accessibility worker (``relay/a11y/worker.py``), under the system's Python
whose GObject bindings (``gi``) the distribution builds. Everything goes over D-Bus directly,
never through libatspi's own cache (it goes stale unless its main loop runs): events through
Gio's connection (drained before every call), calls over the worker's own socket
(``relay/a11y/dbusconn.py``; through Gio where the bus's address is not a unix socket):

- one ``org.a11y.atspi.Cache.GetItems`` call per app returns every node the app has exposed
  (role, name, description, states, interfaces, parent, child count) — the apps keep that
  cache only while someone listens for events, so the worker registers a listener first;
- everything else (extents, values, texts, the children an app has not cached yet) is fetched
  *pipelined*: every call is sent, then every reply is read, so 100 extents cost about one
  round trip instead of 100;
- every call has a short timeout; an app that misses it is marked unresponsive for a while and
  skipped, so one stopped app costs one timeout, not one per node;
- the events say what a kept tree (and the details kept with it) lost: ``changed`` apps,
  ``moved`` elements (bounds), ``touched`` ones (text, value).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from relay.a11y.dbusconn import Closed, ConnectFailed, Connection
from relay.a11y.dbuswire import ERROR, Message, WireError, read_body
from wire.errors import RelaydeskError

# AT-SPI's role enumeration (AtspiRole), as tokens: the role's name with spaces as "_".
ROLES: Final[tuple[str, ...]] = tuple(
    name.replace(" ", "_")
    for name in (
        "invalid",
        "accelerator label",
        "alert",
        "animation",
        "arrow",
        "calendar",
        "canvas",
        "check box",
        "check menu item",
        "color chooser",
        "column header",
        "combo box",
        "date editor",
        "desktop icon",
        "desktop frame",
        "dial",
        "dialog",
        "directory pane",
        "drawing area",
        "file chooser",
        "filler",
        "focus traversable",
        "font chooser",
        "frame",
        "glass pane",
        "html container",
        "icon",
        "image",
        "internal frame",
        "label",
        "layered pane",
        "list",
        "list item",
        "menu",
        "menu bar",
        "menu item",
        "option pane",
        "page tab",
        "page tab list",
        "panel",
        "password text",
        "popup menu",
        "progress bar",
        "push button",
        "radio button",
        "radio menu item",
        "root pane",
        "row header",
        "scroll bar",
        "scroll pane",
        "separator",
        "slider",
        "spin button",
        "split pane",
        "status bar",
        "table",
        "table cell",
        "table column header",
        "table row header",
        "tearoff menu item",
        "terminal",
        "text",
        "toggle button",
        "tool bar",
        "tool tip",
        "tree",
        "tree table",
        "unknown",
        "viewport",
        "window",
        "extended",
        "header",
        "footer",
        "paragraph",
        "ruler",
        "application",
        "autocomplete",
        "editbar",
        "embedded",
        "entry",
        "chart",
        "caption",
        "document frame",
        "heading",
        "page",
        "section",
        "redundant object",
        "form",
        "link",
        "input method window",
        "table row",
        "tree item",
        "document spreadsheet",
        "document presentation",
        "document text",
        "document web",
        "document email",
        "comment",
        "list box",
        "grouping",
        "image map",
        "notification",
        "info bar",
        "level bar",
        "title bar",
        "block quote",
        "audio",
        "video",
        "definition",
        "article",
        "landmark",
        "log",
        "marquee",
        "math",
        "rating",
        "timer",
        "static",
        "math fraction",
        "math root",
        "subscript",
        "superscript",
        "description list",
        "description term",
        "description value",
        "footnote",
        "content deletion",
        "content insertion",
        "mark",
        "suggestion",
        "push button menu",
    )
)
# AT-SPI's state enumeration (AtspiStateType), as tokens ("-" written "_").
STATES: Final[tuple[str, ...]] = tuple(
    name.replace("-", "_")
    for name in (
        "invalid",
        "active",
        "armed",
        "busy",
        "checked",
        "collapsed",
        "defunct",
        "editable",
        "enabled",
        "expandable",
        "expanded",
        "focusable",
        "focused",
        "has-tooltip",
        "horizontal",
        "iconified",
        "modal",
        "multi-line",
        "multiselectable",
        "opaque",
        "pressed",
        "resizable",
        "selectable",
        "selected",
        "sensitive",
        "showing",
        "single-line",
        "stale",
        "transient",
        "vertical",
        "visible",
        "manages-descendants",
        "indeterminate",
        "required",
        "truncated",
        "animated",
        "invalid-entry",
        "supports-autocompletion",
        "selectable-text",
        "is-default",
        "visited",
        "checkable",
        "has-popup",
        "read-only",
    )
)

REGISTRY: Final = "org.a11y.atspi.Registry"
ROOT_PATH: Final = "/org/a11y/atspi/accessible/root"
CACHE_PATH: Final = "/org/a11y/atspi/cache"
ACCESSIBLE: Final = "org.a11y.atspi.Accessible"
APPLICATION: Final = "org.a11y.atspi.Application"
COMPONENT: Final = "org.a11y.atspi.Component"
PROPERTIES: Final = "org.freedesktop.DBus.Properties"
IFACE_PREFIX: Final = "org.a11y.atspi."
COORD_SCREEN: Final = 0
# Errors that mean "this object or app is gone" (as opposed to slow or failing).
GONE_ERRORS: Final = frozenset(
    {
        "org.freedesktop.DBus.Error.UnknownObject",
        "org.freedesktop.DBus.Error.UnknownMethod",
        "org.freedesktop.DBus.Error.ServiceUnknown",
        "org.freedesktop.DBus.Error.NameHasNoOwner",
        "org.freedesktop.DBus.Error.UnknownInterface",
        "org.freedesktop.DBus.Error.Disconnected",
    }
)
TIMEOUT_ERRORS: Final = frozenset(
    {
        "org.freedesktop.DBus.Error.NoReply",
        "org.freedesktop.DBus.Error.Timeout",
        "org.freedesktop.DBus.Error.TimedOut",
    }
)
# Events about an element's text, caret or value: a kept tree stays valid, the element's kept
# details (bounds, value, text) do not. Visible-data events are not among them: scrolling
# changes which elements are showing (Chromium scrolls without any event: kept trees expire).
LIVE_EVENTS: Final = frozenset({
    "TextCaretMoved", "TextSelectionChanged", "TextChanged", "TextAttributesChanged",
    "ActiveDescendantChanged",
})  # fmt: skip
LIVE_PROPERTIES: Final = frozenset({"accessible-value"})
# An element moved or was resized: its kept bounds and its descendants' are not valid (GTK's
# spinners and progress bars send this many times a second: it never costs a tree).
BOUNDS_EVENT: Final = "BoundsChanged"
# Elements an app's events named, remembered per app up to this many (then: all of them).
MAX_NOTED: Final = 1000
EVERYTHING: Final = "*"
# The one call that tells whether an app marked unresponsive answers again.
PROBE_TIMEOUT_MS: Final = 100
# Calls sent before their replies are read, at most (the bus limits pending replies).
PIPELINE_DEPTH: Final = 256
# What a node not in its app's cache is described by (its ``Accessible`` properties).
DESCRIBED: Final = ("Name", "Description", "ChildCount")
# Toolkits (their ``ToolkitName``, lower case) whose bridge must not be sent
# ``Properties.GetAll``: Qt's reads a second argument that GetAll does not carry, and the app
# crashes (Qt 5.15) or answers an error. Their nodes are described one property at a time.
NO_GET_ALL: Final = frozenset({"qt"})
# Apps whose toolkit is remembered, at most (then they are asked again).
MAX_TOOLKITS: Final = 256

Key = tuple[str, str]  # (bus name, object path)


def role_token(number: int) -> str:
    return ROLES[number] if 0 <= number < len(ROLES) else "unknown"


def state_tokens(words: Sequence[int]) -> frozenset[str]:
    """AT-SPI's two 32-bit state words as state tokens."""
    bits = (words[0] if words else 0) | ((words[1] if len(words) > 1 else 0) << 32)
    return frozenset(name for i, name in enumerate(STATES) if bits >> i & 1)


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


class Bus:
    """The desktop's accessibility bus (raises ``CallFailed`` when it cannot be reached)."""

    def __init__(self, call_timeout_ms: int, bulk_timeout_ms: int, skip_s: float) -> None:
        from gi.repository import Gio, GLib  # the distribution's bindings; see module doc

        self._gio: Any = Gio
        self._glib: Any = GLib
        self.call_timeout_ms = call_timeout_ms
        self.bulk_timeout_ms = bulk_timeout_ms
        self.skip_s = skip_s
        self.unresponsive: dict[str, float] = {}  # bus name → until (monotonic)
        self.events = 0
        # Apps (bus names) that sent an event since their tree was last read.
        self.changed: set[str] = set()
        # Per app, the elements that moved (bounds events) and whose text or value changed
        # (live events) since the worker last looked (``EVERYTHING``: too many to list).
        self.moved: dict[str, set[str]] = {}
        self.touched: dict[str, set[str]] = {}
        self.toolkits: dict[str, str] = {}  # bus name → its toolkit's name, lower case
        try:
            session = Gio.bus_get_sync(Gio.BusType.SESSION, None)
        except GLib.Error as err:
            raise CallFailed("failed", f"no session bus: {err.message}") from None
        self._session = session
        # Apps that read it (Chromium, Qt, GTK 4) expose their trees only when it is set.
        try:
            enable = GLib.Variant(
                "(ssv)", ("org.a11y.Status", "IsEnabled", GLib.Variant("b", True))
            )
            session.call_sync(
                "org.a11y.Bus", "/org/a11y/bus", PROPERTIES, "Set", enable, None, 0, 5000, None
            )
            address = session.call_sync(
                "org.a11y.Bus",
                "/org/a11y/bus",
                "org.a11y.Bus",
                "GetAddress",
                None,
                GLib.VariantType("(s)"),
                0,
                5000,
                None,
            ).unpack()[0]
            flags = (
                Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT
                | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION
            )
            self._conn = Gio.DBusConnection.new_for_address_sync(address, flags, None, None)
        except GLib.Error as err:
            raise CallFailed("failed", f"no accessibility bus: {err.message}") from None
        # Calls go over the worker's own socket (relay/a11y/dbusconn.py) where the address
        # allows it, else through GLib like the events.
        try:
            self._socket: Connection | None = Connection(address)
        except ConnectFailed:
            self._socket = None
        self._conn.signal_subscribe(
            None, None, None, None, None, Gio.DBusSignalFlags.NONE, self._on_signal
        )
        self._listen()

    def _on_signal(
        self, _conn: Any, sender: str | None, path: str, _iface: str, name: str, params: Any
    ) -> None:
        self.events += 1
        if not sender or sender in self.changed:
            return  # its tree is read again: nothing of it is kept
        if name == BOUNDS_EVENT:
            _note(self.moved, sender, path)
            return
        if name in LIVE_EVENTS:
            _note(self.touched, sender, path)
            return
        if name == "PropertyChange" and params.n_children():
            detail = params.get_child_value(0)
            if detail.get_type_string() == "s" and detail.get_string() in LIVE_PROPERTIES:
                _note(self.touched, sender, path)
                return
        self.changed.add(sender)

    def forget(self, bus: str) -> None:
        """Start over on an app whose tree is read again (or dropped)."""
        self.changed.discard(bus)
        self.moved.pop(bus, None)
        self.touched.pop(bus, None)

    def drain(self) -> None:
        """Take in the events that arrived since the last call (without waiting)."""
        context = self._glib.MainContext.default()
        while context.pending():
            context.iteration(False)

    def _listen(self) -> None:
        """Register an event listener: apps keep their caches (``GetItems``) and emit events
        only while one is registered."""
        for signature, values in (("(sass)", ("object:", [], "")), ("(s)", ("object:",))):
            call = Call(REGISTRY, "/org/a11y/atspi/registry", REGISTRY, "RegisterEvent",
                        signature, values)  # fmt: skip
            try:  # from the connection that receives the events
                self._conn.call_sync(*self._arguments(call, 2000))
                return
            except self._glib.Error:
                continue

    # -- calls ---------------------------------------------------------------------------------

    def _variant(self, call: Call) -> Any:
        return None if call.signature is None else self._glib.Variant(call.signature, call.values)

    @property
    def closed(self) -> bool:
        """Whether the accessibility bus went away (its launcher or daemon exited)."""
        return bool(self._conn.is_closed()) or (self._socket is not None and self._socket.closed)

    def _classify(self, err: Any, bus: str) -> CallFailed:
        if self._conn.is_closed():
            return CallFailed("closed", "the desktop's accessibility bus went away")
        name = self._gio.DBusError.get_remote_error(err) or ""
        timed_out = name in TIMEOUT_ERRORS or err.matches(
            self._gio.io_error_quark(), self._gio.IOErrorEnum.TIMED_OUT
        )
        if timed_out:
            self.unresponsive[bus] = time.monotonic() + self.skip_s
            return CallFailed("timeout", "the app did not answer in time")
        if name in GONE_ERRORS:
            return CallFailed("gone", "the object or its app is gone")
        return CallFailed("failed", str(self._gio.DBusError.strip_remote_error(err) or err))

    def check_responsive(self, bus: str) -> None:
        """Raise ``timeout`` for an app marked unresponsive that still does not answer one
        short probe (an app that recovered is used again at once)."""
        until = self.unresponsive.get(bus)
        if until is None:
            return
        if time.monotonic() < until:
            probe = Call(bus, ROOT_PATH, PROPERTIES, "Get", "(ss)", (ACCESSIBLE, "ChildCount"))
            if isinstance(self._send([probe], PROBE_TIMEOUT_MS)[0], CallFailed):
                self.unresponsive[bus] = time.monotonic() + self.skip_s
                raise CallFailed("timeout", "the app did not answer a moment ago")
        self.unresponsive.pop(bus, None)

    def _arguments(self, call: Call, timeout_ms: int | None) -> tuple[Any, ...]:
        """Gio's arguments of a method call: target, method, parameters, no reply type, no
        flags, the timeout, no cancellable."""
        timeout = timeout_ms or self.call_timeout_ms
        parameters = self._variant(call)
        return (call.bus, call.path, call.interface, call.method, parameters, None, 0, timeout,
                None)  # fmt: skip

    def call(self, call: Call, timeout_ms: int | None = None) -> tuple[Any, ...]:
        """One call, waited for."""
        reply = self.many([call], timeout_ms)[0]
        if isinstance(reply, CallFailed):
            raise reply
        return tuple(reply)

    def many(self, calls: Sequence[Call], timeout_ms: int | None = None) -> list[Any]:
        """Calls pipelined: every reply (a tuple) or ``CallFailed``, in order. An app marked
        unresponsive gets one probe per batch; when it misses that, its calls are not sent."""
        results: list[Any] = [None] * len(calls)
        skipped: dict[str, CallFailed | None] = {}
        todo: list[int] = []
        for index, call in enumerate(calls):
            if call.bus != REGISTRY and (call.bus in self.unresponsive or call.bus in skipped):
                if call.bus not in skipped:
                    try:
                        self.check_responsive(call.bus)
                        skipped[call.bus] = None
                    except CallFailed as err:
                        skipped[call.bus] = err
                if (failure := skipped[call.bus]) is not None:
                    results[index] = failure
                    continue
            todo.append(index)
        replies = self._send([calls[i] for i in todo], timeout_ms or self.call_timeout_ms)
        for index, reply in zip(todo, replies, strict=True):
            results[index] = reply
        return results

    def _send(self, calls: Sequence[Call], timeout_ms: int) -> list[Any]:
        if not calls:
            return []
        if self._socket is None:
            return self._send_gio(calls, timeout_ms)
        requests = [(c.bus, c.path, c.interface, c.method, _inner(c.signature), c.values)
                    for c in calls]  # fmt: skip
        try:
            replies = self._socket.exchange(requests, timeout_ms / 1000, PIPELINE_DEPTH)
        except Closed:
            return [CallFailed("closed", "the desktop's accessibility bus went away")] * len(calls)
        return [self._reply(m, c.bus) for m, c in zip(replies, calls, strict=True)]

    def _reply(self, message: Message | None, bus: str) -> tuple[Any, ...] | CallFailed:
        """A reply read from the socket, or what its absence means."""
        if message is None:
            self.unresponsive[bus] = time.monotonic() + self.skip_s
            return CallFailed("timeout", "the app did not answer in time")
        if message.kind != ERROR:
            return message.values
        name = message.error_name or ""
        if name in TIMEOUT_ERRORS:
            self.unresponsive[bus] = time.monotonic() + self.skip_s
            return CallFailed("timeout", "the app did not answer in time")
        if name in GONE_ERRORS:
            return CallFailed("gone", "the object or its app is gone")
        detail = message.values[0] if message.values and isinstance(message.values[0], str) else ""
        return CallFailed("failed", f"{name}: {detail}" if detail else name)

    def _send_gio(self, calls: Sequence[Call], timeout_ms: int) -> list[Any]:
        """Calls pipelined through GLib (where the bus's address is not a unix socket)."""
        results: list[Any] = [None] * len(calls)
        pending = 0
        context = self._glib.MainContext.default()

        def done(conn: Any, result: Any, index: int) -> None:
            nonlocal pending
            pending -= 1
            try:
                reply = conn.call_finish(result)
                results[index] = tuple(reply.unpack()) if reply is not None else ()
            except self._glib.Error as err:
                results[index] = self._classify(err, calls[index].bus)

        for index, call in enumerate(calls):
            while pending >= PIPELINE_DEPTH:
                context.iteration(True)
            pending += 1
            self._conn.call(*self._arguments(call, timeout_ms), done, index)
        while pending:
            context.iteration(True)
        return results

    def wait_event(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for any accessibility event; True when one came."""
        before = self.events
        fired = [False]

        def wake() -> bool:
            fired[0] = True
            return False

        source = self._glib.timeout_add(max(1, int(seconds * 1000)), wake)
        context = self._glib.MainContext.default()
        while not fired[0] and self.events == before:
            context.iteration(True)
        if not fired[0]:
            self._glib.source_remove(source)
        return self.events != before

    # -- reads ---------------------------------------------------------------------------------

    def apps(self) -> list[Key]:
        reply = self.call(Call(REGISTRY, ROOT_PATH, ACCESSIBLE, "GetChildren"), 2000)
        return [(str(bus), str(path)) for bus, path in reply[0]]

    def registry_owner(self) -> str | None:
        """The registry's unique bus name (its events say that apps came or went)."""
        try:
            bus = "org.freedesktop.DBus"
            reply = self.call(Call(bus, "/org/freedesktop/DBus", bus, "GetNameOwner", "(s)",
                                   (REGISTRY,)))  # fmt: skip
        except CallFailed:
            return None
        return str(reply[0])

    def prop(self, key: Key, interface: str, name: str) -> Call:
        return Call(key[0], key[1], PROPERTIES, "Get", "(ss)", (interface, name))

    def pid_call(self, bus: str) -> Call:
        return Call(
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "GetConnectionUnixProcessID",
            "(s)",
            (bus,),
        )

    def call_raw(self, call: Call, timeout_ms: int) -> tuple[Any, ...]:
        """One call whose reply is read from its wire bytes (``relay/a11y/dbuswire.py``):
        for large replies, where unpacking through GLib costs more than the call."""
        self.check_responsive(call.bus)
        if self._socket is not None:
            reply = self._send([call], timeout_ms)[0]
            if isinstance(reply, CallFailed):
                raise reply
            return tuple(reply)
        gio = self._gio
        message = gio.DBusMessage.new_method_call(call.bus, call.path, call.interface,
                                                  call.method)  # fmt: skip
        try:
            reply, _ = self._conn.send_message_with_reply_sync(
                message, gio.DBusSendMessageFlags.NONE, timeout_ms, None
            )
            if reply.get_message_type() == gio.DBusMessageType.ERROR:
                reply.to_gerror()
            blob = bytes(reply.to_blob(gio.DBusCapabilityFlags.NONE))
        except self._glib.Error as err:
            raise self._classify(err, call.bus) from None
        try:
            return read_body(blob)[1]
        except WireError as err:
            raise CallFailed("failed", f"unreadable reply: {err}") from None

    def tree(self, app: Key) -> Tree:
        """Every node the app has cached, in one call."""
        reply = self.call_raw(
            Call(app[0], CACHE_PATH, "org.a11y.atspi.Cache", "GetItems"), self.bulk_timeout_ms
        )
        nodes: dict[Key, Node] = {}
        for item in reply[0]:
            node = _cache_node(item)
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
            if n.parent == root
            or (n.parent is not None and n.parent[1] == ROOT_PATH and n.key != root)
        ]
        if not nodes[root].children:
            nodes[root].children = sorted(top, key=lambda k: nodes[k].index)
        tree = Tree(app[0], nodes, root)
        if not nodes[root].children:
            # An app that caches nothing (Qt's cache is always empty): its windows are
            # listed the way a walk lists what an app has not cached.
            self.fill(tree, [nodes[root]])
        return tree

    def carry(self, old: Tree, new: Tree) -> None:
        """Bring into ``new`` (the app's cache read again, its kept tree having only aged) the
        nodes ``old`` had listed beyond the cache, with their states read again: one call a
        node instead of five. An app announces changes of structure and names, but not every
        change of what is showing (Chromium scrolls without any event): states are what a
        kept tree's age bounds."""
        listed = [node for key, node in old.nodes.items() if key not in new.nodes]
        replies = self.many([Call(n.bus, n.path, ACCESSIBLE, "GetState") for n in listed])
        for node, reply in zip(listed, replies, strict=True):
            if not isinstance(reply, CallFailed):
                new.nodes[node.key] = replace(node, states=state_tokens(reply[0]),
                                              children=list(node.children))  # fmt: skip

    def fill(self, tree: Tree, parents: Iterable[Node]) -> None:
        """List, pipelined, the children the app had not cached of ``parents``."""
        wanted = [p for p in parents if not p.complete]
        if not wanted:
            return
        replies = self.many([Call(p.bus, p.path, ACCESSIBLE, "GetChildren") for p in wanted])
        fresh: list[tuple[Node, Key, int]] = []
        for parent, reply in zip(wanted, replies, strict=True):
            parent.complete = True
            if isinstance(reply, CallFailed):
                continue
            keys = [(str(b), str(p)) for b, p in reply[0]]
            parent.children = keys
            fresh.extend((parent, k, i) for i, k in enumerate(keys) if k not in tree.nodes)
        if not fresh:
            return
        bulk = self.answers_get_all({key[0] for _, key, _ in fresh})
        calls: list[Call] = []
        spans: list[int] = []
        for _, key, _ in fresh:
            asked = self._describe(key, key[0] in bulk)
            calls.extend(
                (
                    Call(key[0], key[1], ACCESSIBLE, "GetRole"),
                    Call(key[0], key[1], ACCESSIBLE, "GetState"),
                    Call(key[0], key[1], ACCESSIBLE, "GetInterfaces"),
                    *asked,
                )
            )
            spans.append(3 + len(asked))
        replies = self.many(calls)
        parts: list[list[Any]] = []
        at = 0
        for span in spans:
            parts.append(replies[at : at + span])
            at += span
        props = self._properties([key for _, key, _ in fresh], [p[3:] for p in parts])
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
                _short(interfaces),
                name,
                role_token(int(role)),
                description,
                state_tokens(states),
                complete=count == 0,
            )

    def toolkit_names(self, buses: Iterable[str]) -> dict[str, str]:
        """Each app's toolkit (its ``ToolkitName``, lower case; "" when it cannot say), kept;
        those not known yet asked for in one pipelined batch (an app that did not answer in
        time is asked again next time)."""
        wanted = set(buses)
        unknown = sorted(b for b in wanted if b not in self.toolkits)
        if unknown:
            if len(self.toolkits) + len(unknown) > MAX_TOOLKITS:
                self.toolkits.clear()
            asked = [self.prop((bus, ROOT_PATH), APPLICATION, "ToolkitName") for bus in unknown]
            for bus, reply in zip(unknown, self.many(asked), strict=True):
                if not (isinstance(reply, CallFailed) and reply.kind == "timeout"):
                    self.toolkits[bus] = str(unwrap(reply, "")).lower()
        return {bus: self.toolkits.get(bus, "") for bus in wanted}

    def answers_get_all(self, buses: Iterable[str]) -> set[str]:
        """Those of ``buses`` (apps) whose nodes may be described by one ``GetAll`` each: the
        apps whose toolkit said its name and is not in ``NO_GET_ALL`` (the others are
        described one property at a time)."""
        kits = self.toolkit_names(buses)
        return {bus for bus, kit in kits.items() if kit and kit not in NO_GET_ALL}

    def _describe(self, key: Key, bulk: bool) -> list[Call]:
        """The calls that describe a node: its properties in one ``GetAll`` (``bulk``), else
        one ``Get`` each."""
        if bulk:
            return [Call(key[0], key[1], PROPERTIES, "GetAll", "(s)", (ACCESSIBLE,))]
        return [self.prop(key, ACCESSIBLE, p) for p in DESCRIBED]

    def _properties(
        self, keys: Sequence[Key], answers: Sequence[Sequence[Any]]
    ) -> list[tuple[str, str, int] | None]:
        """Name, description and child count of each object from the replies to its
        ``_describe`` calls; read one by one (pipelined) where an app did not answer
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
            out[i] = (str(values.get("Name", "")), str(values.get("Description", "")),
                      int(values.get("ChildCount", 0)))  # fmt: skip
        again = self.many([c for i in retry for c in self._describe(keys[i], bulk=False)])
        for n, i in enumerate(retry):
            part = again[n * 3 : n * 3 + 3]
            if first_failure(part) is None:
                name, description, count = (r[0] for r in part)
                out[i] = (str(name), str(description), int(count))
        return out


def _note(table: dict[str, set[str]], bus: str, path: str) -> None:
    noted = table.setdefault(bus, set())
    if len(noted) >= MAX_NOTED:
        noted.clear()
        path = EVERYTHING
    noted.add(path)


def _inner(signature: str | None) -> str:
    """A call's arguments' signature without GLib's enclosing tuple: ``(ss)`` → ``ss``."""
    return signature[1:-1] if signature else ""


def _short(interfaces: Iterable[str]) -> frozenset[str]:
    return frozenset(i.removeprefix(IFACE_PREFIX) for i in interfaces)


def _cache_node(item: Sequence[Any]) -> Node | None:
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
        _short(ifaces),
        str(name),
        role_token(int(role)),
        str(desc),
        state_tokens(states),
    )


def first_failure(replies: Iterable[Any]) -> CallFailed | None:
    return next((r for r in replies if isinstance(r, CallFailed)), None)


def unwrap(reply: Any, default: Any = None, convert: Callable[[Any], Any] | None = None) -> Any:
    """A reply's first value (``default`` for a failed call)."""
    if isinstance(reply, CallFailed) or not reply:
        return default
    value = reply[0]
    return convert(value) if convert is not None else value
