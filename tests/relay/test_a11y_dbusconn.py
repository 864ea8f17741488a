"""``relay.a11y.dbusconn``: the worker's own socket to the accessibility bus, against a small
bus played here (authentication, ``Hello``, then whatever a test answers). The real bus is
used on every accessibility call of the integration tests."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from relay.a11y.dbusconn import Closed, ConnectFailed, Connection, socket_address
from relay.a11y.dbuswire import ERROR, METHOD_RETURN, Message, message_length, read_message
from tests.relay.test_a11y_dbuswire import message

pytestmark = pytest.mark.unit

Answer = Callable[[Message], list[bytes]]  # a call → the messages the bus sends back


class FakeBus:
    """One connection's bus: says OK to ``AUTH EXTERNAL``, answers ``Hello``, hands every
    other call to ``answer``."""

    def __init__(self, path: Path, answer: Answer) -> None:
        self.answer = answer
        self.calls: list[Message] = []
        self.auth = b""
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        self._server.listen(1)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self._server.accept()
        with conn:
            buffer = b""
            while b"BEGIN\r\n" not in buffer:
                buffer += conn.recv(4096)
                if b"\r\n" in buffer and b"OK" not in buffer[-40:] and not self.auth:
                    self.auth = buffer.split(b"\r\n")[0]
                    conn.sendall(b"OK 0123456789abcdef0123456789abcdef\r\n")
            buffer = buffer.split(b"BEGIN\r\n", 1)[1]
            while True:
                length = message_length(buffer)
                while length is None or len(buffer) < length:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                    length = message_length(buffer)
                call = read_message(buffer[:length])
                buffer = buffer[length:]
                if call.values == () and call.serial == 1:  # Hello
                    conn.sendall(message("s", (":1.42",), reply_to=call.serial))
                    continue
                self.calls.append(call)
                for out in self.answer(call):
                    if out == b"close":
                        return
                    conn.sendall(out)

    def close(self) -> None:
        self._server.close()


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[Callable[[Answer], tuple[FakeBus, Connection]]]:
    made: list[tuple[FakeBus, Connection]] = []

    def start(answer: Answer) -> tuple[FakeBus, Connection]:
        path = tmp_path / f"bus{len(made)}"
        fake = FakeBus(path, answer)
        made.append((fake, Connection(f"unix:path={path},guid=0123")))
        return made[-1]

    yield start
    for fake, conn in made:
        conn.close()
        fake.close()


def echo(call: Message) -> list[bytes]:
    return [message("s", (f"{call.values[0]}!",), reply_to=call.serial, serial=call.serial + 1000)]


def request(text: str) -> tuple[str, str, str, str, str, tuple[str]]:
    return (":1.7", "/org/a11y/atspi/accessible/3", "org.a11y.atspi.Test", "Echo", "s", (text,))


def test_it_authenticates_as_its_user_and_says_hello(bus):
    fake, conn = bus(echo)
    assert fake.auth == b"\0AUTH EXTERNAL " + str(os.getuid()).encode().hex().encode()
    assert conn.unique_name == ":1.42"


def test_replies_come_back_in_the_order_of_the_calls_whatever_order_they_arrive_in(bus):
    held: list[Message] = []

    def backwards(call: Message) -> list[bytes]:
        held.append(call)
        if len(held) < 5:
            return []
        return [out for c in reversed(held) for out in echo(c)]

    _fake, conn = bus(backwards)
    replies = conn.exchange([request(str(i)) for i in range(5)], 2.0)
    assert [r.values for r in replies if r is not None] == [(f"{i}!",) for i in range(5)]
    assert all(r is not None and r.kind == METHOD_RETURN for r in replies)


def test_a_call_that_gets_no_reply_times_out_alone(bus):
    def silent_on_two(call: Message) -> list[bytes]:
        return [] if call.values == ("2",) else echo(call)

    _fake, conn = bus(silent_on_two)
    started = time.monotonic()
    replies = conn.exchange([request(str(i)) for i in range(4)], 0.3)
    elapsed = time.monotonic() - started
    assert [r.values if r is not None else None for r in replies] == [
        ("0!",),
        ("1!",),
        None,
        ("3!",),
    ]
    assert 0.25 <= elapsed < 2.0
    # the connection is still good
    assert conn.exchange([request("again")], 1.0)[0].values == ("again!",)


def test_errors_signals_and_late_replies_are_told_apart(bus):
    def noisy(call: Message) -> list[bytes]:
        signal = bytearray(message("s", ("hi",), reply_to=0))
        signal[1] = 4  # a signal: no reply to anything
        late = message("s", ("late",), reply_to=9999)
        error = message(
            "s", ("gone",), reply_to=call.serial, error="org.freedesktop.DBus.Error.UnknownObject"
        )
        return [bytes(signal), late, error]

    _fake, conn = bus(noisy)
    (reply,) = conn.exchange([request("x")], 1.0)
    assert reply is not None and reply.kind == ERROR
    assert reply.error_name == "org.freedesktop.DBus.Error.UnknownObject"


def test_a_reply_it_cannot_read_fails_that_call_only(bus):
    def odd(call: Message) -> list[bytes]:
        if call.values == ("fd",):
            blob = message("u", (1,), reply_to=call.serial)
            return [blob.replace(b"\x08\x01g\x00\x01u\x00", b"\x08\x01g\x00\x01h\x00")]
        return echo(call)

    _fake, conn = bus(odd)
    replies = conn.exchange([request("fd"), request("ok")], 1.0)
    assert replies[0] is not None and replies[0].kind == ERROR
    assert replies[1] is not None and replies[1].values == ("ok!",)


def test_at_most_depth_calls_wait_at_a_time(bus):
    waiting: list[int] = []
    most = [0]

    def count(call: Message) -> list[bytes]:
        waiting.append(call.serial)
        most[0] = max(most[0], len(waiting))
        if len(waiting) < 3:
            return []
        out = [o for s in waiting for o in echo(Message(1, s, None, None, "s", ("n",)))]
        waiting.clear()
        return out

    _fake, conn = bus(count)
    replies = conn.exchange([request("n")] * 9, 2.0, depth=3)
    assert all(r is not None for r in replies) and most[0] == 3


def test_the_bus_going_away_closes_the_connection(bus):
    _fake, conn = bus(lambda call: [b"close"])
    with pytest.raises(Closed):
        conn.exchange([request("x")], 2.0)
    assert conn.closed
    with pytest.raises(Closed):
        conn.exchange([request("y")], 2.0)


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("unix:path=/tmp/dbus-ccbjq36b2Y,guid=386f", "/tmp/dbus-ccbjq36b2Y"),
        ("unix:abstract=/tmp/dbus-X,guid=1", b"\0/tmp/dbus-X"),
        ("tcp:host=localhost,port=1;unix:path=/run/a%20b", "/run/a b"),
    ],
)
def test_socket_addresses_are_read(address, expected):
    assert socket_address(address) == expected


def test_an_address_without_a_unix_socket_is_refused(tmp_path):
    with pytest.raises(ConnectFailed):
        socket_address("tcp:host=localhost,port=4000")
    with pytest.raises(ConnectFailed):
        Connection(f"unix:path={tmp_path / 'nobody-listens'}")
