"""``Teardown``: how a desktop of processes ends, whole. Its process groups, its cgroup, its
private, temporary and (unless kept) home directories, its sound directory, and, once no
desktop of the relay runs or starts, every process left of its desktop user.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from relay.desktops import cgroups, leases
from relay.desktops.audio import PROCESS_NAME as PULSEAUDIO
from relay.desktops.audio import runtime_dir
from relay.desktops.config import DesktopSettings
from relay.desktops.displays import x_display_alive
from relay.desktops.launch import AudioStarter
from relay.desktops.leases import relay_key
from relay.desktops.process import ChildProcess
from relay.desktops.slots import Slots
from relay.desktops.state import Desktop, StartingDesktop
from relay.desktops.user import DesktopUser, hand_home_to_root, kill_all_processes_of, session_tmp
from wire.ids import DesktopSessionId


class Teardown:
    """Cgroups, temporary directories and the desktop user's sweep of one relay's desktops."""

    def __init__(
        self,
        config: DesktopSettings,
        audio: AudioStarter | None,
        slots: Slots[Desktop, StartingDesktop],
    ) -> None:
        self.config = config
        self.audio = audio
        self.slots = slots
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

    async def thaw(self, desktop_session_id: str) -> None:
        """Thaw the desktop's cgroup if it was left frozen (a paused desktop an earlier relay
        left), so its processes can act on the stop's SIGTERM."""
        cgroup = self.cgroup_of(desktop_session_id)
        if cgroup is not None and await asyncio.to_thread(cgroups.is_frozen, cgroup):
            await asyncio.to_thread(cgroups.freeze, cgroup, False)

    async def kill_cgroup(self, desktop_session_id: str) -> bool:
        """Kill whatever is left in the desktop's cgroup and remove it (True: nothing left)."""
        cgroup = self.cgroup_of(desktop_session_id)
        return cgroup is None or await asyncio.to_thread(cgroups.kill, cgroup)

    async def sweep_user(self, leaving: DesktopSessionId | None = None) -> None:
        """Once no desktop of this relay runs or starts (but ``leaving``), kill every process
        of its desktop user: nothing of a desktop outlives the last one (caller holds the
        lock; the account is this relay's alone)."""
        if self.user is None or self.slots.others(leaving) or leases.busy(self.user.name):
            return
        await asyncio.to_thread(kill_all_processes_of, self.user)

    async def remove(self, desktop: Desktop) -> bool:
        """Stop a desktop that is no longer in the slots and remove its files (caller holds the
        lock); whether none of its processes remains."""
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
        return clean

    async def stop_processes(self, desktop: Desktop) -> bool:
        """Stop a desktop's groups; its sound directory goes first, while the desktop still
        holds its display number (afterwards another desktop may take number and directory)."""
        if self.audio is not None and desktop.processes.find(PULSEAUDIO) is not None:
            directory = runtime_dir(desktop.display, self.audio.runtime_root)
            await asyncio.to_thread(shutil.rmtree, directory, True)
        return await desktop.processes.stop(self.config.stop_grace_s)

    async def stop_leftover(self, starting: StartingDesktop) -> bool:
        """Stop what a start that did not finish spawned, or a recorded desktop that is not
        re-adopted. Its sound directory goes first, when its display is known and not another
        X server's: the start may have made it before it recorded PulseAudio."""
        display = starting.display
        if self.audio is not None and display is not None:
            xvfb = starting.processes.find("Xvfb")
            ours = xvfb is not None and xvfb.is_alive()
            if ours or not await asyncio.to_thread(x_display_alive, display):
                directory = runtime_dir(display, self.audio.runtime_root)
                await asyncio.to_thread(shutil.rmtree, directory, True)
        await self.thaw(starting.desktop_session_id)
        clean = await starting.processes.stop(self.config.stop_grace_s)
        clean = await self.kill_cgroup(starting.desktop_session_id) and clean
        await self.sweep_user(leaving=starting.desktop_session_id)
        await asyncio.to_thread(shutil.rmtree, self.tmp_of(starting.desktop_session_id), True)
        return clean
