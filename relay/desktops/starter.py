"""``Starter``: one desktop of processes started under the lifecycle lock, from its orphan
guard to the desktop, recorded child by child so a relay killed mid-start leaves every process
in the state file; and the relay's heartbeat that keeps the guards waiting."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp

from relay.desktops import cgroups
from relay.desktops.audio import audio_outcome
from relay.desktops.config import DesktopSettings
from relay.desktops.credentials import PRIVATE_FILE_MODE
from relay.desktops.guard import GuardArgs
from relay.desktops.homes import Homes, open_truncated
from relay.desktops.launch import LaunchedDesktop, ProcessStart, SessionSetup
from relay.desktops.process import ChildProcess, DesktopProcesses, run_to_completion
from relay.desktops.profiles import Profile
from relay.desktops.slots import Slots, now_iso
from relay.desktops.state import Desktop, StartingDesktop
from relay.desktops.teardown import Teardown
from relay.desktops.validation import StartRequest
from wire.ids import DesktopSessionId

logger = logging.getLogger(__name__)

GUARD = "guard"


def beat(config: DesktopSettings) -> None:
    """Tell the desktops' orphan guards this relay is alive (blocking)."""
    path = config.heartbeat_file
    try:
        path.touch(mode=PRIVATE_FILE_MODE)
        os.utime(path)
    except OSError as err:
        logger.error("cannot touch the relay heartbeat file: %s", type(err).__name__)


class Starter:
    """Starts desktops, recording each start in the :class:`Slots` (the caller holds the
    lock; the lifecycle adds the desktop to the slots once it runs)."""

    def __init__(
        self,
        config: DesktopSettings,
        slots: Slots[Desktop, StartingDesktop],
        teardown: Teardown,
        homes: Homes,
        http: Callable[[], aiohttp.ClientSession],
    ) -> None:
        self.config = config
        self._slots = slots
        self._teardown = teardown
        self._homes = homes
        self._http = http

    async def launch(
        self, req: StartRequest, session_id: DesktopSessionId, profile: Profile
    ) -> Desktop:
        """Start one desktop in the request's slot."""
        slots, teardown = self._slots, self._teardown
        launcher = ProcessStart(self.config, self._http(), teardown.audio)
        private = self.config.run_dir / session_id
        procs = DesktopProcesses(on_add=lambda child: self._record(session_id, child))
        slots.starting[session_id] = StartingDesktop(session_id, req.kind, req.slot, procs)
        try:
            await asyncio.to_thread(beat, self.config)
            # Steps that make files finish even when the start is cancelled meanwhile, so
            # that _abandon finds and removes what they made.
            home, user, tmp = await run_to_completion(self._homes.prepare(req, session_id))
            teardown.user = user
            await asyncio.to_thread(self._make_cgroup, session_id)
            session = SessionSetup(profile, home, user, tmp)
            self._spawn_guard(req, session_id, procs)
            launched = await launcher.launch(
                req,
                f"{req.kind}-{req.slot}",
                private,
                procs,
                session,
                on_display=lambda display: self._record_display(session_id, display),
            )
        except BaseException:
            own_home = (
                None
                if req.persist_home
                else self._homes.home_of(req.kind, req.slot, session_id, persist=False)
            )
            await run_to_completion(self._abandon(session_id, private, own_home))
            await asyncio.to_thread(shutil.rmtree, self._homes.tmp_of(session_id), True)
            raise
        desktop = self._desktop_from(req, session_id, launched)
        desktop.profile, desktop.persist_home = profile.name, req.persist_home
        desktop.home = str(session.home)
        desktop.session_env = launched.session_env
        logger.info(
            "desktop started kind=%s slot=%s display=:%d", req.kind, req.slot, launched.display
        )
        return desktop

    def _record(self, session_id: DesktopSessionId, child: ChildProcess) -> None:
        """Record a new child, then move it into the desktop's cgroup (it is held until
        both are done; the orphan guard stays out, so it can kill the cgroup whole)."""
        logger.debug("recording %s pid=%d of a starting desktop", child.name, child.pid)
        self._slots.write_now()
        if child.name != GUARD:
            self._teardown.join_cgroup(session_id, child)

    def _record_display(self, session_id: DesktopSessionId, display: int) -> None:
        """Record a start's display number, before it makes the display's sound directory
        (blocking, as :meth:`_record`)."""
        starting = self._slots.starting.get(session_id)
        if starting is not None:
            starting.display = display
            self._slots.write_now()

    def _make_cgroup(self, session_id: DesktopSessionId) -> None:
        if (parent := self._teardown.cgroups()) is not None:
            cgroups.create(parent, session_id)

    async def _abandon(
        self, session_id: DesktopSessionId, private: Path, home: Path | None
    ) -> None:
        """A start failed or was cancelled: stop what it spawned (the lifecycle forgets its
        record)."""
        starting = self._slots.starting.get(session_id)
        if starting is not None:
            await self._teardown.stop_leftover(starting)
        await asyncio.to_thread(shutil.rmtree, private, True)
        if home is not None:
            await asyncio.to_thread(shutil.rmtree, home, True)

    def _spawn_guard(
        self, req: StartRequest, session_id: DesktopSessionId, procs: DesktopProcesses
    ) -> None:
        """The desktop's orphan guard (relay/desktops/guard.py), its first child."""
        if self.config.orphan_timeout_s <= 0:
            return
        audio = self._teardown.audio
        args = GuardArgs(
            session_id,
            self.config.state_file,
            self.config.heartbeat_file,
            self.config.orphan_timeout_s,
            self.config.run_dir / session_id,
            audio.runtime_root if audio is not None else None,
            self._teardown.cgroup_of(session_id),
            self._homes.tmp_of(session_id),
        )
        argv = [sys.executable, "-m", "relay.desktops.guard", *args.argv()]
        log = open_truncated(self.config.log_dir / f"{req.kind}-{req.slot}.guard.log")
        try:
            procs.add(
                ChildProcess.spawn(
                    GUARD, argv, env=_guard_env(), essential=False, output=log, held=True
                )
            )
        except OSError as err:
            logger.warning("desktop %s runs without an orphan guard: %s", req.slot, err)
        finally:
            log.close()

    def _desktop_from(
        self, req: StartRequest, session_id: DesktopSessionId, launched: LaunchedDesktop
    ) -> Desktop:
        # No sound server is no reason to refuse a desktop: the row says why it is silent.
        has_audio = self._teardown.audio is not None
        audio_reason = audio_outcome(req.audio, has_audio, launched.extra_env)
        return Desktop(
            desktop_session_id=session_id,
            kind="virtual",
            slot=req.slot,
            geometry=req.geometry,
            depth=req.depth,
            display=launched.display,
            started_at=now_iso(),
            started_by=req.started_by,
            websockify_port=launched.websockify_port,
            vnc_port=launched.vnc_port,
            audio=audio_reason is None,
            processes=launched.processes,
            dbus_address=launched.dbus_address,
            audio_reason=audio_reason,
            credentials=launched.credentials,
        )


def _guard_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "PYTHONPATH", "TZ")}
