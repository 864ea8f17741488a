"""What belongs to a soak run, and what it left behind: processes, X sockets, shared memory and
runtime directories, scoped to the run (``benchmarks/bench_soak.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from relay.desktops.displays import X_TMP

if TYPE_CHECKING:
    from benchmarks.soak_run import Footprint, Soak


def leftovers(soak: Soak) -> dict[str, list[str]]:
    """What the run left behind once every desktop was stopped and server and relay exited."""
    return {
        "processes": _stray_processes(soak),
        "X sockets": _x_leftovers(soak.footprint),
        "shared memory": _shm_leftovers(soak.footprint),
        "runtime dirs": _dir_leftovers(soak),
    }


def _stray_processes(soak: Soak) -> list[str]:
    root, found = str(soak.root), []
    for proc in psutil.process_iter(["name", "status"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        with contextlib.suppress(psutil.Error):
            created = soak.footprint.pids.get(proc.pid)
            ours = created is not None and abs(proc.create_time() - created) < 1.0
            if ours or _names(proc, root):
                found.append(f"{proc.pid} {proc.info['name']}")
    return found


def _names(proc: psutil.Process, root: str) -> bool:
    if any(root in arg for arg in proc.cmdline()):
        return True
    with contextlib.suppress(psutil.AccessDenied):
        return any(root in value for value in proc.environ().values())
    return False


def _x_leftovers(footprint: Footprint) -> list[str]:
    """Socket files this run's X servers made (seen while they listened) that nobody answers
    on any more, and lock files naming its processes. Other runs on the host take the same
    display numbers, so a socket is this run's only when it is the very file it saw (inode and
    time)."""
    found = []
    for display, inode, mtime in sorted(footprint.x_sockets):
        sock = X_TMP / ".X11-unix" / f"X{display}"
        with contextlib.suppress(OSError):
            now = sock.stat()
            if (now.st_ino, now.st_mtime_ns) == (inode, mtime) and not _answers(sock):
                found.append(sock.name)
    for display in footprint.displays:
        lock = X_TMP / f".X{display}-lock"
        with contextlib.suppress(OSError, ValueError):
            if int(lock.read_text().strip()) in footprint.pids:
                found.append(lock.name)
    return found


def _answers(sock: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(1.0)
        try:
            client.connect(str(sock))
        except OSError:
            return False
        return True


def _shm_leftovers(footprint: Footprint) -> list[str]:
    """SysV segments created by this run's processes (x11vnc's, when it is killed)."""
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()
    except OSError:
        return []
    header = rows[0].split() if rows else []
    segs = [dict(zip(header, row.split(), strict=False)) for row in rows[1:]]
    return [
        f"shmid {s['shmid']} (creator {s['cpid']} {footprint.names.get(int(s['cpid']), '?')}, "
        f"{s['nattch']} attached)"
        for s in segs
        if _was_ours(footprint, int(s["cpid"]), float(s["ctime"]))
    ]


def _was_ours(footprint: Footprint, pid: int, at: float) -> bool:
    """True when ``pid`` was this run's process at time ``at`` (a busy host reuses pids)."""
    created = footprint.pids.get(pid)
    if created is None or at < created - 1:
        return False
    with contextlib.suppress(psutil.Error):
        now = psutil.Process(pid).create_time()
        if abs(now - created) > 1 and now <= at + 1:
            return False  # another process, started later under the same pid, made it
    return True


def _dir_leftovers(soak: Soak) -> list[str]:
    """Desktops' private directories, and sound runtime directories (the relay's TMPDIR is the
    run's own, so every ``relaydesk-pulse-*/display-N`` there is this run's)."""
    run = soak.state_dir / "run"
    found = [f"run/{p.name}" for p in run.iterdir() if p.is_dir()] if run.is_dir() else []
    found += [str(p.relative_to(soak.root)) for p in soak.tmp_dir.glob("relaydesk-pulse-*/*")]
    return found


# -- what belongs to the run --------------------------------------------------------------------


def track(soak: Soak) -> None:
    """Add the relay's descendants, the processes its state file records, and their displays."""
    footprint = soak.footprint
    for process in (soak.server, soak.relay):
        if process is not None and process.is_alive():
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(process.pid).children(recursive=True):
                    footprint.add_live(child.pid)
    for record in _state_records(soak.state_dir):
        for child in record.get("processes", []):
            footprint.pids.setdefault(int(child["pid"]), float(child["create_time"]))
            footprint.names.setdefault(int(child["pid"]), str(child["name"]))
            if child["name"] == "Xvfb" and (display := _x_display_of(int(child["pid"]))):
                with contextlib.suppress(OSError):
                    made = (X_TMP / ".X11-unix" / f"X{display}").stat()
                    footprint.x_sockets.add((display, made.st_ino, made.st_mtime_ns))


def _state_records(state_dir: Path) -> list[dict[str, Any]]:
    try:
        state = json.loads((state_dir / "desktops.json").read_text())
    except (OSError, ValueError):
        return []
    return [*state.get("desktops", []), *state.get("starting", [])]


def _x_display_of(pid: int) -> int | None:
    """The display an X server listens on (its socket under /tmp/.X11-unix), if it runs."""
    with contextlib.suppress(psutil.Error):
        for conn in psutil.Process(pid).net_connections(kind="unix"):
            name = str(conn.laddr).rsplit("/X", 1)[-1]
            if ".X11-unix/X" in str(conn.laddr) and name.isdigit():
                return int(name)
    return None


async def tracker(soak: Soak) -> None:
    while not soak.stop.is_set():
        track(soak)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(soak.stop.wait(), 0.5)
