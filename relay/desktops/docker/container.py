"""One container desktop: its record (status row, state file entry), its directory on the
relay's host, and the container the relay asks Docker to run (docs/docker.md, "Desktops in
containers").

The directory is mounted into the container at the same path, so every socket address the
desktop's programs report (the session bus, the accessibility bus, the sound server) is valid
on the relay's host as it stands. Its layout is ``docker/desktop-session``'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import psutil

from relay.desktops.credentials import (
    DesktopCredentials,
    display_entries,
)
from relay.desktops.docker.config import DockerDesktopSettings
from relay.desktops.docker.display import HostDisplay
from relay.desktops.user import DesktopUser, prepare_home, write_in_home
from wire.ids import DesktopSessionId
from wire.ops import DesktopState, RelayRow
from wire.rfb import rfbauth_file_bytes

logger = logging.getLogger(__name__)

KIND: Final = "docker"
STATE_VERSION: Final = 1
LABEL_DESKTOP: Final = "relaydesk.desktop"
LABEL_RELAY: Final = "relaydesk.relay"
LABEL_SESSION: Final = "relaydesk.session"
LABEL_SLOT: Final = "relaydesk.slot"
# The directory's entries (docker/desktop-session).
X11_DIR: Final = "x11"
VNC_SOCKET: Final = "vnc"
BUS_SOCKET: Final = "bus"
PULSE_DIR: Final = "pulse"
RUNTIME_DIR: Final = "rt"
HEARTBEAT: Final = "heartbeat"
SESSION_LOG: Final = "session.log"
XAUTHORITY: Final = "private/Xauthority"
VNC_PASSWD: Final = "private/vncpasswd"  # noqa: S105 - a file name
# sun_path holds 108 bytes with its NUL; the longest socket a desktop makes is its
# accessibility bus (``rt/at-spi/bus_<display>``).
SOCKET_PATH_MAX: Final = 107
_LONGEST_SOCKET: Final = f"{RUNTIME_DIR}/at-spi/bus_999"
# Inside the container (its own file system, not the host's).
CONTAINER_TMP: Final = "/tmp"  # noqa: S108
CONTAINER_X11: Final = "/tmp/.X11-unix"  # noqa: S108
_CREATE_TIME_TOLERANCE_S: Final = 0.05
_LOG_TAIL_BYTES: Final = 4096


def container_name(session_id: str) -> str:
    return f"relaydesk-desktop-{session_id[:16]}"


@dataclass
class ContainerDesktop:
    """One live container desktop in a slot."""

    desktop_session_id: DesktopSessionId
    slot: str
    geometry: str
    depth: int
    display: int
    started_at: str
    started_by: str | None
    run_dir: Path
    container_id: str
    # The container's init process as this host sees it, and its start time (no pid reuse).
    init_pid: int
    init_started: float
    credentials: DesktopCredentials = field(repr=False)
    audio: bool = False
    audio_reason: str | None = None
    failed_programs: list[str] = field(default_factory=list, compare=False)
    state: DesktopState = "running"
    adopted: bool = field(default=False, compare=False)

    @property
    def host_display(self) -> HostDisplay:
        return HostDisplay(self.display)

    @property
    def x11_dir(self) -> Path:
        return self.run_dir / X11_DIR

    @property
    def vnc_socket(self) -> Path:
        return self.run_dir / VNC_SOCKET

    @property
    def pulse_dir(self) -> Path:
        return self.run_dir / PULSE_DIR

    def alive(self) -> bool:
        """Whether the container's init process still runs (the container runs)."""
        try:
            proc = psutil.Process(self.init_pid)
            started = proc.create_time()
            zombie = proc.status() == psutil.STATUS_ZOMBIE
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False
        return not zombie and abs(started - self.init_started) < _CREATE_TIME_TOLERANCE_S

    def session_env(self) -> dict[str, str]:
        """What a program of the relay's host needs to reach the desktop's session (the
        accessibility worker): its display, X cookie, session bus and runtime directory."""
        return {
            "DISPLAY": f":{self.display}",
            "XAUTHORITY": str(self.run_dir / XAUTHORITY),
            "DBUS_SESSION_BUS_ADDRESS": f"unix:path={self.run_dir / BUS_SOCKET}",
            "XDG_RUNTIME_DIR": str(self.run_dir / RUNTIME_DIR),
            "HOME": str(self.run_dir),
        }

    def to_row(self) -> RelayRow:
        """The status row: no container id, pid or host path."""
        return {
            "desktop_session_id": self.desktop_session_id,
            "kind": KIND,
            "slot": self.slot,
            "state": self.state,
            "geometry": self.geometry,
            "depth": self.depth,
            "display": f":{self.display}",
            "started_at": self.started_at,
            "started_by": self.started_by,
            "audio": self.audio,
            "audio_reason": self.audio_reason,
            "profile": None,
            "persist_home": False,
        }

    def to_record(self) -> dict[str, Any]:
        return {
            **self.to_row(),
            "display": self.display,
            "run_dir": str(self.run_dir),
            "container_id": self.container_id,
            "init_pid": self.init_pid,
            "init_started": self.init_started,
            "x_cookie": self.credentials.x_cookie.hex(),
            "vnc_secret": self.credentials.vnc_secret.hex(),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> ContainerDesktop:
        """Rebuild from the state file; raises KeyError, TypeError or ValueError."""
        pid = int(record["init_pid"])
        if pid <= 1:
            raise ValueError("implausible pid in state file")
        return cls(
            desktop_session_id=DesktopSessionId(str(record["desktop_session_id"])),
            slot=str(record["slot"]),
            geometry=str(record["geometry"]),
            depth=int(record["depth"]),
            display=int(record["display"]),
            started_at=str(record["started_at"]),
            started_by=None if record.get("started_by") is None else str(record["started_by"]),
            run_dir=Path(str(record["run_dir"])),
            container_id=str(record["container_id"]),
            init_pid=pid,
            init_started=float(record["init_started"]),
            credentials=DesktopCredentials(
                bytes.fromhex(str(record["x_cookie"])), bytes.fromhex(str(record["vnc_secret"]))
            ),
            audio=bool(record.get("audio", False)),
            audio_reason=None
            if record.get("audio_reason") is None
            else str(record["audio_reason"]),
            adopted=True,
        )


@dataclass(frozen=True)
class StartingContainer:
    """A start in progress, recorded before Docker is asked, so a relay killed meanwhile
    leaves the next one what to remove: the container (by name) and the directory. A recorded
    desktop that is not re-adopted is one too, until it is removed (``desktop``: it whole)."""

    desktop_session_id: DesktopSessionId
    slot: str
    run_dir: Path
    desktop: ContainerDesktop | None = field(default=None, compare=False)

    def to_record(self) -> dict[str, Any]:
        return {
            "desktop_session_id": self.desktop_session_id,
            "slot": self.slot,
            "run_dir": str(self.run_dir),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> StartingContainer:
        return cls(
            DesktopSessionId(str(record["desktop_session_id"])),
            str(record["slot"]),
            Path(str(record["run_dir"])),
        )

    @classmethod
    def of(cls, desktop: ContainerDesktop) -> StartingContainer:
        return cls(desktop.desktop_session_id, desktop.slot, desktop.run_dir, desktop)


# -- the directory ----------------------------------------------------------------------------


def check_socket_paths(run_dir: Path) -> None:
    """``OSError`` when the directory is too deep for the desktop's unix sockets."""
    if len(str(run_dir / _LONGEST_SOCKET).encode()) > SOCKET_PATH_MAX:
        raise OSError(
            "the desktop directory's path is too long for unix sockets "
            "(RELAYDESK_DOCKER_DESKTOP_DIR names a shorter one)"
        )


def prepare_run_dir(
    run_dir: Path, user: DesktopUser | None, credentials: DesktopCredentials
) -> None:
    """A fresh directory owned by the container's user with the desktop's private files and
    an (empty) X socket directory; the heartbeat file stays the relay's (blocking)."""
    check_socket_paths(run_dir)
    prepare_home(run_dir, user, fresh=True)
    write_in_home(run_dir, XAUTHORITY, display_entries("", credentials.x_cookie), user)
    write_in_home(run_dir, VNC_PASSWD, rfbauth_file_bytes(credentials.vnc_secret), user)
    write_in_home(run_dir, HEARTBEAT, b"", None)
    x11 = run_dir / X11_DIR
    x11.mkdir(mode=0o700)
    if user is not None:
        os.chown(x11, user.uid, user.gid, follow_symlinks=False)


def beat(run_dir: Path) -> None:
    """Touch the desktop's heartbeat (its session watches the age); never follows a link the
    container may have put in its place (blocking)."""
    with contextlib.suppress(OSError):
        os.utime(run_dir / HEARTBEAT, follow_symlinks=False)


def log_tail(run_dir: Path) -> str:
    """The end of the session's own log (written by the container: read without following
    links, bounded)."""
    try:
        fd = os.open(run_dir / SESSION_LOG, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as log:
        size = os.fstat(fd).st_size
        log.seek(max(size - _LOG_TAIL_BYTES, 0))
        return log.read(_LOG_TAIL_BYTES).decode("utf-8", "replace")


# -- the container ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ContainerSpec:
    """What one desktop's container runs with."""

    session_id: str
    slot: str
    relay_key: str
    run_dir: Path
    display: int
    geometry: str
    depth: int
    audio: bool
    programs: tuple[tuple[str, ...], ...]
    x11vnc_flags: tuple[str, ...]
    orphan_timeout_s: float
    user: DesktopUser | None

    def labels(self) -> dict[str, str]:
        return {
            LABEL_DESKTOP: "1",
            LABEL_RELAY: self.relay_key,
            LABEL_SESSION: self.session_id,
            LABEL_SLOT: self.slot,
        }

    def env(self) -> list[str]:
        return [
            f"RELAYDESK_RUN={self.run_dir}",
            f"RELAYDESK_DISPLAY={self.display}",
            f"RELAYDESK_SCREEN={self.geometry}x{self.depth}",
            f"RELAYDESK_AUDIO={1 if self.audio else 0}",
            f"RELAYDESK_ORPHAN_TIMEOUT_S={round(self.orphan_timeout_s)}",
            f"RELAYDESK_X11VNC_FLAGS={' '.join(self.x11vnc_flags)}",
            "LANG=C.UTF-8",
        ]

    def command(self) -> list[str]:
        """The session's programs, separated by ``;`` words (docker/desktop-session)."""
        words: list[str] = []
        for program in self.programs:
            words.extend([*program, ";"])
        return words

    def config(self, settings: DockerDesktopSettings) -> dict[str, Any]:
        """The Engine API's container configuration: a non-root user, no network unless the
        settings name one, CPU, memory and process limits, no capabilities, a read-only root
        file system, and the desktop's directory as the only mount."""
        uid, gid = (self.user.uid, self.user.gid) if self.user else (os.getuid(), os.getgid())
        mounts = [
            {"Type": "bind", "Source": str(self.run_dir), "Target": str(self.run_dir)},
            {"Type": "bind", "Source": str(self.run_dir / X11_DIR), "Target": CONTAINER_X11},
        ]
        host = {
            "NetworkMode": settings.network,
            "NanoCpus": int(settings.cpus * 1e9),
            "Memory": settings.memory_bytes,
            "MemorySwap": settings.memory_bytes,
            "PidsLimit": settings.pids_limit,
            "CapDrop": ["ALL"],
            "SecurityOpt": ["no-new-privileges"],
            "ReadonlyRootfs": True,
            "Tmpfs": {CONTAINER_TMP: "rw,nosuid,nodev,mode=1777"},
            "Mounts": mounts,
            "IpcMode": "private",
            "AutoRemove": True,
        }
        return {
            "Image": settings.image,
            "User": f"{uid}:{gid}",
            "Env": self.env(),
            "Cmd": self.command(),
            "Labels": self.labels(),
            "HostConfig": host,
        }
