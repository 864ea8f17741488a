"""Recording a desktop: the ``recording.set`` op, the ``recording.segment`` event and the
``recording`` channel that carries one finished segment's bytes (docs/recording.md).

The server turns a desktop's recording on or off with ``recording.set``, naming the recording
(an id it minted). The relay records the desktop's framebuffer into segments and announces
each finished one with a ``recording.segment`` event; the server then opens a ``recording``
channel for it, which carries a JSON header line and the segment's bytes, and acknowledges
the stored segment with ``recording.ack`` (the relay deletes its copy). Times are wall-clock
UTC milliseconds, the clock the server's audit rows use too.
"""

import re
from typing import Final, TypedDict

from wire.errors import InvalidArgs
from wire.ops import OpSpec, SessionArgs

SEGMENT_EVENT: Final = "recording.segment"
# Recording ids are minted by the server: ``rec_`` and 24 hex digits.
RECORDING_ID: Final = re.compile(r"rec_[0-9a-f]{24}")
MAX_SEQ: Final = 10_000_000


class RecordingSetArgs(SessionArgs):
    """``on``: record the desktop as ``recording_id`` (a relay already recording it as that
    id goes on); off: stop and hand over what was recorded."""

    on: bool
    recording_id: str


class RecordingSetResult(TypedDict):
    recording: bool
    recording_id: str | None


class RecordingAckArgs(SessionArgs):
    recording_id: str
    seq: int


class RecordingAckResult(TypedDict):
    deleted: bool


class SegmentInfo(TypedDict):
    """A finished segment, as announced and as the channel's header line says.

    ``start_ms``/``end_ms``: the wall-clock span it covers; ``offset_ms``: where its first
    frame sits on the recording's own time line (its presentation times count from the
    recording's start, so segments join without re-timing); ``bytes``: its size."""

    desktop_session_id: str
    recording_id: str
    seq: int
    start_ms: int
    end_ms: int
    recording_start_ms: int
    bytes: int
    frames: int
    codec: str
    width: int
    height: int


RECORDING_SET: Final = OpSpec("recording.set", RecordingSetArgs, RecordingSetResult)
RECORDING_ACK: Final = OpSpec("recording.ack", RecordingAckArgs, RecordingAckResult)


def check_recording_id(value: str, field: str = "recording_id") -> str:
    """``value`` when it is a recording id, else ``invalid_args`` naming ``field``."""
    if not RECORDING_ID.fullmatch(value):
        raise InvalidArgs(field, "must be a recording id (rec_ and 24 hex digits)")
    return value


def check_seq(value: int, field: str = "seq") -> int:
    if not 0 <= value < MAX_SEQ:
        raise InvalidArgs(field, f"must be between 0 and {MAX_SEQ - 1}")
    return value
