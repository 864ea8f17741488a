"""A desktop's credentials: its X authority cookie and VNC secret, and the private files that
hold them (docs/desktops.md, "Who can reach a desktop").

Every desktop has a private directory (0700) with ``Xauthority`` (the cookie Xvfb demands,
given to every X client started in the desktop) and ``vncpasswd`` (x11vnc's ``-rfbauth``
file). The relay's own X connections (screen tool, keyboard state) read the relay-wide
authority file, ``RelayAuthority``: one entry per live desktop's display, rewritten atomically
whenever the set of desktops changes, named by the relay process's ``XAUTHORITY`` (set once at
start-up). python-xlib and libX11 both read ``XAUTHORITY`` on every connection they open.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import stat
import struct
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from wire.rfb import SECRET_LEN, rfbauth_file_bytes

COOKIE_LEN: Final = 16
MIT_MAGIC_COOKIE: Final = b"MIT-MAGIC-COOKIE-1"
# Xauthority families: Local (a host name, what python-xlib and libxcb look up for a Unix
# socket) and Wild (any address; libXau's fallback if the host name changes).
FAMILY_LOCAL: Final = 256
FAMILY_WILD: Final = 0xFFFF
XAUTHORITY_NAME: Final = "Xauthority"
VNC_PASSWD_NAME: Final = "vncpasswd"  # noqa: S105 - a file name
PRIVATE_DIR_MODE: Final = 0o700
PRIVATE_FILE_MODE: Final = 0o600


@dataclass(frozen=True)
class DesktopCredentials:
    """The two secrets of one desktop; never in a status row, a log line or a command line."""

    x_cookie: bytes
    vnc_secret: bytes

    @classmethod
    def new(cls) -> DesktopCredentials:
        # No NUL byte in the VNC secret: the VNC code reads the stored secret as a C string.
        vnc = bytes(secrets.randbelow(255) + 1 for _ in range(SECRET_LEN))
        return cls(secrets.token_bytes(COOKIE_LEN), vnc)

    def __repr__(self) -> str:
        return "DesktopCredentials(…)"


def _field(data: bytes) -> bytes:
    return struct.pack(">H", len(data)) + data


def xauth_entry(family: int, address: bytes, number: str, cookie: bytes) -> bytes:
    """One Xauthority record (big-endian u16 family, then four u16-length fields)."""
    return (
        struct.pack(">H", family)
        + _field(address)
        + _field(number.encode("ascii"))
        + _field(MIT_MAGIC_COOKIE)
        + _field(cookie)
    )


def display_entries(number: str, cookie: bytes) -> bytes:
    """The records that let libX11, libxcb and python-xlib find ``cookie`` for a display
    (``number`` empty: any display)."""
    host = socket.gethostname().encode()
    return xauth_entry(FAMILY_LOCAL, host, number, cookie) + xauth_entry(
        FAMILY_WILD, b"", number, cookie
    )


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) and make it 0700 even if it existed more open."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    if stat.S_IMODE(path.stat().st_mode) != PRIVATE_DIR_MODE:
        path.chmod(PRIVATE_DIR_MODE)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` atomically with a 0600 file holding ``data`` (temp file, rename)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_desktop_files(directory: Path, credentials: DesktopCredentials) -> None:
    """The desktop's private directory with its ``Xauthority`` and ``vncpasswd`` (blocking)."""
    private_dir(directory)
    write_private(directory / XAUTHORITY_NAME, display_entries("", credentials.x_cookie))
    write_private(directory / VNC_PASSWD_NAME, rfbauth_file_bytes(credentials.vnc_secret))


class RelayAuthority:
    """The relay-wide authority file: one cookie per live desktop display.

    Each kind of desktop that has displays (``virtual``, ``docker``) is a ``source`` with its
    own set of entries; a write replaces one source's set and rewrites the file with all of them.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sources: dict[str, list[tuple[int, bytes]]] = {}
        # Writes come from worker threads of different desktop kinds.
        self._lock = threading.Lock()

    def write(
        self,
        cookies: Mapping[int, bytes] | Iterable[tuple[int, bytes]],
        source: str = "virtual",
    ) -> None:
        """Rewrite the file with exactly these ``display → cookie`` entries of ``source`` and
        the current entries of every other source (blocking)."""
        pairs = list(cookies.items() if isinstance(cookies, Mapping) else cookies)
        with self._lock:
            self._sources[source] = pairs
            data = b"".join(
                display_entries(str(display), cookie)
                for entries in self._sources.values()
                for display, cookie in entries
            )
            private_dir(self.path.parent)
            write_private(self.path, data)

    def use_in_process(self) -> None:
        """Point this process's X clients at the file (once, at relay start-up)."""
        os.environ["XAUTHORITY"] = str(self.path)
