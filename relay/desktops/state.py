"""A running desktop's record, and the small JSON file that lets a restarted relay find it."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from relay.desktops.credentials import DesktopCredentials, private_dir
from relay.desktops.process import DesktopProcesses, adopt_children
from wire.ids import DesktopSessionId
from wire.ops import DesktopKind, DesktopState, RelayRow

logger = logging.getLogger(__name__)

STATE_VERSION = 1


class Recordable(Protocol):
    """What the state file holds of a desktop or a start: its record."""

    def to_record(self) -> dict[str, Any]: ...


@dataclass
class Desktop:
    """One live desktop incarnation in a slot."""

    desktop_session_id: DesktopSessionId
    kind: DesktopKind
    slot: str
    geometry: str
    depth: int
    display: int
    started_at: str
    started_by: str | None
    websockify_port: int
    vnc_port: int
    audio: bool
    processes: DesktopProcesses
    dbus_address: str | None = None
    audio_reason: str | None = None
    # Session programs that failed while it runs (``chromium exited with status 1``): the
    # desktop runs on without them, and its row's ``reason`` names them.
    failed_programs: list[str] = field(default_factory=list, compare=False)
    state: DesktopState = "running"
    adopted: bool = field(default=False, compare=False)
    # None only for a desktop of a relay version that started desktops without them.
    credentials: DesktopCredentials | None = field(default=None, compare=False)
    profile: str | None = None
    persist_home: bool = False
    # The session's home and environment (apps launched later get them); never in a row.
    home: str | None = field(default=None, compare=False)
    session_env: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def vnc_secret(self) -> bytes | None:
        """x11vnc's VNC authentication secret (the relay answers it for its viewers)."""
        return self.credentials.vnc_secret if self.credentials is not None else None

    def to_row(self) -> RelayRow:
        """The status row: what the server's inventory needs, no pids or host paths."""
        return {
            "desktop_session_id": self.desktop_session_id,
            "kind": self.kind,
            "slot": self.slot,
            "state": self.state,
            "geometry": self.geometry,
            "depth": self.depth,
            "display": f":{self.display}",
            "started_at": self.started_at,
            "started_by": self.started_by,
            "websockify_port": self.websockify_port,
            "vnc_port": self.vnc_port,
            "audio": self.audio,
            "audio_reason": self.audio_reason,
            "profile": self.profile,
            "persist_home": self.persist_home,
            "reason": "; ".join(self.failed_programs) or None,
        }

    def to_record(self) -> dict[str, Any]:
        """Row plus what re-adoption needs (pids, start times, bus address)."""
        record: dict[str, Any] = dict(self.to_row())
        record["display"] = self.display
        record["dbus_address"] = self.dbus_address
        record["processes"] = self.processes.to_records()
        record["home"] = self.home
        record["session_env"] = self.session_env
        if self.credentials is not None:
            record["x_cookie"] = self.credentials.x_cookie.hex()
            record["vnc_secret"] = self.credentials.vnc_secret.hex()
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Desktop:
        """Rebuild a desktop from the state file; raises KeyError, TypeError or ValueError."""
        children = adopt_children(record["processes"])
        return cls(
            desktop_session_id=DesktopSessionId(str(record["desktop_session_id"])),
            kind=_virtual(record["kind"]),
            slot=str(record["slot"]),
            geometry=str(record["geometry"]),
            depth=int(record["depth"]),
            display=int(record["display"]),
            started_at=str(record["started_at"]),
            started_by=None if record.get("started_by") is None else str(record["started_by"]),
            websockify_port=int(record["websockify_port"]),
            vnc_port=int(record["vnc_port"]),
            audio=bool(record.get("audio", False)),
            processes=DesktopProcesses(children),
            dbus_address=record.get("dbus_address"),
            audio_reason=record.get("audio_reason"),
            failed_programs=[p for p in str(record.get("reason") or "").split("; ") if p],
            adopted=True,
            credentials=_credentials(record),
            profile=None if record.get("profile") is None else str(record["profile"]),
            persist_home=bool(record.get("persist_home", False)),
            home=None if record.get("home") is None else str(record["home"]),
            session_env={str(k): str(v) for k, v in dict(record.get("session_env") or {}).items()},
        )


