"""``ProcessLauncher``: desktops the relay runs as processes on its host (``kind: virtual``).

A desktop is Xvfb, its session, x11vnc and websockify (``launch.py``), started by
``starter.py`` as the relay's desktop user in a cgroup of its own, ended whole by
``teardown.py``; its home follows its profile (``profiles.py``, ``homes.py``). Beyond the
lifecycle, this kind launches a profile's apps into a running desktop and keeps homes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import aiohttp

from relay.browser.pipe import HOLDER_NAME, spawn_with_devtools
from relay.desktops import cgroups
from relay.desktops.audio import audio_lost
from relay.desktops.config import DesktopSettings
from relay.desktops.credentials import RelayAuthority
from relay.desktops.homes import (
    Homes,
    open_append,
    remove_dirs,
    remove_stale_runtime_dirs,
    secure_state_dir,
)
from relay.desktops.launch import (
    A11Y_BUS_CHILD,
    AudioStarter,
    accessible_argv,
    base_env,
    missing_binaries,
)
from relay.desktops.launcher import Records, StartOptions, rebuilt
from relay.desktops.lifecycle import Desktops, OnChange
from relay.desktops.probe import ProbeResult, probe_chain, probe_session
from relay.desktops.process import ChildProcess
from relay.desktops.profiles import choose, load_profiles
from relay.desktops.slots import Slots
from relay.desktops.starter import Starter, beat
from relay.desktops.state import Desktop, StartingDesktop
from relay.desktops.teardown import Teardown
from relay.desktops.user import DesktopUser, directory_size
from relay.desktops.validation import StartRequest, check_slot, normalise_kind, parse_start
from relay.desktops.wake import WakeViewers
from wire.errors import ErrorCode, OpError
from wire.ids import DesktopSessionId
from wire.ops import (
    DesktopAppsResult,
    DesktopKind,
    DesktopLaunchResult,
    DesktopResetHomeResult,
    ProfileInfo,
)

logger = logging.getLogger(__name__)

KIND: Final = "virtual"


ProcessDesktops = Desktops[Desktop, StartingDesktop, "ProcessLauncher"]


def process_desktops(
    config: DesktopSettings | None = None,
    *,
    on_change: OnChange | None = None,
    audio: AudioStarter | None = None,
    audio_default: bool = False,
) -> ProcessDesktops:
    """The lifecycle of desktops of processes (its launcher: ``.launcher``)."""
    launcher = ProcessLauncher(
        config or DesktopSettings.from_env(), audio=audio, audio_default=audio_default
    )
    return launcher.lifecycle(on_change)


class ProcessLauncher:
    """Starts, checks and ends desktops of processes; launches apps into them."""

    kind: DesktopKind = KIND
    noun = "desktops"
    authority_source = KIND
    adopt_first = False

    def __init__(
        self,
        config: DesktopSettings,
        *,
        audio: AudioStarter | None = None,
        audio_default: bool = False,
    ) -> None:
        self.config = config
        self.state_file = config.state_file
        self.authority = RelayAuthority(config.authority_file)
        self.audio = audio
        # What a start that does not say ``audio`` gets (relay/desktops/audio.py: AudioMode).
        self._audio_default = audio_default and audio is not None
        secure_state_dir(config)
        self._homes = Homes(config)
        self._http: aiohttp.ClientSession | None = None
        # Sessions whose accessibility bus exited (said once each).
        self._a11y_lost: set[str] = set()
        self._next_home_check = 0.0
        self.profiles = load_profiles(config.profiles_dir)
        # The apps desktop_launch started in each live desktop, in order (what a snapshot
        # relaunches in its forks).
        self.launched: dict[str, list[str]] = {}
        self._wakes = WakeViewers()

    def lifecycle(self, on_change: OnChange | None = None) -> ProcessDesktops:
        """The lifecycle that runs this launcher's desktops."""
        return Desktops(self, on_change)

    def attach(self, slots: Slots[Desktop, StartingDesktop]) -> None:
        self.slots = slots
        self._teardown = Teardown(self.config, self.audio, slots)
        self._starter = Starter(self.config, slots, self._teardown, self._homes, lambda: self.http)

    # -- the lifecycle's part ---------------------------------------------------------------

    def check_kind(self, kind: str) -> None:
        normalise_kind(kind)

    def request(self, options: StartOptions) -> StartRequest:
        audio = self._audio_default if options.audio is None else options.audio
        profile = options.profile
        return parse_start(
            kind=KIND if options.kind is None else options.kind,
            slot=options.slot,
            geometry=options.geometry,
            depth=options.depth,
            audio=audio,
            started_by=options.started_by,
            apps=options.apps,
            default_apps=self.config.apps,
            allowed_apps=frozenset(self.config.allowed_apps),
            profile=profile if profile is not None else self.config.default_profile,
            persist_home=options.persist_home,
        )

    async def ready(self, req: StartRequest) -> None:
        if missing := missing_binaries(self.config):
            raise OpError(ErrorCode.UNAVAILABLE, f"missing: {', '.join(missing)}")
        choose(self.profiles, req.profile)

    async def launch(self, req: StartRequest, session_id: DesktopSessionId) -> Desktop:
        return await self._starter.launch(req, session_id, choose(self.profiles, req.profile))

    def dead(self, desktop: Desktop) -> str | None:
        dead = desktop.processes.dead_essentials()
        return f"process exited: {', '.join(dead)}" if dead else None

    async def health(self, desktop: Desktop, retry: bool = False) -> ProbeResult:
        """The chain: ``vnc.html``, then RFB through websockify."""
        timeout = self.config.probe_timeout_s
        result = await probe_chain(self.http, desktop.websockify_port, timeout)
        if not result.ok and retry and not desktop.processes.dead_essentials():
            # One immediate second look: a single slow answer must not kill a healthy desktop.
            result = await probe_chain(self.http, desktop.websockify_port, timeout)
        return result

    async def freeze(self, desktop: Desktop, frozen: bool) -> None:
        """The desktop's cgroup freezer: every process in it, however it was started."""
        cgroup = self._teardown.cgroup_of(desktop.desktop_session_id)
        if cgroup is None or not cgroup.is_dir():
            raise OpError(
                ErrorCode.UNAVAILABLE,
                "this relay cannot pause desktops: they have no cgroup of their own (the relay "
                "runs as root on a host with a writable cgroup2 hierarchy to give them one)",
            )
        session = desktop.desktop_session_id
        if frozen:  # its first viewer after the resume is served at once (relay/desktops/wake.py)
            await self._wakes.hold(session, desktop.vnc_port, desktop.vnc_secret)
        if not await asyncio.to_thread(cgroups.freeze, cgroup, frozen):
            if frozen:  # half frozen helps no one: back to running
                await asyncio.to_thread(cgroups.freeze, cgroup, False)
                await self._wakes.let_go(session)
            verb = "paused" if frozen else "resumed"
            raise OpError(ErrorCode.UNAVAILABLE, f"the desktop could not be {verb}")
        if not frozen:
            self._wakes.let_go_later(session)

    def cgroup(self, desktop_session_id: str) -> Path | None:
        """The cgroup of a desktop of this relay (None: the host gives desktops none)."""
        cgroup = self._teardown.cgroup_of(desktop_session_id)
        return cgroup if cgroup is not None and cgroup.is_dir() else None

    async def frozen(self, desktop: Desktop) -> bool:
        cgroup = self._teardown.cgroup_of(desktop.desktop_session_id)
        return cgroup is not None and await asyncio.to_thread(cgroups.is_frozen, cgroup)

    async def remove(self, desktop: Desktop) -> bool:
        self.launched.pop(desktop.desktop_session_id, None)
        await self._wakes.let_go(desktop.desktop_session_id)
        return await self._teardown.remove(desktop)

    async def recorded(self) -> Records[Desktop, StartingDesktop]:
        records, interrupted = await asyncio.to_thread(self.slots.state.load_all)
        keep = await self._lease_for_adoption(bool(records or interrupted))
        await asyncio.to_thread(beat, self.config)
        return Records(
            rebuilt(records, Desktop.from_record, "a desktop"),
            rebuilt(interrupted, StartingDesktop.from_record, "a desktop's start"),
            keep=keep and not self._homes.changed_user,
        )

    async def adoptable(self, desktop: Desktop) -> bool:
        # A desktop started without credentials is open to every local user: never kept.
        return desktop.credentials is not None

    def leftover(self, desktop: Desktop) -> StartingDesktop:
        return StartingDesktop.of(desktop)

    async def discard(self, leftover: StartingDesktop) -> bool:
        return await self._teardown.stop_leftover(leftover)

    async def sweep(self, kept: set[DesktopSessionId], left_any: bool) -> None:
        """Private, temporary, home and sound directories no desktop owns; whatever of a
        desktop not kept left its process groups (its cgroup)."""
        await asyncio.to_thread(remove_dirs, self.config.run_dir, kept)
        tmp_names = {DesktopSessionId(k[:12]) for k in kept}
        await asyncio.to_thread(remove_dirs, self._homes.tmp_root(), tmp_names)
        if (parent := self._teardown.cgroups()) is not None:
            await asyncio.to_thread(cgroups.kill_others, parent, set(kept))
        if left_any or self.slots.desktops:
            self._teardown.user = await self._homes.desktop_user()
            await asyncio.to_thread(remove_dirs, self._homes.root() / "sessions", kept)
            await self._teardown.sweep_user()
        if self.audio is not None:
            await asyncio.to_thread(remove_stale_runtime_dirs, self.audio.runtime_root)

    async def saving(self, busy: bool) -> None:
        return None

    async def beat(self, desktops: Sequence[Desktop]) -> None:
        await asyncio.to_thread(beat, self.config)

    def sound_lost(self, desktop: Desktop) -> bool:
        return audio_lost(desktop.processes)

    def failed_programs(self, desktop: Desktop) -> list[str]:
        return desktop.processes.failed_programs()

    async def silent(self, desktops: Sequence[Desktop]) -> list[Desktop]:
        return [d for d in desktops if audio_lost(d.processes)]

    async def review(self, desktops: Sequence[Desktop]) -> list[tuple[Desktop, str]]:
        self._note_a11y_bus_lost(desktops)
        return await self._check_homes(desktops)

    async def desktop_user(self) -> DesktopUser | None:
        """Who desktops run as (None: as the relay); leased on first use when root."""
        user = await self._homes.desktop_user()
        self._teardown.user = user
        return user

    async def close(self, left: bool) -> None:
        """The relay's end: its account, its (empty) cgroup and TMPDIR parent go back."""
        await self._wakes.close()
        self._homes.release()
        if (parent := self._teardown.cgroups()) is not None:
            cgroups.remove_if_empty(parent)
        with contextlib.suppress(OSError):
            self._homes.tmp_root().rmdir()
        if self._http is not None:
            await self._http.close()
            self._http = None

    # -- profiles, apps and homes -------------------------------------------------------------

    def vnc_secret(self, desktop_session_id: str) -> bytes | None:
        """The VNC secret of a live desktop (None: no such desktop), for whoever connects to
        its x11vnc on the relay's behalf (the relay's channels, a co-located server)."""
        desktop = self.slots.by_session(desktop_session_id)
        return desktop.vnc_secret if desktop is not None else None

    def profile_status(self) -> list[ProfileInfo]:
        """Every profile of this relay: available, or which programs it misses."""
        default = self.config.default_profile
        return [p.status(name == default) for name, p in sorted(self.profiles.items())]

    async def apps(self, desktop_session_id: str | None, slot: str) -> DesktopAppsResult:
        """The launchable apps of one running desktop's profile."""
        desktop = self._find(desktop_session_id, slot)
        profile = self.profiles.get(desktop.profile or "")
        launchable = [a.to_dict() for a in profile.apps] if profile is not None else []
        return {
            "desktop_session_id": desktop.desktop_session_id,
            "profile": desktop.profile,
            "launchable": launchable,
        }

    async def launch_app(
        self, desktop_session_id: str | None, slot: str, app: object
    ) -> DesktopLaunchResult:
        """Start one of the profile's launchable apps in a running desktop, as its session's
        user; it joins the desktop's processes and stops with it."""
        async with self.slots.lock:
            desktop = self._find(desktop_session_id, slot)
            profile = self.profiles.get(desktop.profile or "")
            if profile is None or desktop.home is None:
                raise OpError(ErrorCode.UNAVAILABLE, "this desktop has no profile to launch from")
            entry = profile.app(app)
            argv = accessible_argv(profile.expand(entry.exec, Path(desktop.home)))
            user = await self.desktop_user()
            log = open_append(self.config.log_dir / f"{desktop.kind}-{desktop.slot}.log")
            try:
                child = spawn_with_devtools(
                    argv,
                    lambda words, fds: ChildProcess.spawn(
                        f"app:{entry.id}",
                        words,
                        env=desktop.session_env | dict(entry.env),
                        essential=False,
                        pass_fds=fds,
                        output=log,
                        user=user,
                        held=True,
                    ),
                    lambda words, fds: self._join(
                        desktop,
                        ChildProcess.spawn(
                            HOLDER_NAME,
                            words,
                            env=base_env(),
                            essential=False,
                            pass_fds=fds,
                            output=log,
                            held=True,
                        ),
                    ),
                    self.config.state_dir,
                )
            except OSError as err:
                raise OpError(ErrorCode.START_FAILED, f"{entry.id} did not start: {err}") from err
            finally:
                log.close()
            self._join(desktop, child)
            self.launched.setdefault(desktop.desktop_session_id, []).append(entry.id)
            await self.slots.save()
        logger.info("launched %s in desktop slot=%s", entry.id, desktop.slot)
        return {
            "desktop_session_id": desktop.desktop_session_id,
            "app": entry.id,
            "launched": True,
            "pid": child.pid,
            "accessible": entry.accessible,
        }

    async def add_process(self, desktop_session_id: str, child: ChildProcess) -> bool:
        """Join a process started later (the accessibility worker) to a live desktop's: it
        stops with the desktop and is recorded like the others. False: no such desktop."""
        async with self.slots.lock:
            desktop = self.slots.by_session(desktop_session_id)
            if desktop is None:
                return False
            self._join(desktop, child)
            await self.slots.save()
        return True

    async def enter_cgroup(self, desktop_session_id: str, pid: int) -> bool:
        """Move a process the relay started for a live desktop (its audio capture, run as the
        desktop's user) into the desktop's cgroup, without recording it; False: no such
        desktop, or the move failed. True where the host gives desktops no cgroup."""
        async with self.slots.lock:
            if self.slots.by_session(desktop_session_id) is None:
                return False
            cgroup = self._teardown.cgroup_of(desktop_session_id)
            return cgroup is None or not cgroup.is_dir() or cgroups.enter(cgroup, pid)

    async def reset_home(self, slot: str) -> DesktopResetHomeResult:
        """Wipe the kept home of a slot; refused while a desktop runs there."""
        slot = check_slot(slot)
        async with self.slots.lock:
            if (running := self.slots.desktops.get(slot)) is not None:
                raise OpError(
                    ErrorCode.BUSY,
                    "a desktop runs in this slot; stop it before resetting its home",
                    {"current_session_id": running.desktop_session_id},
                )
            await self.desktop_user()
            home = self._homes.home_of(KIND, slot, "", persist=True)
            existed = home.is_dir()
            await self._teardown.sweep_user()
            await asyncio.to_thread(shutil.rmtree, home, True)
        logger.info("kept home of slot=%s reset (existed: %s)", slot, existed)
        return {"kind": KIND, "slot": slot, "reset": True, "existed": existed}

    # -- internals ----------------------------------------------------------------------

    @property
    def http(self) -> aiohttp.ClientSession:
        self._http = probe_session(self._http)
        return self._http

    def _find(self, desktop_session_id: str | None, slot: str) -> Desktop:
        desktop = (
            self.slots.desktops.get(slot)
            if desktop_session_id is None
            else self.slots.by_session(desktop_session_id)
        )
        if desktop is None:
            raise OpError(ErrorCode.NOT_RUNNING, "no running desktop there; start one first")
        return desktop

    def _join(self, desktop: Desktop, child: ChildProcess) -> None:
        """A later child joins the desktop's processes and its cgroup (a held one before its
        program starts)."""
        self._teardown.join_cgroup(desktop.desktop_session_id, child)
        desktop.processes.add(child)

    async def _lease_for_adoption(self, recorded: bool) -> bool:
        """A relay that names its desktop user holds it from its start (refused while another
        relay holds it); one whose earlier run left desktops leases the account they run as.
        False: no pool account could be had, so recorded desktops cannot be kept."""
        if not (self.config.desktop_user or recorded):
            return True
        try:
            self._teardown.user = await self._homes.desktop_user()
        except OpError as err:
            if self.config.desktop_user:
                raise
            logger.error("recorded desktops are not re-adopted: %s", err.message)
            return False
        return True

    def _session_size(self, home: Path, desktop_session_id: str) -> int:
        """Bytes of a session's home and TMPDIR (blocking)."""
        return directory_size(home) + directory_size(self._homes.tmp_of(desktop_session_id))

    async def _check_homes(self, desktops: Sequence[Desktop]) -> list[tuple[Desktop, str]]:
        """Every ``home_check_interval_s``: a desktop whose home (its TMPDIR inside) grew past
        ``home_max_mb`` is stopped, with the reason in its ``failed`` event."""
        now = time.monotonic()
        if now < self._next_home_check:
            return []
        self._next_home_check = now + self.config.home_check_interval_s
        with_home = [d for d in desktops if d.home]
        sizes = await asyncio.gather(
            *(
                asyncio.to_thread(self._session_size, Path(d.home or ""), d.desktop_session_id)
                for d in with_home
            )
        )
        return [
            (d, error.message)
            for d, size in zip(with_home, sizes, strict=True)
            if (error := self._homes.over_limit(size, d.slot)) is not None
        ]

    def _note_a11y_bus_lost(self, desktops: Sequence[Desktop]) -> None:
        """Watchdog: a desktop whose accessibility bus launcher exited keeps running; the
        session's D-Bus starts the bus again on the next accessibility call (activation), and
        until then the tools answer ``a11y_unavailable``. Said once per desktop."""
        for desktop in desktops:
            child = desktop.processes.find(A11Y_BUS_CHILD)
            if child is None or desktop.desktop_session_id in self._a11y_lost:
                continue
            if not child.is_alive():
                self._a11y_lost.add(desktop.desktop_session_id)
                logger.warning(
                    "desktop slot=%s: its accessibility bus exited (code %s); the desktop "
                    "keeps running, the bus is started again on the next accessibility call",
                    desktop.slot,
                    child.returncode(),
                )
