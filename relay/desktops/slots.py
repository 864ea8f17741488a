"""``Slots``: one relay's desktops by (kind, slot), its starts in progress, the lifecycle lock
that serialises every change of them, and the files that record them.

Every method that changes the table expects the caller to hold :attr:`Slots.lock`
(docs/desktops.md, "Lifecycle lock and compare-and-stop").
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from relay.desktops import cgroups, leases
from relay.desktops.audio import PROCESS_NAME as PULSEAUDIO
from relay.desktops.audio import runtime_dir
from relay.desktops.config import DesktopConfig
from relay.desktops.credentials import RelayAuthority
from relay.desktops.displays import x_display_alive
from relay.desktops.launch import AudioStarter
from relay.desktops.leases import relay_key
from relay.desktops.process import ChildProcess, run_to_completion
from relay.desktops.state import Desktop, StartingDesktop, StateFile
from relay.desktops.user import (
    DesktopUser,
    hand_home_to_root,
    kill_all_processes_of,
    session_tmp,
)
from wire.ids import DesktopSessionId

logger = logging.getLogger(__name__)

Event = dict[str, Any]
SlotKey = tuple[str, str]


def now_iso() -> str:
    """The current UTC time as rows carry it (milliseconds, ``Z``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def failed_event(desktop: Desktop, reason: str) -> Event:
    """The event that tells the server a desktop failed."""
    return desktop.to_row() | {"state": "failed", "reason": reason, "updated_at": now_iso()}


class Slots:
    """The desktops of one relay, the lock over them and their state and authority files."""

    def __init__(self, config: DesktopConfig, audio: AudioStarter | None) -> None:
        self.config = config
        self.audio = audio
        self.desktops: dict[SlotKey, Desktop] = {}
        # Starts in progress, recorded in the state file child by child.
        self.starting: dict[DesktopSessionId, StartingDesktop] = {}
        self.lock = asyncio.Lock()
        self.state = StateFile(config.state_file)
        self.authority = RelayAuthority(config.authority_file)
        # The account desktops run as (set once the relay leased it; None: as the relay).
        self.user: DesktopUser | None = None
        self._cgroups: Path | None = None
        self._cgroups_resolved = False

    def cgroups(self) -> Path | None:
        """The parent of this relay's desktop cgroups (None: the host gives none;
        relay/desktops/cgroups.py)."""
        if not self._cgroups_resolved:
            self._cgroups = cgroups.relay_cgroups(relay_key(self.config.state_dir))
            self._cgroups_resolved = True
        return self._cgroups

    def tmp_of(self, desktop_session_id: str) -> Path:
        """The TMPDIR of a desktop's session (relay/desktops/homes.py)."""
        return session_tmp(relay_key(self.config.state_dir), desktop_session_id)

    def cgroup_of(self, desktop_session_id: str) -> Path | None:
        parent = self.cgroups()
        return parent / desktop_session_id if parent is not None else None

    def join_cgroup(self, desktop_session_id: str, child: ChildProcess) -> None:
        """Move a desktop's child into the desktop's cgroup (before a held child may start)."""
        cgroup = self.cgroup_of(desktop_session_id)
        if cgroup is not None and cgroup.is_dir():
            cgroups.enter(cgroup, child.pid)

    async def kill_cgroup(self, desktop_session_id: str) -> bool:
        """Kill whatever is left in the desktop's cgroup and remove it (True: nothing left)."""
        cgroup = self.cgroup_of(desktop_session_id)
        return cgroup is None or await asyncio.to_thread(cgroups.kill, cgroup)

    async def sweep_user(self, leaving: DesktopSessionId | None = None) -> None:
        """Once no desktop of this relay runs or starts (but ``leaving``), kill every process
        of its desktop user: nothing of a desktop outlives the last one (caller holds the
        lock; the account is this relay's alone)."""
        if self.user is None or self.desktops or leases.busy(self.user.name):
            return
        if any(session_id != leaving for session_id in self.starting):
            return
        await asyncio.to_thread(kill_all_processes_of, self.user)

    def sorted(self) -> list[Desktop]:
        """The live desktops in (kind, slot) order."""
        return [self.desktops[k] for k in sorted(self.desktops)]

    def by_session(self, desktop_session_id: str) -> Desktop | None:
        """The live desktop of ``desktop_session_id`` (None: no such desktop)."""
        return next((d for d in self.desktops.values()
                     if d.desktop_session_id == desktop_session_id), None)  # fmt: skip

    def record_spawn(self, child: ChildProcess) -> None:
        """Write the state file at once, before the start spawns anything else (blocking, on
        purpose: a relay killed in the next instant must still find this child)."""
        logger.debug("recording %s pid=%d of a starting desktop", child.name, child.pid)
        self._write_now()

    def record_display(self, session_id: DesktopSessionId, display: int) -> None:
        """Record a start's display number, before it makes the display's sound directory
        (blocking, as :meth:`record_spawn`)."""
        starting = self.starting.get(session_id)
        if starting is not None:
            starting.display = display
            self._write_now()

    def _write_now(self) -> None:
        try:
            self.state.save(self.sorted(), list(self.starting.values()))
        except OSError as err:
            logger.error("cannot write desktop state file: %s", type(err).__name__)

    async def save(self) -> None:
        """The state file and the relay's authority file, after every change of desktops."""
        desktops = self.sorted()
        cookies = [(d.display, d.credentials.x_cookie) for d in desktops if d.credentials]
        starting = list(self.starting.values())
        try:
            await asyncio.to_thread(self.state.save, desktops, starting)
        except OSError as err:
            # Desktops keep running; only re-adoption after a restart is at risk.
            logger.error("cannot write desktop state file: %s", type(err).__name__)
        try:
            await asyncio.to_thread(self.authority.write, cookies)
        except OSError as err:
            # The desktops run; the relay's own screen actions on a new one would be refused.
            logger.error("cannot write the relay's X authority file: %s", type(err).__name__)

    async def remove(self, desktop: Desktop, reason: str, save: bool = True) -> None:
        """Forget the desktop and stop its whole process set (caller holds the lock). Once
        begun it runs to its end, even when the caller is cancelled (``run_to_completion``)."""
        await run_to_completion(self._remove(desktop, reason, save))

    async def _remove(self, desktop: Desktop, reason: str, save: bool) -> None:
        self.desktops.pop(desktop.key, None)
        desktop.state = "stopping"
        clean = await self.stop_processes(desktop)
        clean = await self.kill_cgroup(desktop.desktop_session_id) and clean
        await self.sweep_user()
        private = self.config.run_dir / desktop.desktop_session_id
        await asyncio.to_thread(shutil.rmtree, private, True)
        await asyncio.to_thread(shutil.rmtree, self.tmp_of(desktop.desktop_session_id), True)
        if desktop.home is not None and not desktop.persist_home:
            await asyncio.to_thread(shutil.rmtree, desktop.home, True)
        elif desktop.home is not None and self.user is not None:
            # Out of every desktop's reach until a desktop of this slot starts again.
            await asyncio.to_thread(hand_home_to_root, Path(desktop.home))
        desktop.state = "stopped" if reason == "stopped" else "failed"
        log = logger.info if reason in ("stopped", "relay closing") else logger.warning
        log(
            "desktop %s kind=%s slot=%s: %s%s",
            desktop.state, desktop.kind, desktop.slot, reason,
            "" if clean else " (some processes remain)",
        )  # fmt: skip
        if save:
            await self.save()

    async def stop_processes(self, desktop: Desktop) -> bool:
        """Stop a desktop's groups; its sound directory goes first, while the desktop still
        holds its display number (afterwards another desktop may take number and directory)."""
        if self.audio is not None and desktop.processes.find(PULSEAUDIO) is not None:
            directory = runtime_dir(desktop.display, self.audio.runtime_root)
            await asyncio.to_thread(shutil.rmtree, directory, True)
        return await desktop.processes.stop(self.config.stop_grace_s)

    async def stop_leftover(self, starting: StartingDesktop) -> bool:
        """Stop what a start that did not finish spawned, or a recorded desktop that is not
        re-adopted, to its end. Its sound directory goes first, when its display is known and
        not another X server's: the start may have made it before it recorded PulseAudio."""
        return await run_to_completion(self._stop_leftover(starting))

    async def _stop_leftover(self, starting: StartingDesktop) -> bool:
        display = starting.display
        if self.audio is not None and display is not None:
            xvfb = starting.processes.find("Xvfb")
            ours = xvfb is not None and xvfb.is_alive()
            if ours or not await asyncio.to_thread(x_display_alive, display):
                directory = runtime_dir(display, self.audio.runtime_root)
                await asyncio.to_thread(shutil.rmtree, directory, True)
        clean = await starting.processes.stop(self.config.stop_grace_s)
        clean = await self.kill_cgroup(starting.desktop_session_id) and clean
        await self.sweep_user(leaving=starting.desktop_session_id)
        await asyncio.to_thread(shutil.rmtree, self.tmp_of(starting.desktop_session_id), True)
        return clean
