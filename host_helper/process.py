"""The helper's children: each leads its own process group and is stopped with SIGTERM first.

A smaller cousin of the relay's desktop process wrapper (the helper may not import the relay):
the helper only ever runs x11vnc and websockify, and never adopts children of an earlier run
(a helper that stops stops what it started).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

_POLL_S = 0.01
_SYSV_SHM = Path("/proc/sysvipc/shm")
_IPC_RMID = 0


@dataclass(eq=False)
class Child:
    """One child process leading its own process group (``pgid == pid``)."""

    name: str
    popen: subprocess.Popen[bytes]

    @classmethod
    def spawn(cls, name: str, argv: Sequence[str], env: Mapping[str, str]) -> Child:
        """Start ``argv`` in a new session; raises ``OSError`` when it cannot be executed."""
        popen = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        log.debug("started %s pid=%d", name, popen.pid)
        return cls(name, popen)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def group_gone(self) -> bool:
        """True once no process of the group remains (the leader is reaped here)."""
        self.popen.poll()
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    def signal_group(self, sig: signal.Signals) -> None:
        # Linux never reuses a pid while a group of that id exists: the group is still ours.
        if not self.group_gone():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)


async def _wait_until_gone(children: Sequence[Child], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not all(child.group_gone() for child in children):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(_POLL_S)
    return True


@dataclass
class ChildSet:
    """The children of one local desktop, stopped together in reverse start order."""

    children: list[Child] = field(default_factory=list)

    def add(self, child: Child) -> Child:
        self.children.append(child)
        return child

    def dead(self) -> list[str]:
        """Names of children that have exited."""
        return [child.name for child in self.children if not child.is_alive()]

    async def stop(self, grace_s: float, kill_wait_s: float = 2.0) -> bool:
        """SIGTERM every group, SIGKILL what is left after ``grace_s``; True when all are gone.

        SIGTERM first: x11vnc frees its MIT-SHM segments only on a clean exit.
        """
        live = [child for child in reversed(self.children) if not child.group_gone()]
        for child in live:
            child.signal_group(signal.SIGTERM)
        gone = await _wait_until_gone(live, grace_s)
        if not gone:
            for child in live:
                if not child.group_gone():
                    log.info("%s pid=%d ignored SIGTERM; killing its group", child.name, child.pid)
                    child.signal_group(signal.SIGKILL)
            gone = await _wait_until_gone(live, kill_wait_s)
        release_shared_memory({child.pid for child in self.children})
        return gone


def release_shared_memory(creators: set[int]) -> int:
    """Remove SysV segments created by ``creators`` that nobody attaches any more.

    A killed x11vnc leaks its framebuffer segments until the host runs out of them.
    """
    try:
        rows = _SYSV_SHM.read_text(encoding="ascii").splitlines()
    except OSError:
        return 0
    header = rows[0].split() if rows else []
    removed = 0
    libc = ctypes.CDLL(None, use_errno=True)
    for row in rows[1:]:
        seg = dict(zip(header, row.split(), strict=False))
        if int(seg.get("cpid", -1)) in creators and seg.get("nattch") == "0":
            removed += 1 if libc.shmctl(int(seg["shmid"]), _IPC_RMID, None) == 0 else 0
    return removed
