"""Recordings on disk: one folder per recording under the recordings directory, holding its
manifest (``manifest.json``) and its segments (``000000.seg`` …: MP4 or WebM, as the
manifest's codec says).

Only this module touches the folder. The manifest is the recording's one record (no database
table): replicas share the directory, and a manifest is rewritten whole through a temporary
file and a rename, so a reader never sees half of one. Times are wall-clock UTC ms.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from wire.recording import RECORDING_ID

MANIFEST: Final = "manifest.json"
# Conversations' recording defaults: ``conversations/<conversation id>.json``.
DEFAULTS: Final = "conversations"
CONVERSATION_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,32}")


@dataclass
class Segment:
    seq: int
    start_ms: int
    end_ms: int
    bytes: int
    frames: int


@dataclass
class Recording:
    """One recording of one desktop session, as its manifest says."""

    recording_id: str
    conversation_id: str
    relay_id: str
    desktop_session_id: str
    kind: str
    slot: str
    started_by: str
    start_ms: int
    end_ms: int | None = None
    width: int = 0
    height: int = 0
    codec: str = "h264"
    segments: list[Segment] = field(default_factory=list)
    # Where the video's clock starts (its time 0), by the relay's clock; known from the
    # first segment (until then: ``start_ms``).
    video_start_ms: int | None = None

    @property
    def origin_ms(self) -> int:
        """The wall-clock moment of the video's time 0."""
        return self.video_start_ms if self.video_start_ms is not None else self.start_ms

    @property
    def active(self) -> bool:
        return self.end_ms is None

    @property
    def last_ms(self) -> int:
        """The last moment the recording covers (so far)."""
        ends = [segment.end_ms for segment in self.segments]
        return max([self.start_ms, *ends, *([self.end_ms] if self.end_ms else [])])

    @property
    def size_bytes(self) -> int:
        return sum(segment.bytes for segment in self.segments)

    def summary(self) -> dict[str, Any]:
        """What a listing shows of it."""
        return {
            "recording_id": self.recording_id,
            "conversation_id": self.conversation_id,
            "relay_id": self.relay_id,
            "desktop_session_id": self.desktop_session_id,
            "kind": self.kind,
            "slot": self.slot,
            "started_by": self.started_by,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "duration_ms": self.last_ms - self.start_ms,
            "recording": self.active,
            "segments": len(self.segments),
            "bytes": self.size_bytes,
            "width": self.width,
            "height": self.height,
            "codec": self.codec,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recording:
        segments = [Segment(**segment) for segment in data.pop("segments", [])]
        return cls(**data, segments=segments)


class RecordingFiles:
    """The recordings directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def folder(self, recording_id: str) -> Path:
        if not RECORDING_ID.fullmatch(recording_id):
            raise ValueError("not a recording id")
        return self.root / recording_id

    def segment_path(self, recording_id: str, seq: int) -> Path:
        return self.folder(recording_id) / f"{seq:06d}.seg"

    def load(self, recording_id: str) -> Recording | None:
        try:
            text = (self.folder(recording_id) / MANIFEST).read_text(encoding="utf-8")
            return Recording.from_dict(json.loads(text))
        except (OSError, ValueError, TypeError):
            return None

    def save(self, recording: Recording) -> None:
        folder = self.folder(recording.recording_id)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = folder / f".{MANIFEST}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(asdict(recording)), encoding="utf-8")
        tmp.replace(folder / MANIFEST)

    def all(self) -> Iterator[Recording]:
        if not self.root.is_dir():
            return
        for folder in sorted(self.root.iterdir()):
            if RECORDING_ID.fullmatch(folder.name):
                recording = self.load(folder.name)
                if recording is not None:
                    yield recording

    def _default_path(self, conversation_id: str) -> Path:
        if not CONVERSATION_ID.fullmatch(conversation_id):
            raise ValueError("not a conversation id")
        return self.root / DEFAULTS / f"{conversation_id}.json"

    def records_by_default(self, conversation_id: str) -> bool:
        """Whether desktops started in the conversation are recorded unless told otherwise
        (``relaydesk admin set-conversation … --record``)."""
        try:
            text = self._default_path(conversation_id).read_text(encoding="utf-8")
            return bool(json.loads(text).get("record"))
        except (OSError, ValueError):
            return False

    def set_records_by_default(self, conversation_id: str, record: bool) -> None:
        path = self._default_path(conversation_id)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"record": record}), encoding="utf-8")
        tmp.replace(path)

    def delete(self, recording_id: str) -> None:
        shutil.rmtree(self.folder(recording_id), ignore_errors=True)
