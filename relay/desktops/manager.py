"""``DesktopManager``: the relay's virtual desktops, one per (kind, slot).

Start, status, the watchdog's teardown and compare-and-stop all run under one lock, so the
session-id comparison and the stop it guards are atomic against a racing restart of the slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import aiohttp

from relay.desktops import cgroups
from relay.desktops.adoption import adopt_recorded, clean_up
from relay.desktops.audio import REASON_FAILED, audio_lost
from relay.desktops.config import DesktopConfig
from relay.desktops.homes import Homes, open_append, secure_state_dir
from relay.desktops.launch import (
    A11Y_BUS_CHILD,
    AudioStarter,
    accessible_argv,
    missing_binaries,
)
from relay.desktops.probe import ProbeResult, probe_chain
from relay.desktops.process import ChildProcess
from relay.desktops.profiles import Profile, choose, load_profiles
from relay.desktops.slots import Event, Slots, failed_event, now_iso
from relay.desktops.starter import Starter, beat
from relay.desktops.state import Desktop
from relay.desktops.user import DesktopUser, directory_size
from relay.desktops.validation import (
    StartRequest,
    check_session_id,
    check_slot,
    normalise_kind,
    parse_start,
)
from relay.desktops.watchdog import ProbeStrikes, Watchdog
from wire.errors import ErrorCode, OpError

logger = logging.getLogger(__name__)

OnChange = Callable[[dict[str, Any]], Awaitable[None]]


class DesktopManager:
    """Starts, watches, stops and re-adopts the relay's virtual desktops."""

    def __init__(
        self,
        config: DesktopConfig | None = None,
        *,
        on_change: OnChange | None = None,
        audio: AudioStarter | None = None,
        audio_default: bool = False,
    ) -> None:
        self.config = config or DesktopConfig.from_env()
        self.on_change = on_change
        self._audio = audio
        # What a start that does not say ``audio`` gets (relay/desktops/audio.py: AudioMode).
        self._audio_default = audio_default and audio is not None
        secure_state_dir(self.config)
        # The one lifecycle lock, and the table it guards: docs/desktops.md.
        self._slots = Slots(self.config, audio)
        self._lock = self._slots.lock
        # Sessions whose accessibility bus exited (said once each).
        self._a11y_lost: set[str] = set()
        self._desktops = self._slots.desktops
        self.authority = self._slots.authority
        self._homes = Homes(self.config)
        self._starter = Starter(self._slots, self._homes, lambda: self.http)
        self._http: aiohttp.ClientSession | None = None
        self._watchdog = Watchdog(self.check_all, self.config.watchdog_interval_s)
        self._strikes = ProbeStrikes(self.config.probe_failures)
        self._cleanup: asyncio.Task[None] | None = None  # adopt_from_state(clean_up_later=True)
        self._next_home_check = 0.0
        self.profiles = load_profiles(self.config.profiles_dir)

    # -- public operations --------------------------------------------------------------

    async def start(
        self,
        *,
        kind: str = "virtual",
        slot: str = "main",
        geometry: str = "1280x800",
        depth: int = 24,
        audio: bool | None = None,
        started_by: str | None = None,
        apps: list[str] | None = None,
        profile: str | None = None,
        persist_home: bool = False,
    ) -> dict[str, Any]:
        """Start a desktop in the slot, or return the one already running there."""
        audio = self._audio_default if audio is None else audio
        req = parse_start(
            kind=kind, slot=slot, geometry=geometry, depth=depth, audio=audio,
            started_by=started_by, apps=apps, default_apps=self.config.apps,
            allowed_apps=frozenset(self.config.allowed_apps),
            profile=profile if profile is not None else self.config.default_profile,
            persist_home=persist_home,
        )  # fmt: skip
        events: list[Event] = []
        try:
            async with self._lock:
                running = await self._running_in(req.kind, req.slot, events)
                if running is not None:
                    return running.to_row() | {"already_running": True}
                chosen = self._check_can_start(req)
                desktop = await self._starter.launch(req, chosen)
                return desktop.to_row() | {"already_running": False}
        finally:
            await self._emit(events)

    async def status(self) -> list[dict[str, Any]]:
        """Rows of the live desktops; ones whose essential processes died are failed first.

        Reads without the lifecycle lock while every desktop runs: a start of another slot
        (seconds) is not waited for, since it is no desktop until it returns. Failing a dead
        desktop takes the lock (docs/desktops.md, "Lifecycle lock and compare-and-stop")."""
        events: list[Event] = []
        try:
            if any(d.processes.dead_essentials() for d in self._desktops.values()):
                async with self._lock:
                    for desktop in list(self._desktops.values()):
                        await self._running_in(desktop.kind, desktop.slot, events)
            for desktop in self._sorted():
                self._note_audio_lost(desktop, events)
            return [d.to_row() for d in self._sorted()]
        finally:
            await self._emit(events)

    async def running(
        self, desktop_session_id: str | None, default: tuple[str, str]
    ) -> dict[str, Any] | None:
        """The row of one live desktop: ``desktop_session_id``'s, or the ``default`` (kind,
        slot)'s when None. Only its processes are checked (a dead one is failed here, as in
        :meth:`status`): an action on one desktop does not poll every other desktop's, nor
        wait for a start in another slot; one asking for the slot or session being started
        waits for that start."""
        events: list[Event] = []
        try:
            desktop = self._lookup(desktop_session_id, default)
            if desktop is None and not self._starting(desktop_session_id, default):
                return None
            if desktop is None or desktop.processes.dead_essentials():
                async with self._lock:
                    desktop = self._lookup(desktop_session_id, default)
                    if desktop is None or not await self._running_in(*desktop.key, events):
                        return None
            self._note_audio_lost(desktop, events)
            return desktop.to_row()
        finally:
            await self._emit(events)

    def _lookup(self, desktop_session_id: str | None, default: tuple[str, str]) -> Desktop | None:
        """``desktop_session_id``'s desktop, or the ``default`` slot's when None."""
        if desktop_session_id is None:
            return self._desktops.get(default)
        return self.live(desktop_session_id)

    def _starting(self, desktop_session_id: str | None, default: tuple[str, str]) -> bool:
        """Whether a start in progress may yet produce the desktop asked for."""
        return any(
            s.desktop_session_id == desktop_session_id
            if desktop_session_id is not None else (s.kind, s.slot) == default
            for s in self._slots.starting.values()
        )  # fmt: skip

    def live(self, desktop_session_id: str) -> Desktop | None:
        """One of this relay's desktops, looked up without the lock (a desktop being stopped
        is forgotten first, so this does not wait for its stop)."""
        return next((d for d in self._desktops.values()
                     if d.desktop_session_id == desktop_session_id), None)  # fmt: skip

    def holds(self, desktop_session_id: str) -> bool:
        """Whether ``desktop_session_id`` is one of this relay's desktops (without the lock)."""
        return self.live(desktop_session_id) is not None

    def vnc_secret(self, desktop_session_id: str) -> bytes | None:
        """The VNC secret of a live desktop (None: no such desktop), for whoever connects to
        its x11vnc on the relay's behalf (the relay's channels, a co-located server)."""
        desktop = self.live(desktop_session_id)
        return desktop.vnc_secret if desktop is not None else None

    def displays(self) -> set[str]:
        """The displays of the desktops this relay runs (as rows name them, ``:N``)."""
        return {f":{desktop.display}" for desktop in self._desktops.values()}

    async def stop(self, *, kind: str, slot: str, desktop_session_id: str) -> dict[str, Any]:
        """Compare-and-stop: stop the slot only if it still holds ``desktop_session_id``."""
        key = (normalise_kind(kind), check_slot(slot))
        session_id = check_session_id(desktop_session_id)
        async with self._lock:
            current = self._desktops.get(key)
            if current is None:
                return {"stopped": False, "was_running": False}
            if current.desktop_session_id != session_id:
                logger.info("stop of slot %s refused: a newer session holds it", key[1])
                return {
                    "stopped": False,
                    "conflict": True,
                    "current_session_id": current.desktop_session_id,
                }
            await self._remove(current, "stopped")
            return {"stopped": True, "stopped_session_id": session_id}

    async def probe(self, kind: str, slot: str) -> dict[str, Any]:
        """Probe one slot end to end (processes, ``vnc.html``, RFB through websockify)."""
        desktop = self._desktops.get((normalise_kind(kind), check_slot(slot)))
        if desktop is None:
            return {"kind": kind, "slot": slot, "running": False, "ok": False,
                    "reason": "not_running"}  # fmt: skip
        result = await self._health(desktop)
        return {
            "kind": desktop.kind,
            "slot": desktop.slot,
            "running": True,
            "desktop_session_id": desktop.desktop_session_id,
            **result.to_dict(),
        }

    def profile_status(self) -> list[dict[str, Any]]:
        """Every profile of this relay: available, or which programs it misses."""
        return [p.status() | {"default": name == self.config.default_profile}
                for name, p in sorted(self.profiles.items())]  # fmt: skip

    async def apps(
        self, desktop_session_id: str | None, default: tuple[str, str]
    ) -> dict[str, Any]:
        """The launchable apps of one running desktop's profile."""
        desktop = self._find(desktop_session_id, default)
        profile = self.profiles.get(desktop.profile or "")
        launchable = [a.to_dict() for a in profile.apps] if profile is not None else []
        return {"desktop_session_id": desktop.desktop_session_id, "profile": desktop.profile,
                "launchable": launchable}  # fmt: skip

    async def launch_app(
        self, desktop_session_id: str | None, default: tuple[str, str], app: object
    ) -> dict[str, Any]:
        """Start one of the profile's launchable apps in a running desktop, as its session's
        user; it joins the desktop's processes and stops with it."""
        async with self._lock:
            desktop = self._find(desktop_session_id, default)
            profile = self.profiles.get(desktop.profile or "")
            if profile is None or desktop.home is None:
                raise OpError(ErrorCode.UNAVAILABLE, "this desktop has no profile to launch from")
            entry = profile.app(app)
            argv = accessible_argv(profile.expand(entry.exec, Path(desktop.home)))
            user = await self.desktop_user()
            log = open_append(self.config.log_dir / f"{desktop.kind}-{desktop.slot}.log")
            try:
                child = ChildProcess.spawn(
                    f"app:{entry.id}", argv, env=desktop.session_env | dict(entry.env),
                    essential=False, output=log, user=user, held=True,
                )  # fmt: skip
            except OSError as err:
                raise OpError(ErrorCode.START_FAILED, f"{entry.id} did not start: {err}") from err
            finally:
                log.close()
            self._join(desktop, child)
            await self._save()
        logger.info("launched %s in desktop slot=%s", entry.id, desktop.slot)
        return {"desktop_session_id": desktop.desktop_session_id, "app": entry.id,
                "launched": True, "pid": child.pid, "accessible": entry.accessible}  # fmt: skip

    async def add_process(self, desktop_session_id: str, child: ChildProcess) -> bool:
        """Join a process started later (the accessibility worker) to a live desktop's: it
        stops with the desktop and is recorded like the others. False: no such desktop."""
        async with self._lock:
            desktop = self.live(desktop_session_id)
            if desktop is None:
                return False
            self._join(desktop, child)
            await self._save()
        return True

    async def enter_cgroup(self, desktop_session_id: str, pid: int) -> bool:
        """Move a process the relay started for a live desktop (its audio capture, run as the
        desktop's user) into the desktop's cgroup, without recording it; False: no such
        desktop, or the move failed. True where the host gives desktops no cgroup."""
        async with self._lock:
            if self.live(desktop_session_id) is None:
                return False
            cgroup = self._slots.cgroup_of(desktop_session_id)
            return cgroup is None or not cgroup.is_dir() or cgroups.enter(cgroup, pid)

    def _join(self, desktop: Desktop, child: ChildProcess) -> None:
        """A later child joins the desktop's processes and its cgroup (a held one before its
        program starts)."""
        self._slots.join_cgroup(desktop.desktop_session_id, child)
        desktop.processes.add(child)

    async def reset_home(self, *, kind: str, slot: str) -> dict[str, Any]:
        """Wipe the kept home of a slot; refused while a desktop runs there."""
        key = (normalise_kind(kind), check_slot(slot))
        async with self._lock:
            if (running := self._desktops.get(key)) is not None:
                raise OpError(
                    ErrorCode.BUSY,
                    "a desktop runs in this slot; stop it before resetting its home",
                    {"current_session_id": running.desktop_session_id},
                )  # fmt: skip
            await self.desktop_user()
            home = self._homes.home_of(*key, "", persist=True)
            existed = home.is_dir()
            await self._slots.sweep_user()
            await asyncio.to_thread(shutil.rmtree, home, True)
        logger.info("kept home of slot=%s reset (existed: %s)", key[1], existed)
        return {"kind": key[0], "slot": key[1], "reset": True, "existed": existed}

    def _find(self, desktop_session_id: str | None, default: tuple[str, str]) -> Desktop:
        if desktop_session_id is None:
            desktop = self._desktops.get(default)
        else:
            desktop = next((d for d in self._desktops.values()
                            if d.desktop_session_id == desktop_session_id), None)  # fmt: skip
        if desktop is None:
            raise OpError(ErrorCode.NOT_RUNNING, "no running desktop there; start one first")
        return desktop

    async def adopt_from_state(self, *, clean_up_later: bool = False) -> list[dict[str, Any]]:
        """Re-adopt desktops of an earlier relay that still pass the probe; clean up the rest.

        ``clean_up_later``: return once the desktops are adopted and stop the rest in a task
        (holding the lifecycle lock, so no start runs before it is done): a restarted relay
        says ``hello`` without waiting for the stops (docs/desktops.md, "Relay restarts")."""
        keep = await self._lease_for_adoption() and not self._homes.changed_user
        adopted, leftovers = await adopt_recorded(self._slots, self._health, keep=keep)
        cleaning = clean_up(self._slots, self._homes, leftovers)
        if clean_up_later:
            self._cleanup = asyncio.create_task(self._clean_up_logged(cleaning))
        else:
            await cleaning
        return [d.to_row() for d in adopted]

    async def _lease_for_adoption(self) -> bool:
        """A relay that names its desktop user holds it from its start (refused while another
        relay holds it); one whose earlier run left desktops leases the account they run as.
        False: no pool account could be had, so recorded desktops cannot be kept."""
        recorded = await asyncio.to_thread(self._slots.state.load)
        starting = await asyncio.to_thread(self._slots.state.load_starting)
        if not (self.config.desktop_user or recorded or starting):
            return True
        try:
            self._slots.user = await self._homes.desktop_user()
        except OpError as err:
            if self.config.desktop_user:
                raise
            logger.error("recorded desktops are not re-adopted: %s", err.message)
            return False
        return True

    @staticmethod
    async def _clean_up_logged(cleaning: Awaitable[None]) -> None:
        try:
            await cleaning
        except Exception:
            logger.exception("cleaning up after re-adoption failed")

    def start_watchdog(self) -> None:
        """Begin periodic health checks (idempotent)."""
        self._watchdog.start()

    async def close(self, stop_desktops: bool) -> None:
        """Stop the watchdog; stop every desktop too when asked, else leave them for adoption."""
        if self._cleanup is not None:
            await self._cleanup
        await self._watchdog.stop()
        async with self._lock:
            if stop_desktops:
                for desktop in self._sorted():
                    await self._remove(desktop, "relay closing", save=False)
            await self._save()
            self._desktops.clear()
            self._release_user()
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _session_size(self, home: Path, desktop_session_id: str) -> int:
        """Bytes of a session's home and TMPDIR (blocking)."""
        return directory_size(home) + directory_size(self._homes.tmp_of(desktop_session_id))

    def _release_user(self) -> None:
        """The relay's end: its account, its (empty) cgroup and TMPDIR parent go back."""
        self._homes.release()
        if (parent := self._slots.cgroups()) is not None:
            cgroups.remove_if_empty(parent)
        with contextlib.suppress(OSError):
            self._homes.tmp_root().rmdir()

    async def check_all(self) -> None:
        """One watchdog round: beat the heartbeat, probe every desktop, tear down failures (a
        dead essential process at once, a chain that does not answer after
        ``probe_failures`` rounds in a row: ``ProbeStrikes``)."""
        await asyncio.to_thread(beat, self.config)
        snapshot = list(self._desktops.values())
        if not snapshot:
            return
        results = await asyncio.gather(*(self._health(d, retry=True) for d in snapshot))
        self._strikes.keep_only(d.desktop_session_id for d in snapshot)
        verdicts = [self._strikes.verdict(d.desktop_session_id, r)
                    for d, r in zip(snapshot, results, strict=True)]  # fmt: skip
        failed = [(d, why) for d, why in zip(snapshot, verdicts, strict=True) if why is not None]
        if failed:
            await self._fail_all(failed)
        if any(d.audio and audio_lost(d.processes) for d in snapshot):
            await self._audio_lost()
        self._note_a11y_bus_lost(snapshot)
        await self._check_homes([d for d in snapshot if self._desktops.get(d.key) is d])

    async def _check_homes(self, desktops: list[Desktop]) -> None:
        """Every ``home_check_interval_s``: a desktop whose home (its TMPDIR inside) grew past
        ``home_max_mb`` is stopped, with the reason in its ``failed`` event."""
        now = time.monotonic()
        if now < self._next_home_check:
            return
        self._next_home_check = now + self.config.home_check_interval_s
        with_home = [d for d in desktops if d.home]
        sizes = await asyncio.gather(*(
            asyncio.to_thread(self._session_size, Path(d.home or ""), d.desktop_session_id)
            for d in with_home
        ))  # fmt: skip
        over = [
            (d, error.message)
            for d, size in zip(with_home, sizes, strict=True)
            if (error := self._homes.over_limit(size, d.slot)) is not None
        ]
        if over:
            await self._fail_all(over)

    def _note_a11y_bus_lost(self, desktops: list[Desktop]) -> None:
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
                    desktop.slot, child.returncode(),
                )  # fmt: skip

    # -- internals ----------------------------------------------------------------------

    @property
    def http(self) -> aiohttp.ClientSession:
        # Connections are not reused: websockify forks a worker per connection.
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True), trust_env=False
            )
        return self._http

    def _sorted(self) -> list[Desktop]:
        return self._slots.sorted()

    def _check_can_start(self, req: StartRequest) -> Profile:
        if len(self._desktops) >= self.config.max_desktops:
            raise OpError(
                ErrorCode.LIMIT_REACHED,
                f"at most {self.config.max_desktops} desktops on this relay",
                {"max_desktops": self.config.max_desktops},
            )
        if missing := missing_binaries(self.config):
            raise OpError(ErrorCode.UNAVAILABLE, f"missing: {', '.join(missing)}")
        return choose(self.profiles, req.profile)

    async def desktop_user(self) -> DesktopUser | None:
        """Who desktops run as (None: as the relay); leased on first use when root."""
        user = await self._homes.desktop_user()
        self._slots.user = user
        return user

    async def _running_in(self, kind: str, slot: str, events: list[Event]) -> Desktop | None:
        """The slot's desktop if its essential processes run; a dead one is failed here."""
        desktop = self._desktops.get((kind, slot))
        if desktop is None:
            return None
        if dead := desktop.processes.dead_essentials():
            reason = f"process exited: {', '.join(dead)}"
            await self._remove(desktop, reason)
            events.append(failed_event(desktop, reason))
            return None
        return desktop

    async def _health(self, desktop: Desktop, retry: bool = False) -> ProbeResult:
        """Essential processes first (cheap), then the end-to-end chain."""
        if dead := desktop.processes.dead_essentials():
            reason = f"process exited: {', '.join(dead)}"
            return ProbeResult(ok=False, reason=reason, checks={"processes": False})
        timeout = self.config.probe_timeout_s
        result = await probe_chain(self.http, desktop.websockify_port, timeout)
        if not result.ok and retry and not desktop.processes.dead_essentials():
            # One immediate second look: a single slow answer must not kill a healthy desktop.
            result = await probe_chain(self.http, desktop.websockify_port, timeout)
        result.checks = {"processes": True, **result.checks}
        return result

    async def _audio_lost(self) -> None:
        """Watchdog: desktops whose sound server died keep running, without audio."""
        events: list[Event] = []
        async with self._lock:
            for desktop in list(self._desktops.values()):
                self._note_audio_lost(desktop, events)
            if events:
                await self._save()
        await self._emit(events)

    def _note_audio_lost(self, desktop: Desktop, events: list[Event]) -> None:
        if desktop.audio and audio_lost(desktop.processes):
            desktop.audio, desktop.audio_reason = False, REASON_FAILED
            logger.warning("desktop slot=%s lost its sound server", desktop.slot)
            events.append(desktop.to_row() | {"reason": REASON_FAILED, "updated_at": now_iso()})

    async def _fail_all(self, failed: Iterable[tuple[Desktop, str]]) -> None:
        events: list[Event] = []
        async with self._lock:
            for desktop, reason in failed:
                # A stop or restart may have replaced this incarnation while it was probed.
                if self._desktops.get(desktop.key) is desktop:
                    await self._remove(desktop, reason, save=False)
                    events.append(failed_event(desktop, reason))
            if events:
                await self._save()
        await self._emit(events)

    async def _remove(self, desktop: Desktop, reason: str, save: bool = True) -> None:
        await self._slots.remove(desktop, reason, save)

    async def _save(self) -> None:
        await self._slots.save()

    async def _emit(self, events: list[Event]) -> None:
        if self.on_change is None:
            return
        for event in events:
            try:
                await self.on_change(event)
            except Exception:
                logger.exception("desktop on_change callback failed")
