"""``DesktopSession``: what a desktop tool needs of one running virtual desktop — its display,
its user, the environment its apps get — and a way to join the processes it starts to the
desktop's, so they stop with it (docs/desktop-tools.md)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from relay.backend import DesktopBackend
from relay.desktops.backend import VirtualBackend
from relay.desktops.process import ChildProcess, DesktopProcesses, pid_create_time
from relay.desktops.user import DesktopUser
from wire.errors import ErrorCode, OpError
from wire.ops import RelayRow

VIRTUAL_ONLY: Final = (
    "{kind} desktops have no window, clipboard, shell or file tools: they work in the relay's "
    "virtual desktops"
)


@dataclass(frozen=True)
class DesktopSession:
    """One running virtual desktop, as its tools see it."""

    desktop_session_id: str
    display: str
    env: Mapping[str, str]
    user: DesktopUser | None
    processes: DesktopProcesses = field(repr=False)
    join: Callable[[str, ChildProcess], Awaitable[bool]] = field(repr=False)

    @property
    def home(self) -> Path:
        """Where relative paths resolve: the session's ``HOME``."""
        home = self.env.get("HOME") or (str(self.user.home) if self.user else "/")
        return Path(home)

    @property
    def user_name(self) -> str | None:
        return self.user.name if self.user is not None else self.env.get("USER")

    async def track(self, name: str, pid: int) -> ChildProcess:
        """Join the process group ``pid`` leads to the desktop's processes: it stops with the
        desktop, and a relay restart finds it in the state file. A desktop gone meanwhile
        kills the group and answers ``not_running``."""
        child = ChildProcess.adopt(name, pid, pid_create_time(pid) or 0.0, False, signal.SIGKILL)
        if not await self.join(self.desktop_session_id, child):
            child.kill()
            raise OpError(ErrorCode.NOT_RUNNING, "the desktop stopped")
        return child

    def forget(self, child: ChildProcess) -> None:
        """Drop a tracked group once nothing of it is left (a shell's background jobs keep it
        tracked until they end or the desktop stops)."""
        if child.group_gone():
            self.drop(child)

    def drop(self, child: ChildProcess) -> None:
        """No longer track ``child`` (recorded again at the desktop's next save)."""
        with contextlib.suppress(ValueError):
            self.processes.children.remove(child)

    def forget_gone(self, name: str) -> None:
        """Drop every tracked group called ``name`` that has ended."""
        for child in [c for c in self.processes.children if c.name == name]:
            self.forget(child)


async def session_of(backend: DesktopBackend, row: RelayRow) -> DesktopSession:
    """The session of a running desktop of ``backend``; ``unavailable`` for a kind that has
    no tools (the host's real screen), ``not_running`` when it has stopped."""
    if not isinstance(backend, VirtualBackend):
        raise OpError(ErrorCode.UNAVAILABLE, VIRTUAL_ONLY.format(kind=backend.kind))
    desktops = backend.desktops
    desktop = desktops.live(row["desktop_session_id"])
    if desktop is None:
        raise OpError(ErrorCode.NOT_RUNNING, "the desktop stopped")
    display = f":{desktop.display}"
    env = dict(desktop.session_env)
    env.setdefault("DISPLAY", display)
    return DesktopSession(
        desktop.desktop_session_id,
        display,
        env,
        await desktops.desktop_user(),
        desktop.processes,
        desktops.launcher.add_process,
    )
