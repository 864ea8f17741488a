"""A person's input on a viewer stream: the bytes the viewer sends, looked at on their way.

Each viewer stream has one :class:`InputWatch`. It feeds what the viewer sends to the RFB
client parser (``wire.rfb_client``) before the bytes go on unchanged, and tells the control
service when a chunk carried a key, a pointer event or clipboard text: that person now holds
the desktop (docs/control.md). A stream the parser cannot follow is logged once and then
only forwarded; it never breaks or slows the viewer.
"""

from __future__ import annotations

import logging
from typing import Protocol

from server.control.model import DesktopKey
from wire.rfb_client import RfbClientStream

log = logging.getLogger(__name__)


class PersonInputSink(Protocol):
    """Where a person's input goes (``ControlService.person_input``)."""

    def person_input(
        self, key: DesktopKey, name: str, user_id: str | None, *, named: bool = True
    ) -> None: ...


class InputWatch:
    """Watches one viewer's stream for the input of the person behind it."""

    def __init__(self, sink: PersonInputSink, key: DesktopKey, name: str, user_id: str) -> None:
        self._sink = sink
        self._key = key
        self._name = name
        self._user_id = user_id
        self._stream = RfbClientStream()

    def observe(self, data: bytes | bytearray | memoryview) -> None:
        """Look at bytes the viewer sent (they are forwarded as they are, by the caller)."""
        stream = self._stream
        if stream.failed is not None:
            return
        try:
            found = stream.feed(data)
        except Exception:  # the stream goes on whatever the parser does
            log.exception("reading a viewer's input failed; the stream is only forwarded now")
            stream.failed = "parser error"
            return
        if found:
            self._sink.person_input(self._key, self._name, self._user_id)
        elif stream.failed is not None:
            log.warning(
                "viewer input of session %s… is no longer followed (%s): takeover by this "
                "viewer's input is off for this stream",
                self._key.desktop_session_id[:8],
                stream.failed,
            )
