"""A viewer stream's input watch: it tells control about the person's input, and a stream it
cannot follow is logged once and then only forwarded."""

from __future__ import annotations

import logging
import struct

import pytest

from server.control.model import DesktopKey
from server.viewer.input import InputWatch

pytestmark = pytest.mark.unit

KEY = DesktopKey("relay-a", "s" * 32)
HANDSHAKE = b"RFB 003.008\n\x01\x01"


class Sink:
    def __init__(self) -> None:
        self.calls: list[tuple[DesktopKey, str, str | None]] = []

    def person_input(
        self, key: DesktopKey, name: str, user_id: str | None, *, named: bool = True
    ) -> None:
        self.calls.append((key, name, user_id))


def test_a_key_tells_control_who_typed_and_requests_do_not() -> None:
    sink = Sink()
    watch = InputWatch(sink, KEY, "alice", "u-alice")
    watch.observe(HANDSHAKE + struct.pack(">BBHHHH", 3, 1, 0, 0, 10, 10))
    assert sink.calls == []
    watch.observe(memoryview(struct.pack(">BBHI", 4, 1, 0, 0x61)))
    assert sink.calls == [(KEY, "alice", "u-alice")]


def test_a_stream_it_cannot_follow_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    sink = Sink()
    watch = InputWatch(sink, KEY, "alice", "u-alice")
    with caplog.at_level(logging.WARNING, logger="server.viewer.input"):
        watch.observe(HANDSHAKE + bytes([99, 0, 0, 0]))
        for _ in range(5):
            watch.observe(struct.pack(">BBHI", 4, 1, 0, 0x61))
    assert sink.calls == []
    lines = [r.getMessage() for r in caplog.records if r.name == "server.viewer.input"]
    assert len(lines) == 1 and "unknown client message type 99" in lines[0]
    assert "s" * 8 in lines[0] and "s" * 9 not in lines[0]  # the session, shortened
