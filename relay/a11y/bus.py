"""The accessibility bus of one desktop: its events, and calls made on it pipelined.

Used only inside the accessibility worker (``relay/a11y/worker.py``), under the system's Python
whose GObject bindings (``gi``) the distribution builds. Everything goes over D-Bus directly,
never through libatspi's own cache (it goes stale unless its main loop runs): events through
Gio's connection (drained before every call), calls over the worker's own socket
(``relay/a11y/dbusconn.py``; through Gio where the bus's address is not a unix socket):

- calls are *pipelined*: every call is sent, then every reply is read, so 100 extents cost
  about one round trip instead of 100;
- every call has a short timeout; an app that misses it is marked unresponsive for a while and
  skipped, so one stopped app costs one timeout, not one per node;
- the events say what a kept tree (and the details kept with it) lost: ``changed`` apps,
  ``moved`` elements (bounds), ``touched`` ones (text, value).

What is read with these calls, an app's tree above all, is in ``relay/a11y/reads.py``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Final

from relay.a11y.dbusconn import Closed, ConnectFailed, Connection
from relay.a11y.dbuswire import ERROR, Message, WireError, read_body
from relay.a11y.nodes import (
    ACCESSIBLE,
    APPLICATION,
    EVERYTHING,
    PROPERTIES,
    REGISTRY,
    ROOT_PATH,
    Call,
    CallFailed,
    Key,
    unwrap,
)

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
LIVE_EVENTS: Final = frozenset(
    {
        "TextCaretMoved",
        "TextSelectionChanged",
        "TextChanged",
        "TextAttributesChanged",
        "ActiveDescendantChanged",
    }
)
LIVE_PROPERTIES: Final = frozenset({"accessible-value"})
# An element moved or was resized: its kept bounds and its descendants' are not valid (GTK's
# spinners and progress bars send this many times a second: it never costs a tree).
BOUNDS_EVENT: Final = "BoundsChanged"
# Elements an app's events named, remembered per app up to this many (then: all of them).
MAX_NOTED: Final = 1000
# The one call that tells whether an app marked unresponsive answers again.
PROBE_TIMEOUT_MS: Final = 100
# Calls sent before their replies are read, at most (the bus limits pending replies).
PIPELINE_DEPTH: Final = 256
# Apps whose toolkit is remembered, at most (then they are asked again).
MAX_TOOLKITS: Final = 256


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
        # Events per app (bus name) since the worker started: an act's effect is an event of
        # its app after it (``relay/a11y/actions.py``).
        self.sent: Counter[str] = Counter()
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
        if sender:
            self.sent[sender] += 1
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
            call = Call(
                REGISTRY, "/org/a11y/atspi/registry", REGISTRY, "RegisterEvent", signature, values
            )
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
        return (
            call.bus,
            call.path,
            call.interface,
            call.method,
            parameters,
            None,
            0,
            timeout,
            None,
        )

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
        requests = [
            (c.bus, c.path, c.interface, c.method, _inner(c.signature), c.values) for c in calls
        ]
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
            reply = self.call(
                Call(bus, "/org/freedesktop/DBus", bus, "GetNameOwner", "(s)", (REGISTRY,))
            )
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
        message = gio.DBusMessage.new_method_call(call.bus, call.path, call.interface, call.method)
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


def _note(table: dict[str, set[str]], bus: str, path: str) -> None:
    noted = table.setdefault(bus, set())
    if len(noted) >= MAX_NOTED:
        noted.clear()
        path = EVERYTHING
    noted.add(path)


def _inner(signature: str | None) -> str:
    """A call's arguments' signature without GLib's enclosing tuple: ``(ss)`` → ``ss``."""
    return signature[1:-1] if signature else ""