def _virtual(kind: object) -> DesktopKind:
    if kind != "virtual":
        raise ValueError("a record of another kind")
    return "virtual"


def _credentials(record: dict[str, Any]) -> DesktopCredentials | None:
    if "x_cookie" not in record and "vnc_secret" not in record:
        return None
    return DesktopCredentials(
        bytes.fromhex(str(record["x_cookie"])), bytes.fromhex(str(record["vnc_secret"]))
    )


@dataclass
class StartingDesktop:
    """A start in progress: what it has spawned so far, recorded as each child starts; after a
    relay restart, what the next relay has to stop."""

    desktop_session_id: DesktopSessionId
    kind: str
    slot: str
    processes: DesktopProcesses
    # Recorded once Xvfb reports it: the display's sound directory is the start's too.
    display: int | None = None

    def to_record(self) -> dict[str, Any]:
        return {
            "desktop_session_id": self.desktop_session_id,
            "kind": self.kind,
            "slot": self.slot,
            "display": self.display,
            "processes": self.processes.to_records(),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> StartingDesktop:
        """Rebuild an interrupted start; raises KeyError, TypeError or ValueError."""
        display = record.get("display")
        return cls(
            DesktopSessionId(str(record["desktop_session_id"])),
            str(record["kind"]),
            str(record["slot"]),
            DesktopProcesses(adopt_children(record["processes"])),
            None if display is None else int(display),
        )

    @classmethod
    def of(cls, desktop: Desktop) -> StartingDesktop:
        """A recorded desktop that is not re-adopted, kept in the state file as a start that
        did not finish until its processes are stopped."""
        return cls(
            desktop.desktop_session_id,
            desktop.kind,
            desktop.slot,
            desktop.processes,
            desktop.display,
        )


class StateFile:
    """One kind's state file (``desktops.json``, ``docker-desktops.json``): written atomically
    (temp file, fsync, rename), mode 0600.

    ``desktops`` holds complete desktops, ``starting`` the starts in progress (each child is
    recorded as it is spawned), so a relay that dies at any point leaves every process it
    started findable by the next one.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        # Saves come from the event loop (a start's journal) and from worker threads.
        self._write_lock = threading.Lock()

    def load(self) -> list[dict[str, Any]]:
        """Records of the last relay's complete desktops (none when missing or corrupt)."""
        return self._records("desktops")

    def load_starting(self) -> list[dict[str, Any]]:
        """Records of starts the last relay did not finish."""
        return self._records("starting")

    def _records(self, key: str) -> list[dict[str, Any]]:
        return _dicts(self._read().get(key))

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            logger.warning("ignoring unreadable desktop state file: %s", type(err).__name__)
            return {}
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            logger.warning("ignoring desktop state file of another version")
            return {}
        return data

    def load_all(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Records of the last relay's desktops and of its unfinished starts (one read)."""
        data = self._read()
        return _dicts(data.get("desktops")), _dicts(data.get("starting"))

    def save(
        self, desktops: Sequence[Recordable], starting: Sequence[Recordable] | None = None
    ) -> None:
        payload = {
            "version": STATE_VERSION,
            "desktops": [d.to_record() for d in desktops],
            "starting": [s.to_record() for s in starting or ()],
        }
        with self._write_lock:
            self._write(payload)

    def _write(self, payload: dict[str, Any]) -> None:
        private_dir(self.path.parent)
        fd, tmp = tempfile.mkstemp(prefix=".desktops.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(payload, out, indent=1)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def _dicts(value: object) -> list[dict[str, Any]]:
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []
