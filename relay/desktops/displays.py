"""X displays and loopback ports on the relay's host: which display numbers an X server
holds, stale X locks of dead servers, and free ports for a desktop's x11vnc and websockify."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import stat
from pathlib import Path

from relay.desktops.probe import LOOPBACK

logger = logging.getLogger(__name__)

X_TMP = Path("/tmp")  # noqa: S108
_LOCK_RE = re.compile(r"^\.X([0-9]+)-lock$")


def clean_stale_x_locks(tmp: Path = X_TMP) -> list[int]:
    """Remove X lock files and sockets whose server pid is dead; returns the displays freed."""
    freed = []
    for lock in tmp.glob(".X*-lock"):
        match = _LOCK_RE.fullmatch(lock.name)
        # Only a lock an X server of ours wrote: anyone may make names in the host's /tmp, and
        # a forged lock naming a dead pid would have us remove a live display's socket.
        pid = _lock_pid(lock) if match and _ours(lock) else None
        if match is None or pid is None or _pid_running(pid):
            continue
        with contextlib.suppress(OSError):
            (tmp / ".X11-unix" / f"X{match[1]}").unlink(missing_ok=True)
            lock.unlink()
            freed.append(int(match[1]))
            logger.info("removed stale X lock of display :%s (pid %d gone)", match[1], pid)
    return freed


def x_display_alive(display: int, tmp: Path = X_TMP) -> bool:
    """True while an X server holds ``display``: its lock names a running pid or its socket
    accepts. Xvfb started with ``-displayfd`` (every desktop's) writes no lock file at all."""
    pid = _lock_pid(tmp / f".X{display}-lock")
    if pid is not None and _pid_running(pid):
        return True
    return _x_socket_listens(tmp / ".X11-unix" / f"X{display}")


def _x_socket_listens(path: Path) -> bool:
    """Whether an X server listens on ``path``, abstract name first (as libxcb tries)."""
    for address in (f"\0{path}", str(path)):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.setblocking(False)  # never wait on a busy server: a full backlog is a live one
            try:
                sock.connect(address)
            except BlockingIOError:
                return True
            except OSError:
                continue
            return True
    return False


def _ours(path: Path) -> bool:
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()


def _lock_pid(lock: Path) -> int | None:
    try:
        return int(lock.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def free_ports(count: int) -> list[int]:
    """Loopback ports the kernel just handed out (all held at once so they differ)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in socks:
            sock.bind((LOOPBACK, 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()
