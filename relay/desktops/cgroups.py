"""One cgroup per desktop, so that a desktop stops whole (docs/desktops.md, "Stopping whole").

A process group is no boundary: a program of the desktop's user that calls ``setsid`` leaves
the desktop's groups and would outlive the desktop. A cgroup (v2) is: a process cannot leave
it, and every process it forks starts in it. Each desktop of a root relay gets
``<cgroup2>/relaydesk/<relay key>/<desktop_session_id>``; every child joins it while it is
still *held* (``ChildProcess.spawn(held=True)``: a shell blocked in a builtin ``read``, which
forks nothing), moved by the relay, before its program may start. A stop writes
``cgroup.kill`` (SIGKILL to every process in it, atomic against forks) and removes it. A pause
writes ``cgroup.freeze`` (every process in it, the browser's helpers too, stops being
scheduled; docs/desktops.md, "Pause and resume").

This module is also run by the orphan guard, so it imports nothing of the relay's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from pathlib import Path
from typing import Final

logger = logging.getLogger(__name__)

_MOUNTS: Final = Path("/proc/mounts")
_PARENT: Final = "relaydesk"
_KILL_WAIT_S: Final = 3.0
_FREEZE_WAIT_S: Final = 5.0
_POLL_S: Final = 0.01


def cgroup2_mount(mounts: Path = _MOUNTS) -> Path | None:
    """Where the cgroup2 hierarchy is mounted (``/sys/fs/cgroup``, or ``.../unified`` on a
    hybrid host), or None."""
    try:
        lines = mounts.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            return Path(fields[1].replace("\\040", " "))
    return None


def relay_cgroups(key: str) -> Path | None:
    """The parent of one relay's desktop cgroups, made when missing; None where the host has
    no writable cgroup2 (the relay is not root, or the hierarchy is read-only)."""
    if os.geteuid() != 0:
        return None
    mount = cgroup2_mount()
    if mount is None or not (mount / "cgroup.procs").is_file():
        return None
    parent = mount / _PARENT / key
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        logger.info("desktops have no cgroup of their own (%s): stopped by process group", err)
        return None
    return parent


def create(parent: Path, name: str) -> Path | None:
    """A new cgroup ``name`` under ``parent`` (None: it cannot be made)."""
    path = parent / name
    try:
        path.mkdir(parents=True, exist_ok=True)  # an orphan guard may have removed parent
    except OSError as err:
        logger.warning("no cgroup for desktop %s: %s", name, err)
        return None
    return path


def enter(cgroup: Path, pid: int) -> bool:
    """Move ``pid`` (and only it) into ``cgroup``."""
    try:
        (cgroup / "cgroup.procs").write_text(f"{pid}\n", encoding="ascii")
    except OSError as err:
        logger.warning("pid %d not moved into %s: %s", pid, cgroup.name, err)
        return False
    return True


def pids(cgroup: Path) -> list[int]:
    """The processes in ``cgroup`` (empty when it is gone)."""
    try:
        text = (cgroup / "cgroup.procs").read_text(encoding="ascii")
    except OSError:
        return []
    return [int(word) for word in text.split()]


def populated(cgroup: Path) -> bool:
    try:
        text = (cgroup / "cgroup.events").read_text(encoding="ascii")
    except OSError:
        return False
    return "populated 1" in text


def freeze(cgroup: Path, frozen: bool, timeout_s: float = _FREEZE_WAIT_S) -> bool:
    """Freeze (``frozen``) or thaw every process of ``cgroup`` (blocking): write
    ``cgroup.freeze`` and wait until ``cgroup.events`` says ``frozen 1`` (or ``frozen 0``).
    False when the cgroup has no freezer or did not get there in ``timeout_s``."""
    try:
        (cgroup / "cgroup.freeze").write_text("1" if frozen else "0", encoding="ascii")
    except OSError as err:
        logger.warning("cgroup %s not %s: %s", cgroup.name, "frozen" if frozen else "thawed", err)
        return False
    want = f"frozen {int(frozen)}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if want in _events(cgroup):
            return True
        time.sleep(_POLL_S)
    return want in _events(cgroup)


def is_frozen(cgroup: Path) -> bool:
    """Whether ``cgroup`` is asked to be frozen (``cgroup.freeze`` reads 1): what a restarted
    relay reads to re-adopt a paused desktop paused."""
    try:
        return (cgroup / "cgroup.freeze").read_text(encoding="ascii").strip() == "1"
    except OSError:
        return False


def cpu_usec(cgroup: Path) -> int | None:
    """CPU time used by every process that ever ran in ``cgroup`` (``cpu.stat``
    ``usage_usec``), None when it cannot be read."""
    try:
        text = (cgroup / "cpu.stat").read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "usage_usec":
            return int(value)
    return None


def _events(cgroup: Path) -> str:
    try:
        return (cgroup / "cgroup.events").read_text(encoding="ascii")
    except OSError:
        return ""


def kill(cgroup: Path, timeout_s: float = _KILL_WAIT_S) -> bool:
    """SIGKILL every process in ``cgroup``, wait until it is empty and remove it (blocking).
    True when it is gone; where ``cgroup.kill`` is missing (before Linux 5.14) the cgroup is
    frozen and its processes killed one by one."""
    if not cgroup.is_dir():
        return True
    if (cgroup / "cgroup.kill").exists():
        with contextlib.suppress(OSError):
            (cgroup / "cgroup.kill").write_text("1", encoding="ascii")
    else:
        _kill_frozen(cgroup)
    deadline = time.monotonic() + timeout_s
    while populated(cgroup) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    try:
        cgroup.rmdir()
    except FileNotFoundError:
        return True
    except OSError as err:
        logger.error(
            "cgroup %s not removed (%s); processes left: %s", cgroup.name, err, pids(cgroup)
        )
        return False
    return True


def _kill_frozen(cgroup: Path) -> None:
    freeze = cgroup / "cgroup.freeze"
    with contextlib.suppress(OSError):
        freeze.write_text("1", encoding="ascii")
    for pid in pids(cgroup):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        freeze.write_text("0", encoding="ascii")


def kill_others(parent: Path, keep: set[str]) -> int:
    """Kill and remove the desktop cgroups under ``parent`` not named in ``keep`` (the desktops
    of a relay that are not re-adopted die whole); returns how many (blocking)."""
    removed = 0
    with contextlib.suppress(OSError):
        for path in parent.iterdir():
            if path.is_dir() and path.name not in keep:
                removed += kill(path)
    return removed


def remove_if_empty(parent: Path) -> None:
    """The relay's parent cgroup, once it holds no desktop's."""
    with contextlib.suppress(OSError):
        parent.rmdir()
