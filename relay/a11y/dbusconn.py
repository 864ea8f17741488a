"""The accessibility worker's own connection to the accessibility bus: method calls written
and read in bulk over a plain socket (``relay/a11y/dbuswire.py`` has the bytes).

Through GLib every call cost the worker ~0.2-0.5 ms of its own time (a variant built, the
message handed to GDBus's thread, a callback per reply): on a loaded two-core machine that was
most of an observe. Here a batch is one ``sendall`` and its replies are read as they arrive,
each call with its own deadline, so a stopped app costs its calls one timeout while every other
reply is taken in. GLib's connection stays for what it is good at: events (the worker's main
loop) and the session bus.

Only ``unix:path=`` and ``unix:abstract=`` addresses and the ``EXTERNAL`` authentication are
spoken (what at-spi's bus launcher offers); anything else raises ``ConnectFailed`` and the
worker keeps calling through GLib.
"""

from __future__ import annotations

import os
import select
import socket
import time
from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import unquote

from relay.a11y.dbuswire import (
    ERROR,
    METHOD_RETURN,
    Message,
    WireError,
    message_length,
    method_call,
    read_message,
)
from wire.errors import RelaydeskError

DBUS: Final = "org.freedesktop.DBus"
UNREADABLE: Final = "org.relaydesk.Error.UnreadableReply"
AUTH_TIMEOUT_S: Final = 5.0
RECV_SIZE: Final = 1 << 18

# One call: destination, path, interface, member, signature (no outer parentheses), values.
Request = tuple[str, str, str, str, str, Sequence[Any]]


class ConnectFailed(RelaydeskError):
    """The address is not one this connection speaks, or the bus refused it."""


class Closed(RelaydeskError):
    """The bus closed the connection (it went away)."""


def socket_address(address: str) -> str | bytes:
    """The first ``unix:path=`` or ``unix:abstract=`` socket of a D-Bus address."""
    for entry in address.split(";"):
        transport, _, rest = entry.partition(":")
        if transport != "unix":
            continue
        keys = dict(part.partition("=")[::2] for part in rest.split(",") if "=" in part)
        if "path" in keys:  # values are %-escaped like URLs
            return unquote(keys["path"])
        if "abstract" in keys:
            return b"\0" + unquote(keys["abstract"]).encode()
    raise ConnectFailed(f"no unix socket in the bus address {address[:200]!r}")


class Connection:
    """A blocking connection to one bus: ``exchange`` sends calls and collects their replies."""

    def __init__(self, address: str) -> None:
        target = socket_address(address)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(AUTH_TIMEOUT_S)
        self._buffer = bytearray()
        self._chunk = bytearray(RECV_SIZE)
        self._serial = 0
        self.closed = False
        try:
            self._sock.connect(target)
            self._authenticate()
            (self.unique_name,) = self._hello()
        except (OSError, WireError, Closed) as err:
            self._sock.close()
            raise ConnectFailed(f"cannot connect to the accessibility bus: {err}") from None

    def _authenticate(self) -> None:
        uid = str(os.getuid()).encode().hex().encode()
        self._sock.sendall(b"\0AUTH EXTERNAL " + uid + b"\r\n")
        line = self._line()
        if not line.startswith(b"OK "):
            raise ConnectFailed(f"the bus refused us: {line[:100]!r}")
        self._sock.sendall(b"BEGIN\r\n")

    def _line(self) -> bytes:
        while b"\r\n" not in self._buffer:
            data = self._sock.recv(4096)
            if not data:
                raise Closed("the bus closed the connection while authenticating")
            self._buffer += data
        line, _, rest = bytes(self._buffer).partition(b"\r\n")
        self._buffer = bytearray(rest)
        return line

    def _hello(self) -> tuple[Any, ...]:
        (reply,) = self.exchange(
            [(DBUS, "/org/freedesktop/DBus", DBUS, "Hello", "", ())], AUTH_TIMEOUT_S
        )
        if reply is None or reply.kind != METHOD_RETURN:
            raise ConnectFailed("the bus did not answer Hello")
        return reply.values

    def close(self) -> None:
        self.closed = True
        self._sock.close()

    def exchange(
        self, requests: Sequence[Request], timeout_s: float, depth: int = 256
    ) -> list[Message | None]:
        """Every request's reply (a method return or an error) in order, None where it did not
        come within ``timeout_s`` of being sent; at most ``depth`` wait at a time. Raises
        ``Closed`` when the bus goes away."""
        if self.closed:
            raise Closed("the accessibility bus went away")
        results: list[Message | None] = [None] * len(requests)
        waiting: dict[int, tuple[int, float]] = {}  # serial → (index, deadline)
        sent = 0
        try:
            while sent < len(requests) or waiting:
                if sent < len(requests) and len(waiting) < depth:
                    sent = self._send(requests, sent, depth - len(waiting), timeout_s, waiting)
                self._receive(waiting, results)
        except (OSError, WireError, Closed) as err:
            self.close()
            raise Closed(f"the accessibility bus connection failed: {err}") from None
        return results

    def _send(
        self,
        requests: Sequence[Request],
        start: int,
        room: int,
        timeout_s: float,
        waiting: dict[int, tuple[int, float]],
    ) -> int:
        end = min(len(requests), start + room)
        chunk = []
        deadline = time.monotonic() + timeout_s
        for index in range(start, end):
            self._serial = self._serial % 0xFFFFFFFF + 1
            chunk.append(method_call(self._serial, *requests[index]))
            waiting[self._serial] = (index, deadline)
        self._sock.settimeout(max(timeout_s, 1.0))
        self._sock.sendall(b"".join(chunk))
        return end

    def _receive(
        self, waiting: dict[int, tuple[int, float]], results: list[Message | None]
    ) -> None:
        """Read what has arrived (waiting until the first deadline at most); calls past their
        deadline are given up."""
        if not waiting:
            return
        # Calls wait in the order they were sent: the first one's deadline is the earliest.
        first = next(iter(waiting.values()))[1]
        ready, _, _ = select.select([self._sock], [], [], max(0.0, first - time.monotonic()))
        if ready:
            size = self._sock.recv_into(self._chunk)
            if not size:
                raise Closed("the bus closed the connection")
            self._buffer += memoryview(self._chunk)[:size]
            self._take(waiting, results)
        now = time.monotonic()
        while waiting:
            serial, (_, deadline) = next(iter(waiting.items()))
            if deadline > now:
                break
            del waiting[serial]

    def _take(self, waiting: dict[int, tuple[int, float]], results: list[Message | None]) -> None:
        """The complete messages in the buffer: replies to waiting calls are kept, anything
        else (signals, late replies to calls given up) is dropped."""
        pos = 0
        buffer = self._buffer
        while (length := message_length(buffer, pos)) is not None and pos + length <= len(buffer):
            blob = bytes(buffer[pos : pos + length])
            pos += length
            if blob[1] not in (METHOD_RETURN, ERROR):
                continue
            try:
                message = read_message(blob)
            except WireError as err:  # one reply of a type not read here: that call failed
                head = read_message(blob, body=False)
                message = Message(
                    ERROR,
                    head.serial,
                    head.reply_serial,
                    UNREADABLE,
                    "s",
                    (f"unreadable reply: {err}",),
                )
            entry = waiting.pop(message.reply_serial or 0, None)
            if entry is not None:
                results[entry[0]] = message
        del buffer[:pos]
