"""A display number on the relay's host for a desktop whose X server runs in a container.

The relay's X clients (the screen tool's python-xlib and mss/libX11 connections, the
accessibility worker) name a display ``:N`` and find it at ``/tmp/.X11-unix/XN``; they cannot
be pointed at another socket path. A container desktop's X server listens in the desktop's
directory instead, so the relay claims a free number on its host with the X servers' own lock
file, ``/tmp/.X<N>-lock`` (created exclusively), and links ``/tmp/.X11-unix/X<N>`` to the
container's socket. The lock names the relay until the container runs, then the container's
init process (its pid on this host): an X server that finds the lock treats the number as taken
while that process lives and as stale once the container is gone, as for any X server.

The desktop's sound server is found the same way: ``relay/audio.py`` captures from
``<sound root>/display-N/native``, and ``display-N`` is linked to the container's ``pulse``
directory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from relay.desktops.displays import X_TMP, clean_stale_x_locks, x_display_alive

# Above the numbers X servers started with -displayfd take first (they count up from 0), so a
# container desktop and a host X server do not meet on a number's abstract socket either.
FIRST_DISPLAY: Final = 100
LAST_DISPLAY: Final = 999
X11_DIR_MODE: Final = 0o1777


@dataclass(frozen=True)
class HostDisplay:
    """Display ``number`` claimed on this host for a container desktop."""

    number: int
    tmp: Path = X_TMP

    @property
    def lock(self) -> Path:
        return self.tmp / f".X{self.number}-lock"

    @property
    def link(self) -> Path:
        return self.tmp / ".X11-unix" / f"X{self.number}"

    @property
    def name(self) -> str:
        return f":{self.number}"

    @classmethod
    def claim(cls, x11_dir: Path, tmp: Path = X_TMP) -> HostDisplay:
        """A free number, locked for this process and linked to ``x11_dir/X<number>`` (blocking;
        ``OSError`` when none is free)."""
        _x11_socket_dir(tmp / ".X11-unix")
        clean_stale_x_locks(tmp)
        for number in range(FIRST_DISPLAY, LAST_DISPLAY + 1):
            display = cls(number, tmp)
            if display._taken() or not display._lock_for(os.getpid()):
                continue
            try:
                os.symlink(x11_dir / f"X{number}", display.link)
            except OSError:
                display.lock.unlink(missing_ok=True)
                continue
            return display
        raise OSError("no free X display number for a container desktop")

    def _taken(self) -> bool:
        return (
            os.path.lexists(self.lock)
            or os.path.lexists(self.link)
            or x_display_alive(self.number, self.tmp)
        )

    def _lock_for(self, pid: int) -> bool:
        """Create the lock naming ``pid``; False when another process created it first."""
        try:
            fd = os.open(self.lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(_lock_text(pid))
        return True

    def hand_to(self, pid: int) -> None:
        """Name ``pid`` (the container's init process) in the lock, atomically (blocking)."""
        tmp = self.tmp / f".X{self.number}-lock.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(_lock_text(pid))
        os.replace(tmp, self.lock)

    def holder(self) -> int | None:
        """The pid the lock names (None: no lock, or not one of ours)."""
        try:
            info = self.lock.lstat()
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                return None
            return int(self.lock.read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            return None

    def links_to(self, x11_dir: Path) -> bool:
        try:
            return os.readlink(self.link) == str(x11_dir / f"X{self.number}")
        except OSError:
            return False

    def release(self, x11_dir: Path, pids: tuple[int, ...]) -> None:
        """Remove the link if it is still ours and the lock if it names one of ``pids``
        (blocking)."""
        if self.links_to(x11_dir):
            with contextlib.suppress(OSError):
                self.link.unlink()
        if self.holder() in pids:
            with contextlib.suppress(OSError):
                self.lock.unlink()


def link_sound(sound_root: Path, number: int, pulse_dir: Path, shared: bool) -> Path:
    """``<sound_root>/display-<number>`` → ``pulse_dir`` (blocking). ``shared``: the root is
    only traversable (0711), as when a desktop user must reach sound directories in it."""
    _own_dir(sound_root, 0o711 if shared else 0o700)
    link = sound_root / f"display-{number}"
    if os.path.lexists(link):
        link.unlink()
    os.symlink(pulse_dir, link)
    return link


def unlink_sound(sound_root: Path, number: int, pulse_dir: Path) -> None:
    link = sound_root / f"display-{number}"
    with contextlib.suppress(OSError):
        if os.readlink(link) == str(pulse_dir):
            link.unlink()


def _lock_text(pid: int) -> str:
    # The X servers' format: the pid in ten columns and a newline.
    return f"{pid:10d}\n"


def _x11_socket_dir(path: Path) -> None:
    """``/tmp/.X11-unix`` as X servers make it, when no X server has made it yet."""
    if not path.exists():
        with contextlib.suppress(FileExistsError):
            path.mkdir()
            path.chmod(X11_DIR_MODE)


def _own_dir(path: Path, mode: int) -> None:
    path.mkdir(mode=mode, parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise OSError(f"{path.name}: not a directory of the relay's")
    if stat.S_IMODE(info.st_mode) not in (mode, 0o700, 0o711):
        path.chmod(mode)
